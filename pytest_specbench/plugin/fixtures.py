"""The bench functions' fixtures: ``engine`` (the live engine of a cell's group, one start per
group) and ``specbench`` (``specbench.run(engine, cell)``), and the default
``pytest_specbench_make_engine`` (the registered backend's engine). Registered with the entry
point (hooks.py, ``pytest_plugins``)."""

from __future__ import annotations

from typing import Any

import pytest

from ..engines import get_backend
from ..matrix.cells import EngineGroup
from .runner import CellRunner
from .state import get_state as _state


def pytest_specbench_make_engine(config: pytest.Config, group: EngineGroup) -> Any:
    return get_backend(group.method.backend).create(group)


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Any:
    """The live engine of the requesting cell's (method, TP) group; one start per group."""
    group = getattr(request, "param", None)
    if not isinstance(group, EngineGroup):
        raise pytest.UsageError(
            "the `engine` fixture is parametrized by pytest-specbench: "
            "request it together with `cell` in a bench function"
        )
    st = _state(request.config)
    eng = st.start_engine(group)
    yield eng
    st.stop_engine(group, eng)


@pytest.fixture
def specbench(request: pytest.FixtureRequest) -> CellRunner:
    """``specbench.run(engine, cell)`` measures the cell and records it for the JSON."""
    return CellRunner(request.node)
