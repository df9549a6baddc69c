"""Why cell time limits live in the event loop: pytest-timeout vs uvloop (sglang's loop).

    pytest scripts/uvloop_timeout_probe.py -p no:specbench -rA

Seen 2026-11-29 (pytest-timeout 2.4.0, uvloop 0.23.0, CPython 3.11): with asyncio's loop,
pytest-timeout's SIGALRM fails the test after 2 s; with uvloop it does not fire at all while
the loop waits, and only the in-loop deadline (asyncio.wait_for, 6 s) ends the wait.
"""

import asyncio
import time

import pytest
import uvloop


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.timeout(2, func_only=True)
def test_hang(loop_kind):
    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    t0 = time.time()
    try:
        loop.run_until_complete(asyncio.wait_for(asyncio.Event().wait(), 6))
    except asyncio.TimeoutError:
        pytest.fail(f"{loop_kind}: only the in-loop deadline fired, after {time.time() - t0:.1f} s")
