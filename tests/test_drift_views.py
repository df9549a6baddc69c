"""One interval everywhere: a comparison between two methods measured apart inside a family's
drift is withheld as the run withholds each one's verdict against the baseline, in --versus, the
matrix's compare pairs and the decision view alike."""

from __future__ import annotations

from pytest_specbench.report import decide, versus


def _entry(method: str, rates: list[float], drift: float | None = None) -> dict:
    e = {
        "output_tokens_per_s": sum(rates) / len(rates),
        "round_tokens_per_s": rates,
        "request_digests": [f"r{i}" for i in range(len(rates))],
        "speedup_baseline": "ar",
    }
    if drift is not None:
        e["speedup_drift"] = {"family": "ar-tp1", "drift": drift, "minutes": 4.7}
    return {
        "param": f"{method}-tp1-c1",
        "params": {"method": method, "tp": 1, "concurrency": 1},
        "extra_info": e,
    }


M1 = [105.0, 104.0, 106.0, 105.5]
M2 = [100.0, 99.5, 100.5, 100.2]


def test_a_comparison_inside_the_drift_is_withheld_and_outside_it_kept() -> None:
    clear = decide.compare(_entry("m1", M1), _entry("m2", M2))
    assert clear["speedup_verdict"] == "faster"  # x1.05, its interval clear of 1.02
    inside = decide.compare(_entry("m1", M1, drift=-0.073), _entry("m2", M2, drift=-0.073))
    assert inside["speedup_verdict_before_drift"] == "faster"
    assert inside["speedup_verdict"].startswith("no verdict: x1.05")
    assert "of the drift its family ar-tp1 measured (-7.3%)" in inside["speedup_verdict"]
    small = decide.compare(_entry("m1", M1, drift=-0.01), _entry("m2", M2))
    assert small["speedup_verdict"] == "faster"  # a 1 % drift: x1.05 [..] is clear of it


def test_the_matrixs_compare_pairs_withhold_the_same_way() -> None:
    doc = {
        "benchmarks": [_entry("m1", M1, drift=-0.073), _entry("m2", M2, drift=-0.073)],
        "specbench": {"compare": [["m1", "m2"]]},
    }
    (c,) = versus.comparisons(doc)
    assert c["speedup_verdict"].startswith("no verdict:")
    assert "no verdict" in versus.lines(doc)[0]
