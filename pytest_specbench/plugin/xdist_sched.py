"""xdist's workers as the run sees them: how many (``workers``), the plan printed by the
controller itself under -n (``run_plan_in_controller``), a node id's cell id, the warning for CPU
engines that share the cores, and the ``workerinput`` key of the race's decision store.

The rest of the run's xdist side lives in modules of one concern each: the GPU pool and its
leases (gpu_pool.py), why a cell is skipped (skip_reasons.py), the packed schedule
(packed_schedule.py), the group hooks' window (hook_windows.py) and the scheduler with the
controller's hooks (xdist_policy.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

from ..engines import get_backend
from .state import SpecbenchState

RACE_STORE_KEY = "specbench_race_store"  # workerinput: the controller's decision store (race.py)


def workers(config: pytest.Config) -> int:
    """Worker processes of this run: xdist's -n / --tx, else 1."""
    if getattr(config.option, "dist", "no") == "no" or not getattr(config.option, "tx", None):
        return 1
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))


def run_plan_in_controller(config: pytest.Config, st: SpecbenchState) -> None:
    """--specbench-plan under -n K: the controller collects and prints the plan for K workers
    itself (xdist would start K workers that print nothing); nothing runs either way."""
    st.plan_workers = workers(config)
    ds = config.pluginmanager.get_plugin("dsession")
    if ds is not None:
        config.pluginmanager.unregister(ds)
    config.option.dist = "no"
    config.option.tx = []


def cell_id_of(nodeid: str) -> str | None:
    """A bench item's cell id: its node id's parameter (``...::test_throughput[ID]``), or None."""
    i = nodeid.rfind("[")
    return nodeid[i + 1 : -1] if i >= 0 and nodeid.endswith("]") else None


def warn_cpu_engines_share_cores(config: pytest.Config, st: SpecbenchState) -> None:
    """CPU backends under -n K: K engines at once split the cores (each gets cores // K torch
    threads, engines/hf.py); past one thread each they oversubscribe them. Said once, on the
    controller, when it learns the session's items (a worker's collection, or its own under
    --specbench-plan) and they hold a cell of a CPU backend: a session that collected none (a
    project's own tests, run beside its CPU matrix) starts no CPU engine and is told nothing."""
    k = workers(config)
    if hasattr(config, "workerinput") or k <= 1 or st.matrix is None:
        return
    cpu = {
        c.id
        for c in st.matrix.cells()
        if not get_backend(c.method.backend).gpu and not get_backend(c.method.backend).external
    }
    if not cpu:
        return
    cores = os.cpu_count() or 1
    share = f"{max(1, cores // k)} thread(s) each"
    over = " (more engines than cores: they oversubscribe them)" if k > cores else ""
    warning = pytest.PytestConfigWarning(
        f"-n {k} runs {k} CPU engines at once on {cores} cores, {share}{over}: CPU cells run "
        "slower and noisier than serially, and cells that overlap disturb each other (marked "
        "'disturbed'); run CPU matrices without -n to compare methods"
    )

    class CpuCellsCollected:
        said = False

        def _told(self, nodeids: Iterable[str]) -> None:
            if self.said or not any(cell_id_of(n) in cpu for n in nodeids):
                return
            self.said = True
            config.issue_config_time_warning(warning, stacklevel=2)

        def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
            self._told(ids)

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            self._told(item.nodeid for item in session.items)

    config.pluginmanager.register(CpuCellsCollected(), "specbench-cpu-cells-warning")
