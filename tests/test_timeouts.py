"""The cell time limit is enforced inside the engine's event loop, also under uvloop (sglang's)."""

from __future__ import annotations

import asyncio
import time

import pytest

from pytest_specbench.engines.base import CellTimeout, guard


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_guard_fires_on_an_idle_loop(kind: str) -> None:
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        with pytest.raises(CellTimeout, match="no result before the cell's time limit"):
            loop.run_until_complete(guard(asyncio.Event().wait(), time.monotonic() + 0.2))
        # without a deadline the coroutine runs to its end
        assert loop.run_until_complete(guard(asyncio.sleep(0, result=7), None)) == 7
    finally:
        loop.close()
