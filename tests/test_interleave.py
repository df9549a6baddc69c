"""The baseline's rounds interleaved with a cell's (backends whose engines share a process):
two identical engines on a machine that drifts are not told apart; measured apart, they are."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from bench_project import fake_conftest, write_project

HERE = Path(__file__).parent
CONFTEST = fake_conftest(
    "FakeDriftingEngine", 'register_backend("fake-drifting", FakeDriftingEngine, gpu=False, interleave=True)'
)
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-drifting, model: m}
  twin: {backend: fake-drifting, model: m}
workloads:
  throughput:
    concurrency: [2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 4
    warmup: 0
  poisson:
    kind: throughput
    request_rate: [50]
    concurrency: [8]
    output_tokens: [8]
    prompt_tokens: 16
    requests: 8
    rounds: 4
    warmup: 0
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict:
    write_project(pytester, MATRIX, CONFTEST)
    # the machine slows by half of its speed per second of the run: the twin's cells, run after
    # ar's, would read about x0.6 against ar's own cells
    monkeypatch.setenv("FAKE_DRIFT_T0", str(time.monotonic()))
    monkeypatch.setenv("FAKE_DRIFT_PER_S", "0.5")
    monkeypatch.setenv("FAKE_TOKEN_S", "0.004")
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--benchmark-json=out.json", *args)
    res.assert_outcomes(passed=4)
    doc = json.loads((pytester.path / "out.json").read_text())
    return {b["param"]: b for b in doc["benchmarks"]} | {"_doc": doc, "_out": res.stdout.str()}


@pytest.mark.slow
def test_interleaved_rounds_do_not_tell_identical_engines_apart_on_a_drifting_machine(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _run(pytester, monkeypatch)
    doc = got.pop("_doc")
    out = got.pop("_out")
    spec = doc["specbench"]
    assert spec["engine_starts"] == 2  # ar-tp1, twin-tp1; the baseline instance is not a group's start
    (ref,) = spec["reference_engines"]
    assert ref["group"] == "ar-tp1" and ref["for"] == "twin-tp1" and ref["warm"]["shapes"]
    assert "baseline instances for interleaved rounds: 1 (ar-tp1 in main)" in out
    for cid in ("throughput-twin-tp1-c2-out8", "poisson-twin-tp1-c8-out8-rate50"):
        e = got[cid]["extra_info"]
        r = e["reference"]
        assert r["method"] == "ar" and r["group"] == "ar-tp1"
        assert len(r["round_tokens_per_s"]) == len(r["round_latency_s_p50"]) == 4  # the timed rounds
        assert e["speedup_pairing"] == "interleaved" and e["speedup_pairs"] == 4
        v = e["speedup_verdict"]
        assert v in ("not separated", "within ±2%") or v.startswith("no verdict: "), (cid, v)
    for cid in ("throughput-ar-tp1-c2-out8", "poisson-ar-tp1-c8-out8-rate50"):
        assert "reference" not in got[cid]["extra_info"]  # the baseline is its own baseline
        assert got[cid]["extra_info"]["speedup_verdict"] == "baseline"


def test_without_interleaving_the_same_drift_reads_slower(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the interleaving prevents: the twin's cells divide by ar's, run seconds before (the
    drift sentinel, which would withhold the verdict, is off: tests/test_drift.py)."""
    got = _run(pytester, monkeypatch, "--specbench-no-interleave", "--specbench-no-sentinel")
    got.pop("_doc")
    e = got["throughput-twin-tp1-c2-out8"]["extra_info"]
    assert "reference" not in e and e["speedup_pairing"] == "digest"
    # "slower", or withheld when the suite's other processes took the CPU (-n) during the twin's
    # cell or ar's: the interval is below 1 either way
    v = e["speedup_verdict"]
    withheld = ("no verdict: the cell was disturbed", "no verdict: its baseline was disturbed")
    assert v == "slower" or v.startswith(withheld), v
    assert e["speedup_vs_ar_ci95"][1] < 0.98, (e["speedup_vs_ar"], e["speedup_vs_ar_ci95"])


def test_rounds_alternate_which_engine_goes_first() -> None:
    """A B, B A, A B, B A: a drift that is linear over the cell cancels over pairs of rounds."""
    from pytest_specbench.engines.base import Request, RequestRecord
    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.workloads import rounds

    order: list[str] = []

    class FakeNamed:
        def __init__(self, name: str):
            self.name = name

        def flush_cache(self) -> None:
            pass

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": {"concurrency": [1], "rounds": 4, "warmup": 1}},
    }
    (cell,) = parse(doc, "m.yaml").cells()
    plans = [rounds.RoundPlan([Request((1, 2), 4, tag=f"round{r}/req0")]) for r in range(5)]

    def round_fn(eng: FakeNamed, plan: rounds.RoundPlan) -> list[RequestRecord]:
        order.append(eng.name)
        return [RequestRecord(2, 4, 0.01, tag=plan.requests[0].tag, start_s=0.0, end_s=0.01)]

    ref = rounds.Reference(FakeNamed("B"), "base", "base-tp1")  # type: ignore[arg-type]
    run = rounds.timed(FakeNamed("A"), cell, plans, round_fn, None, ref)  # type: ignore[arg-type]
    # warm-up (A B), then the timed rounds; a settled warm-up needs a second round (A alone)
    timed_order = order[-8:]
    assert timed_order == ["A", "B", "B", "A", "A", "B", "B", "A"], order
    assert run.reference is not None and len(run.reference["round_tokens_per_s"]) == 4


def _timed_with(
    monkeypatch: pytest.MonkeyPatch,
    a_rates: list[float],
    b_rates: list[float] | None,
    latencies: tuple[float, float] | None = None,
):
    """rounds.timed on scripted per-round tok/s (A: the cell, B: the reference), rounds 3,
    max_rounds 6, no warm-up. ``latencies`` (A's, B's): an open loop whose requests take that
    long (its verdict rests on p50 latency, not tok/s)."""
    from pytest_specbench.engines.base import Request, RequestRecord
    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.workloads import rounds

    monkeypatch.setattr(
        rounds, "_round_rate", lambda recs, dt, c, closed: (float(recs[0].output_tokens), None)
    )
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": {"concurrency": [1], "rounds": 3, "max_rounds": 6, "warmup": 0}},
    }
    if latencies is not None:
        doc["workloads"]["throughput"]["request_rate"] = [1.0]
    (cell,) = parse(doc, "m.yaml").cells()
    arrivals = [0.0] if latencies is not None else None
    plans = [rounds.RoundPlan([Request((1, 2), 4, tag=f"round{r}/req0")], arrivals) for r in range(6)]
    latency = dict(zip("AB", latencies or (0.01, 0.01), strict=True))
    left = {"A": list(a_rates), "B": list(b_rates or [])}

    class FakeScripted:
        def __init__(self, name: str):
            self.name = name

        def flush_cache(self) -> None:
            pass

    def round_fn(eng: FakeScripted, plan: rounds.RoundPlan) -> list[RequestRecord]:
        return [RequestRecord(2, int(left[eng.name].pop(0)), latency[eng.name], tag=plan.requests[0].tag)]

    ref = rounds.Reference(FakeScripted("B"), "ar", "ar-tp1") if b_rates is not None else None  # type: ignore[arg-type]
    return rounds.timed(FakeScripted("A"), cell, plans, round_fn, None, ref)  # type: ignore[arg-type]


def test_max_rounds_stops_when_the_verdict_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _timed_with(monkeypatch, [200, 204, 198, 1, 1, 1], [100, 101, 99, 1, 1, 1])
    assert run.extra["rounds_run"] == 3 and len(run.round_times) == 3
    assert run.extra["rounds_stop"].startswith("decided after 3 rounds: faster ["), run.extra
    assert run.reference is not None and run.reference["round_tokens_per_s"] == [100.0, 101.0, 99.0]
    assert len(run.round_digests) == 3


def test_max_rounds_in_an_open_loop_decides_on_latency_against_the_baselines_latency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cell's requests take 0.2 s, the baseline's 0.1 s: x0.50 slower, decided after 3 rounds.
    (The baseline's tok/s against the cell's latency would read 'faster'.)"""
    run = _timed_with(monkeypatch, [4] * 6, [4] * 6, latencies=(0.2, 0.1))
    assert run.extra["rounds_run"] == 3
    assert run.extra["rounds_stop"] == "decided after 3 rounds: slower [0.500, 0.500]", run.extra


def test_max_rounds_runs_on_while_not_separated_then_says_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # ratios 1.10, 0.90, 1.10, 0.90, 1.10, 0.90: never outside nor inside the ±2 % margin
    run = _timed_with(monkeypatch, [110, 90, 110, 90, 110, 90], [100] * 6)
    assert run.extra["rounds_run"] == 6 and len(run.round_times) == 6
    assert run.extra["rounds_stop"].startswith("max_rounds (6) reached, not decided: x"), run.extra
    assert run.extra["rounds_stop"].endswith("not separated")


def test_max_rounds_without_a_reference_reads_the_rounds_own_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # looks at rounds 3..6 (stats/sequential.py): ±1.2 % after 3 rounds
    steady = _timed_with(monkeypatch, [1000, 1000, 1005, 0, 0, 0], None)
    assert steady.extra["rounds_run"] == 3
    assert steady.extra["rounds_stop"].startswith("decided after 3 rounds: its rounds' interval ±")
    assert steady.extra["rounds_stop"].endswith(
        "(its half of a comparison measured apart; the verdict is read after the run)"
    )
    # 100, 130, 70, ...: ±30 % apart, narrowing as rounds come but never within ±2 % by round 6
    noisy = _timed_with(monkeypatch, [100, 130, 70, 100, 130, 70], None)
    assert noisy.extra["rounds_run"] == 6
    assert noisy.extra["rounds_stop"].startswith(
        "max_rounds (6) reached, not decided: its rounds' interval ±"
    )


def test_max_rounds_below_rounds_is_refused() -> None:
    from pytest_specbench.matrix.checks import MatrixError
    from pytest_specbench.matrix.schema import parse

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": {"rounds": 5, "max_rounds": 3}},
    }
    with pytest.raises(
        MatrixError, match=r"m.yaml: workloads.throughput.max_rounds: 3 is below rounds \(5\)"
    ):
        parse(doc, "m.yaml")


def test_each_round_starts_with_the_survivors_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before each round's clock the garbage is collected and what survives is frozen, so the next
    round's collection walks only what was made since (a full walk of a process with torch and
    transformers loaded took 0.2-0.4 s per round)."""
    import gc

    from pytest_specbench.engines.base import Request, RequestRecord
    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.workloads import rounds

    # the gc module itself, not the suite's stand-in that leaves the heap frozen (conftest.py):
    # the cell's unfreeze() empties the frozen generation, so only the rounds' own freeze fills it
    monkeypatch.setattr(rounds, "gc", gc)

    class FakeFrozen:
        def flush_cache(self) -> None:
            pass

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": {"concurrency": [1], "rounds": 3, "warmup": 0}},
    }
    (cell,) = parse(doc, "m.yaml").cells()
    plans = [rounds.RoundPlan([Request((1, 2), 4, tag=f"round{r}/req0")]) for r in range(3)]
    frozen: list[int] = []

    def round_fn(eng: FakeFrozen, plan: rounds.RoundPlan) -> list[RequestRecord]:
        frozen.append(gc.get_freeze_count())
        return [RequestRecord(2, 4, 0.01, tag=plan.requests[0].tag, start_s=0.0, end_s=0.01)]

    try:
        rounds.timed(FakeFrozen(), cell, plans, round_fn, None)  # type: ignore[arg-type]
        assert len(frozen) == 3 and all(n > 0 for n in frozen), frozen
    finally:
        gc.unfreeze()
