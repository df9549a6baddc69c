"""The plugin's own hooks. Implement them in a conftest.py or a plugin."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_specbench_make_engine(config: pytest.Config, group: Any) -> Any:
    """Create and return the engine for an engine group (a method at one TP size).

    The first non-None result wins; the default looks up ``group.method.backend`` in the
    backend registry (``pytest_specbench.engines.BACKENDS``). Raise to fail every cell of
    the group; the run continues with the next group. Example, a conftest.py that serves one
    method from an engine of your own::

        def pytest_specbench_make_engine(config, group):
            if group.method.name == "mine":
                return MyEngine(group)   # implements pytest_specbench.engines.base.Engine
    """


@pytest.hookspec
def pytest_specbench_cell_done(config: pytest.Config, result: dict[str, Any]) -> None:
    """Called on the controller (also under xdist) for each finished cell's result dict,
    before it is written to the JSON: ``result["params"]``, ``result["metrics"]``, ...
    Mutating ``result["metrics"]`` adds fields to the cell's ``extra_info``."""
