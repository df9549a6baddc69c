"""Two levels of variance: rounds within an engine start, starts within a configuration
(stats/instances.py, report/instances.py, the race's gap). The rates are simulated through the
project's own code (tests/instances_sim.py, tests/race_sim.py)."""

from __future__ import annotations

import math

import instances_sim as sim
import pytest
import race_sim as rs

from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.stats import instances as lvl


def rate(runs: int, f) -> float:
    return sum(bool(f(seed)) for seed in range(runs)) / runs


def false_verdicts(runs: int, **kw) -> float:
    n = bad = 0
    for seed in range(runs):
        for m, f in sim.run(seed, **kw).items():
            if not m.startswith("ar2"):
                n += 1
                bad += sim.decided(f)
    return bad / n


def test_tau_is_the_pairs_mean_square_over_two_and_widens_by_satterthwaite() -> None:
    pairs = [lvl.Pair("a", "b", 0.04, 0.0001), lvl.Pair("c", "d", -0.02, 0.0001)]
    s = lvl.estimate(pairs)
    assert s is not None and s.k == 2
    assert s.tau2 == pytest.approx((0.04**2 + 0.02**2) / 4)
    assert lvl.estimate(pairs, leave_out="a").tau2 == pytest.approx(0.02**2 / 2)
    assert lvl.estimate([]) is None
    # an interval x1.10 [1.05, 1.15] read with t = 2.776 (df 4), widened by 2 tau²
    lo, hi, t, df = lvl.widen(1.10, 1.05, 1.15, 2.776, 4, s)
    se2 = ((math.log(1.15) - math.log(1.05)) / (2 * 2.776)) ** 2
    total = se2 + 2 * s.tau2
    want_df = int(total**2 / (se2**2 / 4 + (2 * s.tau2) ** 2 / 2))
    assert df == want_df
    assert math.log(hi) - math.log(1.10) == pytest.approx(t * math.sqrt(total))
    assert lo < 1.05 and hi > 1.15


def test_equal_methods_with_a_3_percent_start_sd_give_at_most_5_percent_false_verdicts() -> None:
    # every start its own level (log sd 3 %), round CV 2 %: with a second start of every member
    assert false_verdicts(300, tau=0.03, cv=0.02) <= 0.05
    # and with the A/A control the only pair of starts
    assert false_verdicts(300, tau=0.03, cv=0.02, twins=False) <= 0.05


def test_one_start_pair_read_at_many_shapes_counts_as_one_pair() -> None:
    # one A/A control, 10 shapes: one pair of starts (one degree of freedom), not ten
    assert false_verdicts(150, tau=0.05, cv=0.01, twins=False, shapes=10) <= 0.05
    assert false_verdicts(150, tau=0.03, cv=0.02, twins=False, shapes=10) <= 0.05


def test_without_the_start_level_the_same_runs_give_false_verdicts() -> None:
    # the rule's necessity: the same runs read without any pair of starts (no control, no twin)
    assert false_verdicts(300, tau=0.03, cv=0.02, twins=False, control_twin=False) > 0.3


def test_a_10_percent_offset_in_a_members_own_start_is_withheld_in_95_percent() -> None:
    for tau in (0.0, 0.03):
        got = rate(
            300, lambda s, t=tau: not sim.decided(sim.run(s, tau=t, cv=0.02, offsets={"m1": 1.10})["m1"])
        )
        assert got >= 0.95, (tau, got)


def test_a_twin_that_sits_off_the_others_is_named_with_its_verdicts_withheld() -> None:
    out = sim.run(1, tau=0.0, cv=0.02, offsets={"m1": 1.10})
    assert out["m1"]["speedup_verdict"].startswith("no verdict: its two engine starts differ by x")
    assert not sim.decided(out["m1~2"])
    assert "speedup_verdict_before_instances" in out["m1"]


def test_a_true_15_percent_gain_is_still_called_at_a_small_start_sd() -> None:
    got = rate(
        200,
        lambda s: sim.run(s, tau=0.005, cv=0.02, speeds={"m1": 1.15})["m1"]["speedup_verdict"] == "faster",
    )
    assert got >= 0.9


def test_raced_equal_methods_with_start_offsets_are_falsely_dropped_in_at_most_5_percent() -> None:
    n = bad = 0
    for seed in range(120):
        for name, r in rs.instance_shape({"a": 1.0, "b": 1.0, "c": 1.0}, seed, cv=0.02, tau=0.03).items():
            if not name.startswith("ar"):
                n += 1
                bad += r["dropped"]
    assert bad / n <= 0.05


def test_a_raced_member_is_not_dropped_before_a_pair_of_starts_is_measured() -> None:
    m = rs.matrix(
        ["a", "b"],
        backend="sglang",
        method_keys={"b": {"speculative": {"algorithm": "ngram", "num_draft_tokens": 2}}},
    )
    from pytest_specbench.deciding.race import Race

    race = Race(m)
    assert race.twins == {} and race.controls == {}
    cells = {c.method.name: c for c in m.cells()}
    import random

    rng = random.Random(0)
    rs.run_cell(race, cells["a"], 1.0, rng, 0.01)
    r = rs.run_cell(race, cells["b"], 0.7, rng, 0.01)
    assert not r["dropped"]  # 30 % behind, but nothing measured what two starts differ by


def test_a_second_start_of_a_dropped_method_is_skipped_at_that_shape() -> None:
    other = {"b": {"speculative": {"algorithm": "ngram", "num_draft_tokens": 2}}}
    out = rs.instance_shape({"a": 1.0, "b": 0.80}, 3, cv=0.005, tau=0.0, configs=other)
    assert out["b"]["dropped"]
    assert out["b-start2"].get("skipped")


def test_starts_make_twins_and_the_baselines_are_its_controls() -> None:
    m = rs.matrix(["a"], backend="sglang", method_keys={"ar": {"starts": 2}, "a": {"starts": 3}})
    from pytest_specbench.engines import separate_instances

    assert [x.name for x in m.methods] == ["ar", "ar-start2", "a", "a-start2", "a-start3"]
    assert m.controls(separate_instances) == {"ar-start2": "ar"}
    assert m.twins(separate_instances) == {"a-start2": "a", "a-start3": "a"}


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"starts": 0}, "methods.a.starts: expected a number of engine starts, 1 to 8; got 0"),
        ({"starts": "2"}, "methods.a.starts: expected a number of engine starts, 1 to 8; got '2'"),
    ],
)
def test_bad_starts_are_refused_naming_the_key(keys, says) -> None:
    with pytest.raises(MatrixError) as e:
        rs.matrix(["a"], backend="sglang", method_keys={"a": keys})
    assert says in str(e.value)


def test_the_screen_says_what_measured_the_start_level_and_what_it_did_not() -> None:
    from pytest_specbench.report import instances

    doc = {
        "specbench": {
            "instances": {"tau": None, "df": 0, "widened": [], "sat_off": [], "unchecked_workers": []}
        }
    }
    assert "no pair of starts measured" in instances.lines(doc)[0]
    doc["specbench"]["instances"].update(tau=0.021, df=3, widened=["x", "y"], unchecked_workers=["gw1"])
    got = instances.lines(doc)
    assert got[0] == (
        "engine starts: start-to-start sd 2.10% from 3 pair(s) of starts; 2 verdict interval(s) widened by it"
    )
    assert got[-1].startswith("engine starts: no control or twin ran in worker(s) gw1")
    assert parse  # the schema module is the one the matrix is read with


def test_the_gates_rounds_are_none_where_the_run_spread_alone_is_too_wide() -> None:
    from statistics import NormalDist

    from pytest_specbench.deciding import selection
    from pytest_specbench.stats.gate_stats import ALPHA

    z = NormalDist().inv_cdf(1 - ALPHA) + selection.POWER_Z
    s = math.log(1.03)
    n = selection.gate_rounds(0.03, 0.05, 0.0)
    # the fewest rounds with z * sqrt(2 s² / n) below -log(0.95), by hand
    assert n == next(k for k in range(2, 200) if z * math.sqrt(2 * s * s / k) < -math.log(0.95))
    assert selection.gate_rounds(0.03, 0.05, 0.05) is None  # a 5 % run spread: no rounds suffice
    assert selection.gate_rounds(0.03, 0.05, 0.0, cells=20) > n  # one cell of 20: Holm's first step
    lines = selection.gate_lines([0.03], 20)
    assert lines[1].startswith("    CV 3.0%: run spread 5%: F 5% never, F 10% never; none: F 5% ")
    assert "repeat the runs" in lines[-1]


def test_the_control_band_judges_the_interval_the_start_level_widened() -> None:
    """m1 reads x1.10 [1.09, 1.11] from its rounds; the run's start sd (three twins that agree, a
    control at x1.05) widens it to about [1.03, 1.18]; the control's established band (up to
    x1.07) then withholds it. Judged on the rounds' interval the band would have let it stand."""
    from pytest_specbench.report.summary import judged

    wiggle = (1.0, 1.004, 0.996, 1.002, 0.998)

    def rounds(x: float) -> list[float]:
        return [100 * x * w for w in wiggle]

    ref = [100.0] * 5
    speeds = {"ar2": 1.05, "m1": 1.10, "m1~2": 1.105, "m2": 1.0, "m2~2": 1.005, "m3": 0.98, "m3~2": 0.985}
    results = [sim.cell(m, rounds(x), ref) for m, x in speeds.items()]
    spec = {
        "controls": {"ar2": "ar"},
        "twins": {"m1~2": "m1", "m2~2": "m2", "m3~2": "m3"},
        "separate_instances": ["ar", *speeds],
    }
    out = judged(results, {m: "ar" for m in speeds}, spec)
    f = out[1]
    assert results[1]["params"]["method"] == "m1"
    lo, hi = f["speedup_ci_rounds"]
    assert lo > 1.07 and f["speedup_vs_ar_ci95"][0] < 1.07
    assert "A/A control" in f["speedup_verdict"], f["speedup_verdict"]


def test_a_methods_starts_are_read_together_and_narrow_its_verdict() -> None:
    # true x1.10, start sd 1 %, round CV 2 %: two starts of each member read together
    got = rate(
        300, lambda s: sim.run(s, tau=0.01, cv=0.02, speeds={"m1": 1.10})["m1"]["speedup_verdict"] == "faster"
    )
    assert got >= 0.75  # 0.82 in 300 runs; one start each (the control the only pair): 0.52
    out = sim.run(1, tau=0.02, cv=0.02)
    assert out["m1"]["speedup_starts"] == 2 and len(out["m1"]["speedup_per_start"]) == 2
    assert (
        out["m1~2"]["speedup_verdict"]
        == "no verdict: another start of m1, whose verdict reads its 2 starts together"
    )
    lo, hi = out["m1"]["speedup_vs_ar_ci95"]
    lo1, hi1 = out["m1~2"]["speedup_vs_ar_ci95"]  # one start's, widened by 2 tau²
    assert math.log(hi / lo) < math.log(hi1 / lo1)


def test_an_exclude_entry_naming_a_method_names_its_starts() -> None:
    m = rs.matrix(["a"], backend="sglang", method_keys={"a": {"starts": 2}}, extra={"concurrency": [1, 2]})
    assert "a-start2-tp1-c2-out8" in [c.id for c in m.cells()]
    doc = {
        "models": {"m": "Qwen/Qwen3-1.7B"},
        "methods": {
            "ar": {"backend": "sglang", "model": "m"},
            "a": {"backend": "sglang", "model": "m", "starts": 2},
        },
        "exclude": [{"method": "a", "concurrency": 2}],
        "workloads": {"throughput": {"concurrency": [1, 2], "output_tokens": [8], "rounds": 3}},
    }
    ids = [c.id for c in parse(doc, "m.yaml").cells()]
    assert "a-tp1-c2-out8" not in ids and "a-start2-tp1-c2-out8" not in ids and "a-start2-tp1-c1-out8" in ids
