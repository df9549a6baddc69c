"""Verdicts that hold: the drift margin, the round as the open loop's unit, no verdict for a
saturated or disturbed cell, and disturbance measured from other processes' CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_specbench.stats import paired
from pytest_specbench.stats.paired import Interval


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
    assert out["disturbed"].startswith("other processes took "), out
    if os.getloadavg()[0] < (os.cpu_count() or 1):  # named among the top three unless others load it more
        assert "python" in out["disturbed"], out
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
    from pytest_specbench.stats.metrics import open_loop_metrics

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
    assert [r.queue_s for r in spread] == [0.0, 0.0, 0.0]
    together = asyncio.run(open_loop(Sleepy(), reqs, [0.0, 0.0, 0.0], 1))  # type: ignore[arg-type]
    assert sorted(r.queue_s > 0.03 for r in together) == [False, True, True]


# ----------------------------------------------------------------------------- twins behind a queue


class FakeBatchServer:
    """One batch loop serves every request: each step advances all running requests (at most
    ``batch``) by one token and takes STEP_S x a noise factor drawn per step (lognormal, and now
    and then a stall 8x as long), so a slow moment delays every request in flight and the
    requests of a round are correlated, as on a real server. Two instances are identical engines
    with their own noise."""

    def __init__(self, seed: int, batch: int = 8, step_s: float = 0.002):
        import asyncio
        import random

        self.rng = random.Random(seed)
        self.batch, self.step_s = batch, step_s
        self._loop = asyncio.new_event_loop()
        self.deadline = None
        self.backend = "fake"

    def tokenizer(self):  # noqa: ANN201
        sys.path.insert(0, os.path.dirname(__file__))
        from fake_engine import FakeTokenizer

        return FakeTokenizer()

    def flush_cache(self) -> None:
        pass

    def run(self, coro):  # noqa: ANN001, ANN201
        from pytest_specbench.engines.base import guard

        return self._loop.run_until_complete(self._serve(guard(coro, None)))

    async def _serve(self, coro):  # noqa: ANN001, ANN202
        import asyncio

        self.waiting: list = []
        self.running: list = []
        stop = asyncio.Event()
        task = asyncio.ensure_future(coro)
        task.add_done_callback(lambda _: stop.set())
        while not stop.is_set():
            while self.waiting and len(self.running) < self.batch:
                self.running.append(self.waiting.pop(0))
            if not self.running:
                await asyncio.sleep(0.0005)
                continue
            noise = self.rng.lognormvariate(0.0, 0.25) * (8.0 if self.rng.random() < 0.02 else 1.0)
            await asyncio.sleep(self.step_s * noise)
            for r in list(self.running):
                r[1] += 1
                if r[1] >= r[2]:
                    self.running.remove(r)
                    r[0].set_result(None)
        return task.result()

    async def agenerate(self, request):  # noqa: ANN001, ANN201
        import asyncio
        import time

        from pytest_specbench.engines.base import RequestRecord

        t0 = time.perf_counter()
        done = asyncio.get_running_loop().create_future()
        self.waiting.append([done, 0, request.max_new_tokens])
        await done
        return RequestRecord(1, request.max_new_tokens, time.perf_counter() - t0, tag=request.tag)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_engines_behind_a_queue_are_never_told_apart(temperature: float) -> None:
    """Closed loop at c8 (4 waves), an open loop well below capacity (40 req/s, about 1.3 in flight)
    and one beyond it (4 client slots, 2000 req/s offered, 16 requests a round): no
    "faster"/"slower", no interval wholly outside 1 ± 3 %, and no verdict at all for the saturated
    one. 5 timed rounds and no warm-up: the fake server has nothing to warm (a warm-up round is
    repeated until two agree within rounds.WARM_TOLERANCE, here up to 3 more for its stalls)."""
    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.plugin.disturbance import DisturbanceMeter
    from pytest_specbench.stats.metrics import cell_metrics
    from pytest_specbench.workloads import kinds

    w = {"output_tokens": [16], "prompt_tokens": 8, "rounds": 5, "warmup": 0}
    if temperature:
        w["temperature"] = [temperature]
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}, "twin": {"backend": "hf", "model": "m"}},
        "workloads": {
            "closed": {"kind": "throughput", "concurrency": [8], **w},
            "calm": {"kind": "throughput", "concurrency": [8], "request_rate": [40], "requests": 32, **w},
            "flood": {"kind": "throughput", "concurrency": [4], "request_rate": [2000], "requests": 16, **w},
        },
    }
    cells = parse(doc, "m.yaml").cells()
    out: dict[str, dict] = {}
    for i, c in enumerate(cells):
        eng = FakeBatchServer(seed=1000 + i)
        run = kinds.run(eng, c, DisturbanceMeter())  # as the plugin measures a cell
        eng._loop.close()
        disturbed = run.extra.pop("disturbed", None)
        m = cell_metrics(
            run.records,
            run.round_times,
            run.round_output_tokens,
            request_digests=run.round_digests,
            request_rate=c.request_rate,
            round_windows=run.round_windows,
            one_wave=run.one_wave,
            offered_rates=run.extra.get("offered_request_rates") or (),
        )
        if disturbed:  # a busy machine (another test worker, a neighbour): no verdict, as in a run
            m["disturbed"] = disturbed
        out[c.id] = {"params": c.params(), "round_times": run.round_times, "metrics": m}
    for cid, r in out.items():
        if r["params"]["method"] != "twin":
            continue
        base = out[cid.replace("twin", "ar", 1)]
        cmp = paired.compare(r, base)
        v = cmp["speedup_verdict"]
        assert v in ("not separated", "within ±2%") or v.startswith("no verdict: "), (cid, cmp)
        lo, hi = cmp["speedup_vs_ar_ci95"]
        assert (lo <= 1.03 and hi >= 0.97) or v.startswith("no verdict: "), (cid, lo, hi)
        if r["params"]["workload"] == "flood":  # (calm may queue too on a loaded machine: then no verdict)
            assert r["metrics"]["saturated"] and v.startswith("no verdict: the cell saturated at "), (cid, v)


def test_the_open_loop_ranks_methods_by_the_rate_they_sustain() -> None:
    """Per method: the highest rate it ran unsaturated, and where it saturated; a method that
    sustains more comes first; in a shape's ranking the saturated cells come after the others."""
    from pytest_specbench.report import decide

    def cell(method: str, rate: float, p50: float, saturated: bool) -> dict:
        e = {
            "output_tokens_per_s": 100.0,
            "offered_request_rate": rate * 0.97,
            "achieved_request_rate": rate * (0.5 if saturated else 0.97),
            "saturated": saturated,
            "latency_s_p50": p50,
            "speedup_baseline": "ar",
        }
        params = {"method": method, "workload": "poisson", "tp": 1, "concurrency": 8, "request_rate": rate}
        return {"param": f"{method}-{rate}", "params": params, "extra_info": e}

    doc = {
        "benchmarks": [
            cell("ar", 4, 0.30, False),
            cell("ar", 16, 0.15, True),  # lower latency than ng, but saturated: ranked after
            cell("ng", 4, 0.10, False),
            cell("ng", 16, 0.20, False),
            cell("ng", 64, 0.80, True),
        ]
    }
    lines = decide.sustained_rates(doc)
    assert lines[0].startswith("ng poisson tp1 c8") and "sustains 16 req/s (p50 0.200 s)" in lines[0]
    assert "saturated at 64 req/s (completed 32.00 of 62.08 offered)" in lines[0]
    assert (
        lines[1].startswith("ar poisson") and "sustains 4 req/s" in lines[1] and "saturated at 16" in lines[1]
    )
    shapes = dict(decide.ranked_shapes(doc))
    (label,) = [k for k in shapes if "request_rate=16" in k]
    assert [r["method"] for r in shapes[label]] == ["ng", "ar"]


def test_another_process_on_the_engines_gpu_disturbs_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's compute processes on the leased GPUs: the run's own (this process, its children)
    are not a disturbance; any other is named. The CPU threshold is all of the cores (share=1.0,
    which others' share, clamped at 1, never exceeds): only the GPUs can disturb here, however
    loaded the machine running the test is."""
    from pytest_specbench.gpus import inventory
    from pytest_specbench.plugin.disturbance import DisturbanceMeter

    seen = {0: [(os.getpid(), 30_000)], 1: [(os.getpid(), 30_000)]}
    monkeypatch.setattr(inventory, "gpu_processes", lambda idx: {i: seen[i] for i in idx})
    meter = DisturbanceMeter(share=1.0, gpus=(0, 1))
    meter.start()
    assert "disturbed" not in meter.stop()
    seen[1] = [(os.getpid(), 30_000), (424242, 56_000)]  # someone else's service on GPU 1
    meter.start()
    out = meter.stop()
    assert out["other_gpu_processes"] == {"GPU 1: pid 424242": "56000 MiB"}
    assert out["disturbed"] == "another process used the engine's GPUs: GPU 1: pid 424242 (56000 MiB)"
    assert 0.0 <= out["other_cpu_share"] <= 1.0, out  # a share of the machine: at most all of it
