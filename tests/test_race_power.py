"""What racing decides, simulated through the project's own code (tests/race_sim.py: deciding/race.py's
Race, the stopping protocol of deciding/stopping.py, deciding/selection.py's indifference zone,
deciding/tune.py, stats/paired.py): a method δ or more behind its shape's leader is dropped early,
one within δ/2 almost never, a tuned sweep keeps one setting, cells measured apart use every round.

"Round CV" is the CV of the per-round figure a comparison reads: a member's paired ratio over the
baseline beside it (each engine's own rounds then vary by CV / sqrt(2)), or a cell's own tok/s
measured apart. Seeds are fixed: each test is one deterministic sample of runs, and each was seen
failing with its rule broken (docs/metrics.md "Racing with an indifference zone" lists how)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from race_sim import matrix, result, shape, tuned_matrix

from pytest_specbench.deciding.race import Race
from pytest_specbench.stats import paired

RUNS = 300


def _rate(outcomes: list[dict[str, dict[str, Any]]], who: str, cond: Any) -> float:
    return sum(1 for o in outcomes if cond(o[who])) / len(outcomes)


def test_at_cv_3_percent_a_method_10_percent_behind_is_dropped_by_its_sixth_round() -> None:
    """Four methods race beside AR (looks 3..10), in this order: the leader x1.30, one 10 % behind
    (x1.17), one within δ/2 of the leader (x1.294), one 20 % behind (x1.04). The leader runs until
    it is known to ±δ/2 (here: to the cap), so the 10 % one, right after it, is compared with a
    leader of many rounds. The 10 % one is out by its 6th round in at
    least 90 % of runs; the one within δ/2 is dropped in at most 5 %; no shape has a false drop
    (the leader or the near one out) in more than 5 %."""
    speeds = {"lead": 1.30, "m10": 1.17, "near": 1.30 * 0.995, "m20": 1.04}  # m10 right after the leader
    runs = [shape(speeds, seed, 0.03) for seed in range(RUNS)]
    early = _rate(runs, "m10", lambda r: r["dropped"] and r["rounds"] <= 6)
    near = _rate(runs, "near", lambda r: r["dropped"])
    false = sum(1 for o in runs if o["lead"]["dropped"] or o["near"]["dropped"]) / len(runs)
    assert early >= 0.90, early
    assert near <= 0.05, near
    assert false <= 0.05, false
    assert _rate(runs, "m20", lambda r: r["dropped"]) >= 0.95


def test_at_cv_half_a_percent_a_method_5_percent_behind_is_dropped_at_its_first_look() -> None:
    """Round CV 0.5 % (in-process SGLang with CUDA graphs on an H200): three methods beside AR, the
    one 5 % behind the leader is out at its first look (3 rounds) in at least 95 % of runs, the one
    within δ/2 (x0.99 of the leader) kept in at least 95 %."""
    speeds = {"lead": 1.30, "near": 1.30 * 0.99, "m5": 1.30 * 0.95}
    runs = [shape(speeds, seed, 0.005) for seed in range(RUNS)]
    first = _rate(runs, "m5", lambda r: r["dropped"] and r["rounds"] == 3)
    assert first >= 0.95, first
    assert _rate(runs, "near", lambda r: r["dropped"]) <= 0.05


def test_equal_methods_give_a_false_verdict_or_drop_in_at_most_5_percent_of_shapes() -> None:
    """Four methods, every one as fast as AR, at round CV 3 %: a shape with any drop or any verdict
    other than "within ±2%" / "not separated" is a false one; at most 5 % of shapes have one."""
    speeds = {f"eq{i}": 1.0 for i in range(4)}
    bad = 0
    for seed in range(RUNS):
        o = shape(speeds, seed, 0.03)
        bad += any(o[n]["dropped"] or o[n]["verdict"] in ("faster", "slower") for n in speeds)
    assert bad / RUNS <= 0.05, bad


def test_a_member_within_delta_of_the_leader_is_kept_and_said_to_be_within_delta() -> None:
    """At round CV 0.5 % a member 0.5 % behind its leader: kept, its race record says it is within
    δ of the leader (status "within", the leader named, δ)."""
    o = shape({"lead": 1.3, "near": 1.3 * 0.995}, 1, 0.005)
    race = o["near"]["race"]
    assert not o["near"]["dropped"]
    assert race["status"] == "within" and race["leader"] == "lead-tp1-c1-out8" and race["delta"] == 0.02


def _tuned(keep: int) -> Any:
    return tuned_matrix(keep, rounds=3, max_rounds=10)


def test_tune_keep_1_at_10_percent_gaps_carries_one_setting() -> None:
    """Four settings 10 % apart (x1.30, x1.17, x1.05, x0.95 over AR), decided on c1 under the race
    at round CV 3 %, keep: 1: one setting carried in at least 90 % of runs, the best tuned out in at
    most 5 %."""
    from race_sim import run_cell

    one = best_out = 0
    for seed in range(RUNS):
        rng = random.Random(seed)
        m = _tuned(1)
        race = Race(m)
        cells = {c.id: c for c in m.cells()}
        run_cell(race, cells["ar-tp1-c1-out8"], 1.0, rng, 0.03, relative=False)
        for d, s in ((1, 1.30), (2, 1.17), (3, 1.05), (4, 0.95)):
            run_cell(race, cells[f"knob-d{d}-tp1-c1-out8"], s, rng, 0.03)
        race.skip_reason(cells["knob-d1-tp1-c4-out8"])  # decides the sweep
        kept = race.tuning["knob"]["kept"]
        one += len(kept) == 1
        best_out += "knob-d1" not in kept
    assert one / RUNS >= 0.90, one
    assert best_out / RUNS <= 0.05, best_out


def _apart(seed: int, speed: float, cv: float, max_rounds: int) -> dict[str, Any]:
    """AR's cell and a member's, each measured apart (its own tok/s, no baseline beside it), each
    stopping on its own rounds' spread; their comparison as stats/paired.py reads it."""
    rng = random.Random(seed)
    m = matrix(["a"], 3, max_rounds)
    race = Race(m)
    cells = {c.method.name: c for c in m.cells()}
    recs = {}
    for name, s in (("ar", 1.0), ("a", speed)):
        rule = race.rule(cells[name])
        own: list[float] = []
        answer = None
        for _ in range(rule.looks.last):
            own.append(100 * s * math.exp(rng.gauss(0, cv)))
            answer = rule.after_round(own, None, True)
            if answer.stops:
                break
        extra = {"rounds_run": len(own), **rule.finish(own, None, True, answer, rule.looks.last)}
        recs[name] = result(cells[name], own, None, extra)
    return paired.compare(recs["a"], recs["ar"])


def test_measured_apart_a_true_5_percent_gain_is_called_faster_on_every_round_of_both() -> None:
    """A member truly x1.05 over AR, both measured apart at round CV 3 %, max_rounds 20: the
    comparison uses every round of both (unpaired where they stopped at different rounds) and
    calls it faster in at least 70 % of runs; its interval covers x1.05 in at least 93 % (the
    Chow-Robbins level, stats/paired.py APART_LOOKS); an equal member is called faster or
    slower in at most 2.5 %."""
    runs = [_apart(seed, 1.05, 0.03, 20) for seed in range(1000)]
    faster = sum(1 for c in runs if c["speedup_verdict"] == "faster") / len(runs)
    covered = sum(1 for c in runs if c["speedup_vs_ar_ci95"][0] <= 1.05 <= c["speedup_vs_ar_ci95"][1]) / len(
        runs
    )
    assert faster >= 0.70, faster
    assert covered >= 0.93, covered
    assert any(c["speedup_pairing"] == "all rounds" for c in runs)
    equal = [_apart(seed, 1.0, 0.03, 20) for seed in range(RUNS)]
    assert sum(1 for c in equal if c["speedup_verdict"] in ("faster", "slower")) / RUNS <= 0.025


def test_a_member_settled_against_its_baseline_keeps_running_while_its_gap_to_the_leader_is_open() -> None:
    """A member 6 % behind the leader at round CV 3 % is settled "faster" against AR at its first
    look, but its gap to the leader is still open (neither more than δ behind nor within δ): it
    runs on, and is dropped by the cap in at least 55 % of runs (stopping when settled: 24 %)."""
    runs = [shape({"lead": 1.30, "m6": 1.30 * 0.94}, seed, 0.03) for seed in range(RUNS)]
    dropped = _rate(runs, "m6", lambda r: r["dropped"])
    assert dropped >= 0.55, dropped


def test_the_gap_is_welch_one_sided_at_the_looks_level_with_the_shapes_variance_pooled() -> None:
    """By hand: one look (level 5 %), member logs 0.00, 0.02, 0.04 (mean 0.02, variance 0.0004)
    against a leader's 0.10, 0.12, 0.14: d = -0.10, Welch's variance 0.0004/3 + 0.0004/3, 4 degrees
    of freedom, one-sided t(0.95, 4) = 2.132: hi = exp(-0.10 + 2.132 x 0.01633) = 0.9370 < 0.98,
    behind. The shape's variance pooled (0.0004 with 20 degrees of freedom: t = 1.725) gives
    hi = exp(-0.10 + 1.725 x 0.01633) = 0.9311."""
    from pytest_specbench.deciding import selection
    from pytest_specbench.stats.sequential import Looks

    own = [math.exp(x) for x in (0.0, 0.02, 0.04)]
    lead = [math.exp(x) for x in (0.10, 0.12, 0.14)]
    g = selection.gap(own, lead, Looks(3, 3), 0.02)
    assert g is not None and g.df == 4 and g.behind
    assert g.hi == pytest.approx(math.exp(-0.10 + 2.132 * math.sqrt(0.0004 * 2 / 3)), abs=2e-4)
    g = selection.gap(own, lead, Looks(3, 3), 0.02, shape_var=(0.0004, 20))
    assert g is not None and g.df == 20
    assert g.hi == pytest.approx(math.exp(-0.10 + 1.725 * math.sqrt(0.0004 * 2 / 3)), abs=2e-4)
    g = selection.gap(own, lead, Looks(3, 3), 0.2)  # δ 20 %: lo 0.874 >= 0.80, within δ
    assert g is not None and g.status == selection.WITHIN


def test_tune_keeps_keep_settings_among_those_within_delta_and_names_them() -> None:
    """Four equal settings at round CV 0.5 %, keep: 1: none is more than δ behind, every one is
    within δ of the best, so one is kept and the decision names all four as within δ; a setting
    dropped at a deciding cell is listed as separated (tuned out), never carried."""
    from race_sim import run_cell

    rng = random.Random(3)
    m = _tuned(1)
    race = Race(m)
    cells = {c.id: c for c in m.cells()}
    run_cell(race, cells["ar-tp1-c1-out8"], 1.0, rng, 0.005, relative=False)
    for d in (1, 2, 3, 4):
        run_cell(race, cells[f"knob-d{d}-tp1-c1-out8"], 1.2, rng, 0.005)
    race.skip_reason(cells["knob-d1-tp1-c4-out8"])
    t = race.tuning["knob"]
    assert len(t["kept"]) == 1 and sorted(t["within_delta"]) == [f"knob-d{d}" for d in (1, 2, 3, 4)], t
    rng = random.Random(4)
    m = _tuned(1)
    race = Race(m)
    run_cell(race, cells["ar-tp1-c1-out8"], 1.0, rng, 0.005, relative=False)
    for d, s in ((1, 1.3), (2, 1.0), (3, 1.0), (4, 1.0)):
        run_cell(race, cells[f"knob-d{d}-tp1-c1-out8"], s, rng, 0.005)
    race.skip_reason(cells["knob-d1-tp1-c4-out8"])
    t = race.tuning["knob"]
    assert t["kept"] == ["knob-d1"] and set(t["separated"]) == {"knob-d2", "knob-d3", "knob-d4"}, t
    assert t["how"].startswith("by interval"), t


def test_a_racing_cell_its_cap_cannot_settle_stops_for_futility_with_its_standing() -> None:
    """A member 4 % behind its leader and AR at round CV 7 %: neither its verdict nor its gap would
    settle by the cap at its spread (not by half the half-width its spread projects), so it stops
    for futility, and its record says both:
    stop_reason "futile" and its race standing (open or within δ, never dropped)."""
    from race_sim import run_cell

    rng = random.Random(2)
    m = matrix(["lead", "twin"], 3, 6)
    race = Race(m)
    cells = {c.method.name: c for c in m.cells()}
    run_cell(race, cells["ar"], 1.0, rng, 0.03, relative=False)
    run_cell(race, cells["lead"], 1.0, rng, 0.07)
    rule = race.rule(cells["twin"])
    own, ref, answer = [], [], None
    for _ in range(rule.looks.last):
        own.append(96 * math.exp(rng.gauss(0, 0.05)))
        ref.append(100 * math.exp(rng.gauss(0, 0.05)))
        answer = rule.after_round(own, ref, True)
        if answer.stops:
            break
    out = rule.finish(own, ref, True, answer, 6)
    # at its spread its cap settles nothing: it stops for futility before the cap, saying so
    assert len(own) < 6 and out["stop_reason"] == "futile", out
    assert "rounds would settle neither its verdict nor its standing" in out["rounds_stop"]
    assert out["race"]["status"] in ("open", "within"), out


def test_a_member_exactly_delta_behind_is_dropped_in_at_most_its_share() -> None:
    """The rule's own boundary: members exactly δ behind a leader (two equal leaders, so the one
    the data crowns is biased upward), round CV 3 %: a shape drops one of them in at most 5 % of
    runs; and one member δ behind with rounds ten times noisier than the shape's (CV 30 % among
    cells of 3 %) is dropped in at most 5 % (its own variance, with its own few degrees of
    freedom, never the pool's)."""
    d = 1 - 0.02
    speeds = {"lead": 1.3, "lead2": 1.3, "b1": 1.3 * d, "b2": 1.3 * d, "b3": 1.3 * d}
    runs = [shape(speeds, seed, 0.03) for seed in range(RUNS)]
    any_drop = sum(1 for o in runs if any(o[n]["dropped"] for n in ("lead", "lead2", "b1", "b2", "b3")))
    assert any_drop / RUNS <= 0.05, any_drop
    speeds = {"lead": 1.3, "q1": 1.3, "q2": 1.3, "noisy": 1.3 * d}
    runs = [shape(speeds, seed, 0.03, cvs={"noisy": 0.30}) for seed in range(RUNS)]
    noisy = _rate(runs, "noisy", lambda r: r["dropped"])
    assert noisy <= 0.05, noisy


def _leader_run(methods: list[str]) -> tuple[int, dict[str, Any]]:
    """AR's cell, then the first of ``methods`` level with AR at round CV 15 % (seed 9: it reads
    ahead of AR, so it leads) under the race's rule, looks 3..6: its rounds and its record."""
    from race_sim import run_cell

    rng = random.Random(9)
    m = matrix(methods, 3, 6)
    race = Race(m)
    cells = {c.method.name: c for c in m.cells()}
    run_cell(race, cells["ar"], 1.0, rng, 0.03, relative=False)
    rule = race.rule(cells[methods[0]])
    own, ref, answer = [], [], None
    for _ in range(rule.looks.last):
        own.append(100 * math.exp(rng.gauss(0, 0.15)))
        ref.append(100 * math.exp(rng.gauss(0, 0.15)))
        answer = rule.after_round(own, ref, True)
        if answer.stops:
            break
    return len(own), rule.finish(own, ref, True, answer, 6)


def test_a_leader_the_cap_cannot_settle_runs_on_for_its_rivals() -> None:
    """A shape's leader runs on to the cap however futile its own verdict and gap while a rival
    remains to read its rounds; the last of its shape's racing methods stops for futility."""
    n, out = _leader_run(["lead", "later"])
    assert n == 6 and out["stop_reason"] == "cap", out
    n, out = _leader_run(["lead"])  # no rival left to read its rounds
    assert n < 6 and out["stop_reason"] == "futile", out


def test_futility_costs_a_5_percent_gain_behind_a_close_leader_little_power() -> None:
    """x1.05 over AR at round CV 3 %, looks 3..10, behind a leader at x1.06 (its gap open): "faster"
    in 0.365 of 200 runs with the futility stop at half the projected half-width (8.6 rounds on
    average); at the whole half-width 0.245 (6.0 rounds)."""
    runs = [shape({"lead": 1.06, "a": 1.05}, seed, 0.03, rounds=3, max_rounds=10) for seed in range(200)]
    assert _rate(runs, "a", lambda r: r["verdict"] == "faster") >= 0.31


def test_a_baseline_read_beside_every_member_stops_its_own_cell_at_its_first_look() -> None:
    m = matrix(["a", "b"], 3, 8)
    cells = {c.method.name: c for c in m.cells()}
    race = Race(m)
    assert race.rule(cells["ar"]).looks.last == 8  # no interleaving backend known: to its cap
    race.interleaving = frozenset({"hf"})
    assert (race.rule(cells["ar"]).looks.first, race.rule(cells["ar"]).looks.last) == (3, 3)
    assert race.rule(cells["a"]).looks.last == 8  # a member races on
    prec = matrix(["a"], 3, 8, extra={"precision": 0.02})
    race = Race(prec)
    race.interleaving = frozenset({"hf"})
    base = next(c for c in prec.cells() if c.method.name == "ar")
    assert race.rule(base).looks.last == 8  # a precision target is the user's: it runs to it
