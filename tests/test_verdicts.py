"""Verdicts that hold: the drift margin, the round as the open loop's unit, no verdict for a
saturated or disturbed cell, and disturbance measured from other processes' CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_specbench.report import paired
from pytest_specbench.report.paired import Interval


def test_faster_and_slower_need_the_interval_beyond_the_drift_margin() -> None:
    # two identical CPU engines once read [1.002, 1.023]: it excludes 1.0 but not the 2 % margin
    assert Interval(1.012, 1.002, 1.023, 3).verdict() == "not separated"
    assert Interval(1.05, 1.021, 1.08, 3).verdict() == "faster"
    assert Interval(0.95, 0.90, 0.979, 3).verdict() == "slower"
    assert Interval(1.0, 0.985, 1.015, 3).verdict() == "within ±2%"
    assert Interval(0.1, 0.05, 0.15, 3).verdict(null=0.0) == "higher"  # differences keep their null


def _open(method: str, latencies: list[list[float]], **m: object) -> dict:
    tags = [f"round{r + 1}/req{i}" for r, lats in enumerate(latencies) for i in range(len(lats))]
    return {
        "params": {"method": method, "request_rate": 4.0},
        "round_times": [1.0] * len(latencies),
        "metrics": {
            "request_digests": [f"d{r}" for r in range(len(latencies))],
            "per_request": {"tag": tags, "latency_s": [x for lats in latencies for x in lats]},
            **m,
        },
    }


def test_an_open_loop_compares_paired_rounds_p50_latency_not_requests() -> None:
    """Round p50s AR 1.0 / 2.0 / 1.5 s, the cell 0.5 / 1.0 / 0.75 s: twice as fast in every round,
    so the interval is the point (a request-level bootstrap would have had 9 "independent" pairs)."""
    base = _open("ar", [[0.9, 1.0, 1.1], [1.9, 2.0, 2.1], [1.4, 1.5, 1.6]])
    cell = _open("ng", [[0.4, 0.5, 0.6], [0.9, 1.0, 1.1], [0.65, 0.75, 0.85]])
    out = paired.compare(cell, base)
    assert out["speedup_vs_ar"] == pytest.approx(2.0)
    assert out["speedup_pairs"] == 3  # rounds, not requests
    assert out["speedup_vs_ar_ci95"] == pytest.approx([2.0, 2.0])
    assert out["speedup_metric"].startswith("latency_s_p50 ratio (open loop; paired rounds'")
    assert out["speedup_verdict"] == "faster"


def test_a_saturated_or_disturbed_cell_gets_no_verdict() -> None:
    base = _open("ar", [[1.0, 1.0], [1.0, 1.0]])
    sat = _open(
        "ng", [[0.5, 0.5], [0.5, 0.5]], saturated=True, offered_request_rate=4.0, achieved_request_rate=2.72
    )
    out = paired.compare(sat, base)
    assert out["speedup_verdict"] == "no verdict: the cell saturated at 2.72 of 4.00 req/s offered"
    assert out["speedup_vs_ar"] == pytest.approx(2.0)  # the number stays, the verdict goes
    noisy = _open("ar", [[1.0, 1.0], [1.0, 1.0]], disturbed="other processes took 40% of the 2 cores")
    out = paired.compare(_open("ng", [[0.5, 0.5], [0.5, 0.5]]), noisy)
    assert (
        out["speedup_verdict"]
        == "no verdict: its baseline was disturbed (other processes took 40% of the 2 cores)"
    )


def test_disturbance_counts_cpu_taken_outside_the_run() -> None:
    """A busy loop outside this process tree (double-forked: not our descendant) over the window
    is reported with its share and named; without it the share is what the machine's own idle
    background takes, recorded either way."""
    from pytest_specbench.plugin.disturbance import DisturbanceMeter

    meter = DisturbanceMeter(share=0.10)
    marker = f"specbench-busy-{os.getpid()}"
    loop = f"import time, sys; sys.argv.append({marker!r}); t = time.time()\nwhile time.time() - t < 3: pass"
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{loop}" > /dev/null 2>&1 &'], check=True)
    time.sleep(0.3)  # the loop is running
    meter.start()
    time.sleep(1.0)
    out = meter.stop()
    assert out["other_cpu_share"] > 0.10, out
    assert out["disturbed"].startswith("other processes took ") and "python" in out["disturbed"], out
    # our own children are the run's: a busy child is not a disturbance
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"]
    )
    time.sleep(2.0)  # the double-forked loop has ended
    meter.start()
    time.sleep(1.0)
    own = meter.stop()
    child.wait()
    assert not any("pid " + str(child.pid) in x for x in own["other_cpu_top"]), own


def test_saturation_is_the_engine_not_keeping_up_and_the_clients_lateness_is_apart() -> None:
    """A request that waited 50 ms for a slot saturates; one whose arrival the client woke 50 ms
    late for, with a free slot, does not, and its lateness is neither in its latency nor judged."""
    from pytest_specbench.engines.base import RequestRecord
    from pytest_specbench.report.metrics import open_loop_metrics

    late = [RequestRecord(1, 8, 0.1, client_late_s=0.05), RequestRecord(1, 8, 0.1)]
    m = open_loop_metrics(late, 1.0, 4.0, offered=[2.89, 3.11])
    assert m["saturated"] is False and m["client_late_s_max"] == 0.05
    assert m["offered_request_rate"] == pytest.approx(3.0) and m["nominal_request_rate"] == 4.0
    waited = [RequestRecord(1, 8, 0.15, queue_s=0.05), RequestRecord(1, 8, 0.1)]
    assert open_loop_metrics(waited, 1.0, 4.0)["saturated"] is True


def test_the_open_loop_client_keeps_lateness_out_of_latency() -> None:
    """Through the real client: a slot free at every arrival means no queue time, whatever the
    event loop's lateness; a cap of one slot and simultaneous arrivals means queue time."""
    import asyncio

    from pytest_specbench.engines.base import Request, RequestRecord, open_loop

    class Sleepy:
        async def agenerate(self, request: Request) -> RequestRecord:
            await asyncio.sleep(0.05)
            return RequestRecord(1, 1, 0.05, tag=request.tag)

    reqs = [Request((1,), 1, tag=f"r{i}") for i in range(3)]
    spread = asyncio.run(open_loop(Sleepy(), reqs, [0.0, 0.2, 0.4], 1))  # type: ignore[arg-type]
    assert all(r.queue_s < 0.01 for r in spread)
    together = asyncio.run(open_loop(Sleepy(), reqs, [0.0, 0.0, 0.0], 1))  # type: ignore[arg-type]
    assert sorted(r.queue_s > 0.03 for r in together) == [False, True, True]
