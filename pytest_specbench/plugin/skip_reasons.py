"""Why a cell does not run: its backend refuses its group, it is wider than the GPU pool
(gpu_pool.py), the plan finds it does not fit, or the run being resumed measured it. Collection
marks such a cell skipped; the packed schedule (packed_schedule.py) and the shards leave it out."""

from __future__ import annotations

import pytest

from ..engines import get_backend
from ..matrix.cells import Cell
from .state import SpecbenchState


def skip_reason(config: pytest.Config, st: SpecbenchState, cell: Cell) -> str | None:
    """Why a cell does not run (collection marks it skipped; the schedule leaves it out)."""
    reason = get_backend(cell.method.backend).skip_reason(cell.group) or st.gpu_skip_reason(cell)
    if not reason:
        reason = st.get_plan().skip_reason(cell)
    if cell.id in st.resumed:  # measured by the run being resumed: no engine start for it
        reason = f"measured in {config.getoption('specbench_resume')} (resumed)"
    return reason
