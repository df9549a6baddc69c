"""Single lines of the decision rules, each pinned by a test that fails when the line changes
(scripts/mutants.py names the mutants): the drift sentinel's tie and band rules (report/drift.py),
include entries applied in the file's order (matrix/selectors.py), and the versus view never
comparing cells of two target models (report/versus.py)."""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any

import pytest

from pytest_specbench.matrix.schema import parse
from pytest_specbench.report import drift, versus
from pytest_specbench.stats.paired import EQUIVALENCE

# ------------------------------------------------------------------ the drift sentinel's rules


def _f(point: float, lo: float, hi: float, verdict: str) -> dict[str, Any]:
    return {"speedup_vs_ar": point, "speedup_vs_ar_ci95": [lo, hi], "speedup_verdict": verdict}


def test_a_tie_stands_only_while_the_drift_band_is_inside_the_ties_margin() -> None:
    """A tie ("within ±2%") says nothing once the drift could move a ratio by more than the ±2 %
    margin: a band of x1.03 withholds it, x1.01 does not, and the edge is the margin itself
    (drift-tie)."""
    tie = _f(1.0, 0.99, 1.01, f"within ±{EQUIVALENCE:.0%}")
    assert drift.not_clear(tie, math.log(1.03), tie["speedup_verdict"]) == (
        "a tie within ±2% says nothing in the presence"
    )
    assert drift.not_clear(tie, math.log(1.01), tie["speedup_verdict"]) is None
    edge = math.log(1 + EQUIVALENCE)
    assert drift.not_clear(tie, edge * 1.001, tie["speedup_verdict"]) is not None
    assert drift.not_clear(tie, edge * 0.999, tie["speedup_verdict"]) is None


def test_a_point_inside_the_band_is_said_as_such_before_its_interval() -> None:
    """x1.10 [1.05, 1.15] against a band of x1.15: the point itself is inside (drift-point)."""
    why = drift.not_clear(_f(1.10, 1.05, 1.15, "faster"), math.log(1.15), "faster")
    assert why == "x1.100 is smaller than the band x0.870..x1.150"


def test_a_point_beyond_the_band_still_needs_its_whole_interval_beyond_it() -> None:
    """x1.20 [1.05, 1.35] against a band of x1.10: the interval's low end is inside the band, so
    the verdict is withheld though the interval excludes 1 (drift-interval); x1.20 [1.12, 1.28]
    stands. A slower verdict mirrors it."""
    band = math.log(1.10)
    assert drift.not_clear(_f(1.20, 1.05, 1.35, "faster"), band, "faster") == (
        "x1.200 [1.050, 1.350] reaches into the band x0.909..x1.100"
    )
    assert drift.not_clear(_f(1.20, 1.12, 1.28, "faster"), band, "faster") is None
    assert drift.not_clear(_f(0.80, 0.70, 0.95, "slower"), band, "slower") is not None
    assert drift.not_clear(_f(0.80, 0.74, 0.88, "slower"), band, "slower") is None


def test_an_interleaved_comparison_is_never_withheld_by_its_familys_drift() -> None:
    """Its baseline ran beside it, round by round: the family's drift fell on both halves alike
    (drift-interleaved-exempt)."""
    rec = {
        "family": "ar-tp1",
        "groups": ["ar-tp1", "m-tp1"],
        "drift": -0.10,
        "drift_ci95": [-0.14, -0.05],
        "band": math.log(1 / 0.86),
        "withheld": [],
    }
    results = [{"cell_id": "m-tp1-c1", "group": "m-tp1"}]
    apart = {0: _f(1.08, 1.05, 1.11, "faster")}
    drift.withhold(results, apart, [dict(rec, withheld=[])])
    assert apart[0]["speedup_verdict"].startswith("no verdict: x1.080 is smaller than the band")
    beside = {0: _f(1.08, 1.05, 1.11, "faster") | {"speedup_pairing": "interleaved"}}
    one = dict(rec, withheld=[])
    drift.withhold(results, beside, [one])
    assert beside[0]["speedup_verdict"] == "faster" and "speedup_drift" not in beside[0]
    assert one["withheld"] == []


def test_the_drift_interval_pools_both_sides_rounds_and_its_band_is_the_far_end() -> None:
    """Baseline logs 0, ±log 1.02 and sentinel logs log 0.9, log 0.9 ± log 1.02, by hand: pooled
    sd log 1.02, 4 degrees of freedom (t 2.776), standard error x sqrt(1/3 + 1/3)
    (drift-pooled-interval); established, its band the interval's end farthest from 0
    (drift-band-far-end)."""
    s = math.log(1.02)
    before, after = [0.0, s, -s], [math.log(0.9) + x for x in (0.0, s, -s)]
    lo, hi = drift.drift_interval(before, after)  # type: ignore[misc]
    half = 2.776 * s * math.sqrt(2 / 3)
    assert (lo, hi) == (
        pytest_approx(math.log(0.9) - half),
        pytest_approx(math.log(0.9) + half),
    )
    established, band = drift.band_of(statistics.fmean(after) - statistics.fmean(before), (lo, hi))
    assert established is True and band == pytest_approx(-math.log(0.9) + half)
    assert drift.band_of(0.01, (-0.01, 0.03)) == (False, 0.0)


def pytest_approx(x: float) -> Any:
    return pytest.approx(x, abs=2e-4)


# ------------------------------------------------------------------ include entries, in order

DOC = {
    "models": {"t": {"path": "/nonexistent/model", "load_format": "dummy"}},
    "methods": {
        "ar": {"backend": "sglang", "model": "t", "engine_args": {"chunked_prefill_size": 4096}},
        "ng": {"backend": "sglang", "model": "t", "speculative": {"algorithm": "ngram"}},
    },
    "tp": [1, 4],
    "workloads": {"throughput": {"concurrency": [1], "output_tokens": [8]}},
}


def _args(include: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    d = copy.deepcopy(DOC)
    d["include"] = include
    return {g.id: dict(g.method.engine_args) for g in parse(d, "m.yaml").groups()}


def test_a_later_include_entry_wins_over_an_earlier_one_and_both_over_the_method() -> None:
    """Two entries setting one key of ar-tp1: the later in the file wins, in either order
    (include-order); an entry's key wins over the method's own engine_args."""
    every_tp1 = {"tp": 1, "engine_args": {"mem_fraction_static": 0.70}}
    ar_tp1 = {"method": "ar", "tp": 1, "engine_args": {"mem_fraction_static": 0.90}}
    args = _args([every_tp1, ar_tp1])
    assert args["ar-tp1"] == {"chunked_prefill_size": 4096, "mem_fraction_static": 0.90}
    assert args["ng-tp1"] == {"mem_fraction_static": 0.70}
    assert args["ar-tp4"] == {"chunked_prefill_size": 4096}
    assert _args([ar_tp1, every_tp1])["ar-tp1"] == {"chunked_prefill_size": 4096, "mem_fraction_static": 0.70}
    own = _args([{"method": "ar", "engine_args": {"chunked_prefill_size": 8192}}])
    assert own["ar-tp1"] == own["ar-tp4"] == {"chunked_prefill_size": 8192}


# ------------------------------------------------------------------ versus across target models


def _cell(method: str, rates: list[float], baseline: str) -> dict[str, Any]:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 1}
    extra = {
        "output_tokens_per_s": statistics.fmean(rates),
        "round_tokens_per_s": rates,
        "request_digests": ["d0", "d1", "d2"],
        "speedup_baseline": baseline,
    }
    return {"param": f"{method}-c1", "params": params, "extra_info": extra, "stats": {"data": [1.0] * 3}}


def test_versus_never_compares_cells_of_two_target_models() -> None:
    """a and b at the same shape: compared while both are against the same AR; not when b's
    baseline is another target model's AR (versus-model-guard)."""
    doc = {
        "benchmarks": [
            _cell("ar", [100.0, 100.0, 100.0], "ar"),
            _cell("a", [150.0, 152.0, 148.0], "ar"),
            _cell("b", [120.0, 121.0, 119.0], "ar"),
        ],
        "specbench": {"compare": [["a", "b"]]},
    }
    (c,) = versus.comparisons(doc)
    assert (c["a"], c["b"], c["speedup_verdict"]) == ("a", "b", "faster")
    doc["benchmarks"][2]["extra_info"]["speedup_baseline"] = "ar-big"
    assert versus.comparisons(doc) == [] and versus.lines(doc) == []
