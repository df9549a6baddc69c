"""The gate's statistics (docs/gate.md): per cell the new/old tok/s from two runs' rounds (an open
loop's 1 / p50 latency, higher is better for both), the run-to-run spread the cells show beyond
their rounds' own, Holm's step-down over the gated cells, the smallest drop each could have
detected, and the run-wide shift: the cells' new/old pooled. Pure: no pytest, no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .sequential import t_quantile, t_two_sided_p

ALPHA = 0.025  # one-sided, over all the gated cells (Holm): one cell alone is the 95 % interval's top
POWER = 0.80  # the detectable drop: a true drop this large fails the gate at least this often
UNDERPOWERED = 2.0  # a cell that could not detect UNDERPOWERED x the allowed drop has too little power
UNDERPOWERED_MIN = 0.05  # ... or, with a smaller allowed drop, this much
POOLED_MIN = 4  # the run-wide check needs this many cells compared


@dataclass
class CellTest:
    """One cell's tok/s new/old in log: ``d`` the difference of the runs' mean log rates, ``se_rounds``
    its standard error from the rounds (Welch), ``df`` its degrees of freedom; ``tau`` the
    run-to-run spread added (0 when not counted), ``p`` the one-sided p of "new/old >= the floor";
    ``floor`` this cell's own (an open loop's 1 / (1 + the allowed latency rise)), None: Holm's."""

    cell: str
    d: float
    se_rounds: float
    df: int
    n_old: int
    n_new: int
    tau: float = 0.0
    p: float = 1.0
    bar: float = ALPHA  # Holm's bar for this cell's p (its step)
    regressed: bool = False
    floor: float | None = None

    @property
    def se(self) -> float:
        return math.sqrt(self.se_rounds**2 + self.tau**2)

    def interval(self) -> tuple[float, float, float]:
        """new/old with its 95 % interval (the rounds and the run-to-run spread)."""
        half = t_quantile(0.05, self.df) * self.se
        return math.exp(self.d), math.exp(self.d - half), math.exp(self.d + half)

    def detectable(self, floor: float, cells: int) -> float:
        """The smallest drop (1 - new/old) that fails this cell with probability POWER at Holm's
        strictest bar (ALPHA / cells): floor x exp(-(t_bar + t_power) x se) below 1."""
        t_bar = t_quantile(2 * ALPHA / cells, self.df)
        t_pow = t_quantile(2 * (1 - POWER), self.df)
        return 1 - floor * math.exp(-(t_bar + t_pow) * self.se)


def one_sided_p(t: float, df: int) -> float:
    """P(T <= t) for Student's t."""
    half = t_two_sided_p(t, df) / 2
    return half if t < 0 else 1 - half


def cell_test(cell: str, old: Sequence[float], new: Sequence[float]) -> CellTest | None:
    """The Welch test of one cell's rounds (both runs need two rounds or more), or None."""
    if len(old) < 2 or len(new) < 2:
        return None
    la, lb = [math.log(x) for x in old], [math.log(x) for x in new]
    d = statistics.fmean(lb) - statistics.fmean(la)
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    if va + vb == 0:
        return CellTest(cell, d, 0.0, len(la) + len(lb) - 2, len(la), len(lb))
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    # int(df), never up: 2 - 1e-15 (equal variances, their floats) is still 2
    return CellTest(cell, d, math.sqrt(va + vb), max(1, int(df + 1e-9)), len(la), len(lb))


def run_to_run_spread(tests: Sequence[CellTest]) -> float | None:
    """The spread of the cells' new/old (log) beyond what their rounds explain: the squared robust
    scale of the cells' log ratios (1.4826 x their median absolute deviation from the median, so a
    few real regressions do not count as spread) less the median of the rounds' own variances, at
    least 0. None below 4 cells (too few to tell spread from a change). A shift common to every
    cell (the whole machine, or the whole code, slower) is not spread: it stays in each cell's d."""
    if len(tests) < 4:
        return None
    ds = [t.d for t in tests]
    med = statistics.median(ds)
    scale = 1.4826 * statistics.median(abs(x - med) for x in ds)
    own = statistics.median(t.se_rounds**2 for t in tests)
    return math.sqrt(max(0.0, scale**2 - own))


def holm(tests: list[CellTest], floor: float, tau: float | None) -> None:
    """In place: each test's p against ``floor`` (with the run-to-run spread ``tau`` added), its
    Holm bar and whether it regressed (Holm's step-down at ALPHA over ``tests``). A test with a
    floor of its own is held to it."""
    for t in tests:
        t.tau = tau or 0.0
        fl = math.log(floor if t.floor is None else t.floor)
        if t.se == 0:
            t.p = 0.0 if t.d < fl else 1.0
        else:
            t.p = one_sided_p((t.d - fl) / t.se, t.df)
    going = True
    for k, t in enumerate(sorted(tests, key=lambda t: t.p)):
        t.bar = ALPHA / (len(tests) - k)
        going = going and t.p <= t.bar
        t.regressed = going


def underpowered(detectable: float, limit: float) -> bool:
    """Whether a cell that could detect drops of ``detectable`` has too little power for a gate that
    allows ``limit``: it would miss a drop of max(UNDERPOWERED x limit, UNDERPOWERED_MIN) more than
    1 - POWER of the time."""
    return detectable > max(UNDERPOWERED * limit, UNDERPOWERED_MIN)


def pooled(ds: Sequence[float]) -> tuple[float, float, float] | None:
    """The run-wide new/old: the mean of the cells' log new/old with its 95 % t-interval over the
    cells (their spread holds the rounds' noise, the run-to-run spread and the cells' own changes),
    as (point, lo, hi) ratios; None below POOLED_MIN cells. A shift common to every cell moves the
    whole interval, however noisy each cell alone."""
    if len(ds) < POOLED_MIN:
        return None
    mean = statistics.fmean(ds)
    half = t_quantile(0.05, len(ds) - 1) * statistics.stdev(ds) / math.sqrt(len(ds))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
