"""Drift's pure parts: how many rounds a drift sentinel runs, the interval of a level change
between two sets of rounds (logs), and the band an established change withholds within
(report/drift.py reads them over a results JSON; deciding/ while the run goes). Pure: no pytest,
no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .paired import t975

SENTINEL_MIN_ROUNDS = 3
SENTINEL_MAX_ROUNDS = 5


def sentinel_rounds(baseline_rounds: int) -> int:
    """The sentinel's timed rounds: as many as the baseline's cell ran, at least SENTINEL_MIN_ROUNDS
    and at most SENTINEL_MAX_ROUNDS (a family's cost). Fewer give a band as wide as the verdicts it
    judges: with one round, and nothing drifting, the drift was established and withheld correct
    verdicts in 7.3 % of a simulated family (tests/test_drift_sim.py), and read as a point (no
    interval) 17.6 %."""
    return min(max(baseline_rounds, SENTINEL_MIN_ROUNDS), SENTINEL_MAX_ROUNDS)


def drift_interval(before: Sequence[float], after: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % t-interval of mean(after) - mean(before) (logs), the two sets' variance pooled;
    None without two values in all (no spread to read)."""
    n, m = len(before), len(after)
    if n + m < 3:
        return None
    ss = sum((x - statistics.fmean(before)) ** 2 for x in before)
    ss += sum((x - statistics.fmean(after)) ** 2 for x in after)
    df = n + m - 2
    half = t975(df) * math.sqrt(ss / df) * math.sqrt(1 / n + 1 / m)
    d = statistics.fmean(after) - statistics.fmean(before)
    return d - half, d + half


def band_of(d: float, iv: tuple[float, float] | None) -> tuple[bool, float]:
    """(established, band): a drift is established when its interval excludes 0 (no interval: when
    it is not 0, as a point); its band is then the interval's far end from 0 (the point without
    one), else 0: nothing to withhold."""
    if iv is None:
        return d != 0, abs(d)
    lo, hi = iv
    if lo <= 0 <= hi:
        return False, 0.0
    return True, max(abs(lo), abs(hi))


def instance_band(lo: float, hi: float) -> float:
    """The instance effect an A/A control's interval [lo, hi] against its baseline establishes: as a
    drift sentinel's (band_of), its far end from 1 (|log|) where it excludes 1, else 0."""
    return band_of(0.0, (math.log(lo), math.log(hi)))[1]
