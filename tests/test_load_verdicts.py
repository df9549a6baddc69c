"""Verdicts under load: a cell disturbed by other processes' CPU keeps the verdict of a comparison
whose baseline ran interleaved with it when both halves of every pair bore the load alike (per
round shares within LOAD_GAP) and the paired ratios vary by at most PAIR_CV_MAX; otherwise, and
for every other kind of comparison, a disturbed cell gets no verdict."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specbench.stats import paired
from pytest_specbench.stats.paired import LOAD_BIAS, LOAD_GAP, PAIR_CV_MAX, load_spread

DISTURBED = "other processes took 52% of the 2 cores over the timed rounds (more than 10%): python: 9.1 s"


def _cell(
    method: str,
    rates: list[float],
    *,
    ref_rates: list[float] | None = None,
    loads: list[float] | None = None,
    ref_loads: list[float] | None = None,
    **metrics: Any,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "output_tokens_per_s": sum(rates) / len(rates),
        "round_tokens_per_s": rates,
        "request_digests": [f"d{i}" for i in range(len(rates))],
        **metrics,
    }
    if loads is not None:
        m["round_other_cpu_share"] = loads
    if ref_rates is not None:
        m["reference"] = {
            "method": "ar",
            "group": "ar-tp1",
            "round_tokens_per_s": ref_rates,
            "round_latency_s_p50": [None] * len(ref_rates),
            "errors": 0,
            "saturated": False,
        }
        if ref_loads is not None:
            m["reference"]["round_other_cpu_share"] = ref_loads
    return {
        "params": {"method": method, "workload": "throughput", "tp": 1, "concurrency": 4},
        "round_times": [1.0] * len(rates),
        "metrics": m,
    }


AR = _cell("ar", [100.0, 104.0, 98.0])
# ngram about x1.30 its interleaved AR rounds, steady pair by pair (ratios 1.30, 1.31, 1.29)
NG_RATES, NG_REF = [130.0, 78.6, 116.1], [100.0, 60.0, 90.0]


def _verdict(cell: dict[str, Any]) -> dict[str, Any]:
    return paired.compare_all([AR, cell], "ar")[1]


def test_a_disturbed_cell_keeps_its_interleaved_verdict_when_both_halves_bore_the_load() -> None:
    # about x1.50 its interleaved AR rounds (ratios 1.50, 1.51, 1.49): beyond x1.28, what load alone
    # shifted a ratio
    ng = _cell(
        "ngram", [150.0, 90.6, 134.1], ref_rates=NG_REF, loads=[0.50, 0.62, 0.41],
        ref_loads=[0.55, 0.60, 0.45], disturbed=DISTURBED,
    )  # fmt: skip
    c = _verdict(ng)
    assert c["speedup_pairing"] == "interleaved" and c["speedup_verdict"] == "faster", c
    assert c["speedup_vs_ar"] == pytest.approx(1.50, abs=0.01)
    assert c["speedup_under_load"] == (
        "others took 41%-62% of the cores, alike in both halves of every pair (at most 5% apart; "
        "paired ratios' CV 0.7%); faster or slower only beyond x0.78..x1.28 (what load alone shifted a ratio)"
    )
    # x1.30 [1.27, 1.33] under the same load: inside what load alone can shift, not separated
    ng = _cell(
        "ngram", NG_RATES, ref_rates=NG_REF, loads=[0.50, 0.62, 0.41], ref_loads=[0.55, 0.60, 0.45],
        disturbed=DISTURBED,
    )  # fmt: skip
    assert _verdict(ng)["speedup_verdict"] == "not separated"


def test_under_load_a_verdict_needs_its_interval_beyond_the_wider_margin() -> None:
    """draft = target against AR beside two busy loops (docs/results/cpu-busy): ratios 0.80, 0.72,
    0.83, loads alike, x0.78 [0.65, 0.94]: "slower" by the quiet ±2 % margin, but within what load
    shifts such a ratio (quiet runs read x0.91-1.09): not separated."""
    loads = dict(loads=[0.60, 0.66, 0.70], ref_loads=[0.62, 0.65, 0.72], disturbed=DISTURBED)
    oracle = _cell("draft-oracle", [80.24, 72.02, 82.67], ref_rates=[100.0] * 3, **loads)
    c = _verdict(oracle)
    assert c["speedup_vs_ar_ci95"][1] < 0.98 and c["speedup_vs_ar_ci95"][1] > LOAD_BIAS, c
    assert c["speedup_verdict"] == "not separated" and c["speedup_under_load"], c
    # the same pairs on a quiet machine: slower
    quiet = _cell("draft-oracle", [80.24, 72.02, 82.67], ref_rates=[100.0] * 3)
    assert _verdict(quiet)["speedup_verdict"] == "slower"
    assert LOAD_BIAS == 0.78


def test_a_load_that_fell_on_one_half_of_a_pair_withholds_the_verdict() -> None:
    # round 2: others took 70 % of the cores during ngram's round, 45 % during AR's (25 points)
    ng = _cell(
        "ngram", NG_RATES, ref_rates=NG_REF, loads=[0.50, 0.70, 0.41], ref_loads=[0.55, 0.45, 0.45],
        disturbed=DISTURBED,
    )  # fmt: skip
    c = _verdict(ng)
    assert c["speedup_verdict"] == (
        "no verdict: the cell was disturbed and the load differed between the halves of a pair "
        "(round 2: others took 70% of the cores in its round, 45% in the baseline's; more than 10% apart)"
    ), c
    assert "speedup_under_load" not in c
    # 0.10 apart is still alike; 0.1001 is not
    assert load_spread([0.5, 0.6], [0.4, 0.5], [1.3, 1.3]).startswith("kept: ")
    assert not load_spread([0.5, 0.6], [0.3999, 0.5], [1.3, 1.3]).startswith("kept: ")
    assert LOAD_GAP == 0.10


def test_pairs_that_vary_too_much_under_load_withhold_the_verdict() -> None:
    # alike loads, but ratios 1.60, 1.31, 1.05: CV 21 %
    ng = _cell(
        "ngram", [160.0, 78.6, 94.5], ref_rates=NG_REF, loads=[0.5, 0.5, 0.5], ref_loads=[0.5, 0.5, 0.5],
        disturbed=DISTURBED,
    )  # fmt: skip
    c = _verdict(ng)
    assert c["speedup_verdict"] == (
        "no verdict: the cell was disturbed and its paired ratios vary by 21% (CV, more than 10%)"
    ), c
    assert PAIR_CV_MAX == 0.10


@pytest.mark.parametrize(
    "change, why",
    [
        ({"loads": None}, "its rounds' load was not measured per round for both halves of every pair"),
        ({"ref_loads": [0.5, None, 0.4]}, "its rounds' load was not measured per round for both halves"),
        (
            {"disturbed": "another process used the engine's GPUs: GPU 1: pid 4 (9 MiB)"},
            "was disturbed (another",
        ),
        ({"saturated": True}, "the cell saturated"),
    ],
)
def test_what_the_pairs_cannot_carry_still_withholds(change: dict[str, Any], why: str) -> None:
    kw: dict[str, Any] = {
        "ref_rates": NG_REF,
        "loads": [0.50, 0.62, 0.41],
        "ref_loads": [0.55, 0.60, 0.45],
        "disturbed": DISTURBED,
        **change,
    }
    c = _verdict(_cell("ngram", NG_RATES, **kw))
    assert c["speedup_verdict"].startswith("no verdict: ") and why in c["speedup_verdict"], c


def test_a_disturbed_cell_compared_with_a_baseline_measured_apart_gets_no_verdict() -> None:
    """Without interleaved rounds the two cells ran minutes apart: no pair shares its load."""
    ng = _cell("ngram", [130.0, 135.2, 127.4], loads=[0.5, 0.5, 0.5], disturbed=DISTURBED)
    c = _verdict(ng)
    assert c["speedup_pairing"] == "digest"
    assert c["speedup_verdict"].startswith("no verdict: the cell was disturbed (other processes took 52%"), c


def test_two_methods_with_their_own_interleaved_baselines_need_both_halves_alike() -> None:
    ok = dict(ref_rates=NG_REF, loads=[0.50, 0.62, 0.41], ref_loads=[0.55, 0.60, 0.45], disturbed=DISTURBED)
    ng = _cell("ngram", NG_RATES, **ok)
    dr = _cell("draft", [100.0, 60.6, 89.1], **ok)  # about x1.0 its AR rounds
    dr["metrics"]["accept_length"] = ng["metrics"]["accept_length"] = 2.0
    c = paired.compare(ng, dr)
    assert c["speedup_verdict"] == "faster" and c["speedup_under_load"].startswith("the cell: others took"), c
    dr["metrics"]["round_other_cpu_share"] = [0.9, 0.62, 0.41]  # the other's round 1 bore 35 points more
    c = paired.compare(ng, dr)
    assert c["speedup_verdict"].startswith(
        "no verdict: the other cell was disturbed and the load differed between the halves of a pair "
        "(round 1:"
    ), c


def test_each_timed_round_is_measured_for_the_cell_and_its_interleaved_baseline() -> None:
    """rounds.timed reads the meter's lap around every timed round (not the warm-up), and files
    it under the engine that ran it: order A B, B A, A B gives the cell laps 1, 4, 5."""
    from pytest_specbench.engines.base import Request, RequestRecord
    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.workloads import rounds

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": {"concurrency": [1], "rounds": 3, "warmup": 1}},
    }
    (cell,) = parse(doc, "m.yaml").cells()
    plans = [rounds.RoundPlan([Request((1, 2), 4, tag=f"round{r}/req0")]) for r in range(4)]

    class FakeLapMeter:
        def __init__(self) -> None:
            self.laps = 0
            self.timing = False

        def start(self) -> None:
            self.timing, self.laps = True, 0

        def stop(self) -> dict[str, Any]:
            return {}

        def lap_start(self) -> None:
            pass

        def lap_stop(self) -> float | None:
            self.laps += 1
            return self.laps / 10 if self.timing else 0.99

    class FakeEngine:
        def flush_cache(self) -> None:
            pass

    def round_fn(eng: FakeEngine, plan: rounds.RoundPlan) -> list[RequestRecord]:
        return [RequestRecord(2, 4, 0.01, tag=plan.requests[0].tag, start_s=0.0, end_s=0.01)]

    ref = rounds.Reference(FakeEngine(), "ar", "ar-tp1")  # type: ignore[arg-type]
    meter = rounds.Meters([FakeLapMeter()])  # laps pass through Meters
    run = rounds.timed(FakeEngine(), cell, plans, round_fn, meter, ref)  # type: ignore[arg-type]
    assert run.extra["round_other_cpu_share"] == [0.1, 0.4, 0.5]
    assert run.reference is not None and run.reference["round_other_cpu_share"] == [0.2, 0.3, 0.6]
