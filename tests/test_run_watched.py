"""base.run_watched never leaves a coroutine unawaited: one it could not start is closed."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from pytest_specbench.engines.base import run_watched
from pytest_specbench.engines.sglang import EngineCrashed


class FakeCrashedEngine:
    crashed = "the server exited (code 1)"
    deadline = None

    def _crash_error(self) -> EngineCrashed:
        return EngineCrashed(f"g: engine crashed ({self.crashed})")

    def _dead(self) -> None:
        return None

    def _mark_crashed(self, why: str) -> None:
        self.crashed = why


async def _round() -> list[int]:
    return [1]


def test_a_crashed_engine_closes_the_round_it_never_started() -> None:
    loop = asyncio.new_event_loop()
    try:
        coro = _round()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises(EngineCrashed, match="engine crashed"):
                run_watched(FakeCrashedEngine(), loop, coro)
            del coro
            gc.collect()
        assert not [w for w in seen if "never awaited" in str(w.message)]
    finally:
        loop.close()


def test_a_live_engine_runs_the_round() -> None:
    eng = FakeCrashedEngine()
    eng.crashed = None
    loop = asyncio.new_event_loop()
    try:
        assert run_watched(eng, loop, _round()) == [1]
    finally:
        loop.close()
