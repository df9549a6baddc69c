"""The pooled sentence simulated through the project's own code (tests/pooled_sim.py): cells
stopped early by their stopping rule (looks 3..10), one shape under load that shifts A over B by
x0.80 (what load alone was measured to do), two shapes measured apart inside a family's drift of
-6 % (its band from its sentinel), the rest quiet; A truly 5-20 % faster than B at every shape,
or equal. Every shape is pooled, the widened ones with their bias bounds in full."""

from __future__ import annotations

import math
import random

import pytest
from pooled_sim import SHARE, rates, run

from pytest_specbench.stats import paired

# the shapes in order of their true effect, smallest first: the drift withholds the small ones
KINDS = ["drift", "load", "quiet", "quiet", "quiet", "drift", "quiet", "quiet", "quiet", "quiet"]
FASTER = [1.05 + 0.15 * i / (len(KINDS) - 1) for i in range(len(KINDS))]
RUNS = 250


def test_the_simulated_runs_are_what_they_say() -> None:
    """One run: the load shape's cells are disturbed with loads alike in a pair's halves (kept
    under load, not withheld), the drift shapes' cells carry the family's drift, the rest are quiet;
    every cell's rounds were chosen by its looks."""
    doc = run(random.Random(0), FASTER, KINDS)
    by = {(b["params"]["method"], b["params"]["concurrency"]): b["extra_info"] for b in doc["benchmarks"]}
    assert len(by) == 2 * len(KINDS)
    load = by[("a", 2)]
    assert load["disturbed"] and load["round_other_cpu_share"] == [SHARE] * len(load["round_tokens_per_s"])
    assert by[("a", 1)]["speedup_drift"]["family"] == "ar-tp1" and "reference" not in by[("a", 1)]
    assert "disturbed" not in by[("a", 3)] and by[("a", 3)]["reference"]["method"] == "ar"
    assert all(e["sequential"]["looks"] == [3, 10] for e in by.values())
    assert all(3 <= len(e["round_tokens_per_s"]) <= 10 for e in by.values())


def test_the_pooled_interval_covers_the_true_mean_and_separates_5_to_20_percent() -> None:
    """250 seeded runs, A truly 5-20 % faster: the interval covers the true mean (the geometric
    mean of the shapes' effects) in at least 95 % of runs and excludes 1 in at least 95 %."""
    got = rates(RUNS, 1, FASTER, KINDS)
    assert got["figure"] == 1.0
    assert got["covered"] >= 0.95, got
    assert got["excludes_1"] >= 0.95, got


def test_equal_methods_get_a_false_pooled_verdict_at_most_5_percent_of_runs() -> None:
    """250 seeded runs, A and B equal at every shape (the load still shifts one shape x0.80, the
    drift still moves the apart ones): the interval excludes 1 in at most 5 % of runs."""
    got = rates(RUNS, 2, [1.0] * len(KINDS), KINDS)
    assert got["figure"] == 1.0
    assert got["excludes_1"] <= 0.05, got
    assert got["covered"] >= 0.95, got


def test_satterthwaite_degrees_of_freedom_by_hand() -> None:
    """(0.01 + 0.03)^2 / (0.01^2 / 2 + 0.03^2 / 4) = 0.0016 / 0.000275 = 5.8: 5; never fewer than the
    fewest (2), the fewest where nothing varies; the pooled interval reads t there."""
    parts = [(0.1, 0.01, 2), (0.2, 0.03, 4)]
    assert paired.satterthwaite_df(parts) == 5
    assert paired.satterthwaite_df([(0.1, 0.0, 2), (0.2, 0.0, 4)]) == 2
    assert paired.satterthwaite_df([(0.1, 1e-9, 2), (0.2, 0.03, 40)]) == 40
    from pytest_specbench.stats.sequential import t_quantile

    ratio, lo, hi = paired.pooled_log_interval(parts, 0.05, 5)
    half = t_quantile(0.05, 5) * math.sqrt(0.04) / 2
    assert (ratio, lo, hi) == pytest.approx((math.exp(0.15), math.exp(0.15 - half), math.exp(0.15 + half)))
