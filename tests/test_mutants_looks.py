"""Single lines of the sequential looks (stats/sequential.py), the race's helpers
(deciding/race.py), the under-load pairing rule (stats/paired.py) and the GPU schedule
(planning/schedule.py), each pinned by a hand-computed case that fails when the line changes
(scripts/mutants.py names the mutants)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specbench.deciding import race
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning.schedule import Job, grant, pack
from pytest_specbench.stats import paired, sequential
from pytest_specbench.stats.paired import LOAD_GAP
from pytest_specbench.stats.sequential import ALPHA, LEVELS_LAST, Looks, check

# ------------------------------------------------------------------ sequential looks


def test_looks_beyond_the_table_share_the_five_percent_bonferroni_fashion() -> None:
    """Looks at rounds 2..LEVELS_LAST + 2 (past the simulated table): 5 % over the looks that
    give an interval, each (seq-bonferroni); a family of 4 takes a quarter of that."""
    looks = Looks(2, LEVELS_LAST + 2)
    assert looks.count == LEVELS_LAST + 1
    assert looks.looks_level == pytest.approx(ALPHA / (LEVELS_LAST + 1))
    assert Looks(2, LEVELS_LAST + 2, 4).level == pytest.approx(ALPHA / (LEVELS_LAST + 1) / 4)


def test_two_cells_looks_cover_both_and_the_larger_family() -> None:
    """(seq-union-family)"""
    both = sequential.union(Looks(3, 6, 2), Looks(2, 8, 5), None)
    assert both == Looks(2, 8, 5)
    assert sequential.union(None, None) is None


def test_a_rule_stops_neither_before_its_first_look_nor_settled_without_looks_left() -> None:
    """(seq-no-stop-before-first, seq-settled-needs-looks-left)"""
    assert check(2, Looks(3, 6), "faster") is None  # round 2 of looks 3..6: another round
    stop = check(3, Looks(3, 6), "faster")
    assert stop is not None and (stop.reason, stop.text) == ("settled", "decided after 3 rounds: faster")
    assert check(3, Looks(3, 3), "faster") is None  # one look: nothing to skip, the cap stops it


# ------------------------------------------------------------------ the race's helpers


def _matrix() -> Any:
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "m"},
            "ng": {"backend": "hf", "model": "m", "speculative": {"algorithm": "ngram"}},
        },
        "workloads": {"throughput": {"concurrency": [1, 4], "output_tokens": [8, 16], "rounds": 6}},
    }
    return parse(doc, "m.yaml")


def test_a_first_look_leaves_looks_to_stop_at() -> None:
    """3 rounds, or earlier where the cap leaves fewer than 3 looks; never before 2
    (race-first-look)."""
    assert [race.first_look(cap) for cap in (2, 3, 4, 5, 6, 10)] == [2, 2, 2, 3, 3, 3]


def test_a_shape_is_not_costlier_than_itself_nor_than_a_larger_one() -> None:
    """(race-costlier-strict)"""
    c = {x.id: x for x in _matrix().cells()}
    small, big = c["ng-tp1-c1-out8"], c["ng-tp1-c4-out16"]
    assert race.costlier(big, small) is True
    assert race.costlier(small, small) is False
    assert race.costlier(small, big) is False
    assert race.costlier(c["ng-tp1-c4-out8"], c["ng-tp1-c1-out16"]) is False  # larger c, shorter output


def test_a_member_against_the_leader_takes_the_far_ends_of_their_intervals() -> None:
    """own x1.2 [1.1, 1.3], leader x1.5 [1.4, 1.6] against the baseline: x0.8 [1.1/1.6, 1.3/1.4]
    (race-apart-far-ends): lost only when the two intervals do not overlap."""
    own = paired.Interval(1.2, 1.1, 1.3, 3)
    lead = paired.Interval(1.5, 1.4, 1.6, 4)
    iv = race._apart(own, lead)
    assert iv is not None
    assert (iv.point, iv.lo, iv.hi, iv.n) == pytest.approx((0.8, 1.1 / 1.6, 1.3 / 1.4, 3))


# ------------------------------------------------------------------ verdicts under load

DISTURBED = "other processes took 52% of the 2 cores over the timed rounds (more than 10%): python: 9.1 s"


def test_a_pair_whose_halves_bore_loads_more_than_load_gap_apart_carries_no_verdict() -> None:
    """Round 2: others took 15 points more of the cores in the cell's round than in its
    baseline's, between LOAD_GAP (10) and twice it (load-gap); 5 points apart is alike."""
    speeds = [1.30, 1.31, 1.29]
    apart = paired.load_spread([0.50, 0.60, 0.40], [0.50, 0.45, 0.40], speeds)
    assert apart.startswith("the load differed between the halves of a pair (round 2: others took 60%")
    assert 0.15 > LOAD_GAP and 0.15 < 2 * LOAD_GAP
    assert paired.load_spread([0.50, 0.60, 0.40], [0.50, 0.55, 0.40], speeds).startswith("kept: ")


def _cell(method: str, rates: list[float], disturbed: str, ref_rates: list[float] | None = None) -> dict:
    m: dict[str, Any] = {
        "output_tokens_per_s": sum(rates) / len(rates),
        "round_tokens_per_s": rates,
        "request_digests": [f"d{i}" for i in range(len(rates))],
        "disturbed": disturbed,
        "round_other_cpu_share": [0.50, 0.62, 0.41],
    }
    if ref_rates is not None:
        m["reference"] = {
            "method": "ar",
            "group": "ar-tp1",
            "round_tokens_per_s": ref_rates,
            "round_latency_s_p50": [None] * len(ref_rates),
            "round_other_cpu_share": [0.55, 0.60, 0.45],
            "errors": 0,
            "saturated": False,
        }
    return {
        "params": {"method": method, "workload": "throughput", "tp": 1, "concurrency": 4},
        "round_times": [1.0] * len(rates),
        "metrics": m,
    }


def test_only_a_load_of_other_processes_cpu_can_keep_a_verdict() -> None:
    """The same pairs, alike under load, x1.50: kept when others took CPU; withheld when the
    disturbance names a GPU process (load-cpu-only)."""
    ar = _cell("ar", [100.0, 104.0, 98.0], "")
    ar["metrics"].pop("disturbed")
    rates, ref = [150.0, 90.6, 134.1], [100.0, 60.0, 90.0]
    cpu = paired.compare_all([ar, _cell("ngram", rates, DISTURBED, ref)], "ar")[1]
    assert cpu["speedup_verdict"] == "faster" and cpu["speedup_under_load"], cpu
    gpu_text = "other processes took 52% of the cores and a GPU process ran on GPU 0 (pid 7)"
    gpu = paired.compare_all([ar, _cell("ngram", rates, gpu_text, ref)], "ar")[1]
    assert gpu["speedup_verdict"].startswith("no verdict: "), gpu
    assert "speedup_under_load" not in gpu


# ------------------------------------------------------------------ the GPU schedule


def test_a_start_gets_the_lowest_free_gpus() -> None:
    """(sched-lowest-gpus)"""
    assert grant([3, 1, 2, 0], [("a", 2), ("b", 1)]) == {"a": (0, 1), "b": (2,)}


def test_a_group_needing_the_whole_pool_is_placed_and_one_needing_more_is_not() -> None:
    """(sched-fits-whole-pool)"""
    sched = pack([Job("tp4", 4, 10.0), Job("tp8", 8, 10.0)], pool=[0, 1, 2, 3], workers=1)
    assert [s.group for s in sched.slots] == ["tp4"] and sched.slots[0].gpus == (0, 1, 2, 3)
    assert [j.group for j in sched.unplaceable] == ["tp8"]


def test_the_warning_of_a_disturbed_cell_says_when_its_verdict_was_kept() -> None:
    """A disturbed cell whose interleaved pairs bore the load alike: its warning says the verdict
    was kept and why; one without says it has no faster/slower verdict (load-kept-said)."""
    from pytest_specbench.report import cell_warnings

    kept = "others took 41%-62% of the cores, alike in both halves of every pair"
    b = {"param": "ng-tp1-c4", "params": {"method": "ng"}, "extra_info": {"disturbed": DISTURBED}}
    with_kept = {**b, "extra_info": {**b["extra_info"], "speedup_under_load": kept}}
    lines = cell_warnings.warnings({"benchmarks": [with_kept, {**b, "param": "ng-tp1-c1"}]})
    said = "verdict kept, its interleaved pairs bore the load alike"
    assert f"warning: ng-tp1-c4: disturbed: {DISTURBED}; {said}: {kept}" in lines
    assert f"warning: ng-tp1-c1: disturbed: {DISTURBED}; no faster/slower verdict" in lines


# ------------------------------------------------------------------ pooling a pair over its shapes


def test_a_pooled_figure_takes_the_strictest_shapes_level_shared_by_the_settings_chosen_from() -> None:
    """Two shapes at levels 5 % and 2 % (one read over sequential looks), the best of 3 settings:
    the pooled interval is at 2 % / 3 (pooled-share, pooled-strictest-level)."""
    from pytest_specbench.report import pooled

    est = [
        {"log": 0.10, "se": 0.02, "df": 4, "level": 0.05, "x": 1.105},
        {"log": 0.12, "se": 0.03, "df": 4, "level": 0.02, "x": 1.127},
    ]
    f = pooled._pool(est, 3)
    assert f["level"] == pytest.approx(0.02 / 3) and f["shapes"] == 2
    assert f["per_shape"] == [1.105, 1.127]
