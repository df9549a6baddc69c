"""The gate's statistics (docs/gate.md): per cell the new/old tok/s from two runs' rounds (an open
loop's 1 / p50 latency, higher is better for both), the run-to-run spread the cells show beyond
their rounds' own (stated, or read from the cells with the few degrees of freedom a few cells
give, or assumed where they are too few), Holm's step-down over the gated cells, the smallest drop each
could have detected at Holm's bar (Student's noncentral t), and the run-wide shift: the cells'
new/old pooled. Pure: no pytest, no I/O."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .sequential import t_quantile as _t_quantile
from .sequential import t_two_sided_p

ALPHA = 0.025  # one-sided, over all the gated cells (Holm): one cell alone is the 95 % interval's top
POWER = 0.80  # the detectable drop: a true drop this large fails the gate at least this often
UNDERPOWERED = 2.0  # a cell that could not detect UNDERPOWERED x the allowed drop has too little power
UNDERPOWERED_MIN = 0.05  # ... or, with a smaller allowed drop, this much
POOLED_MIN = 4  # the run-wide check needs this many cells compared
SPREAD_CELLS = 4  # the run-to-run spread is read from this many cells with rounds in both runs or more
ASSUMED_RUN_SPREAD = 0.05  # below that: one run's level of a cell assumed to vary by this (sd, log)
MAD_EFFICIENCY = 0.37  # the median absolute deviation's share of a variance's degrees of freedom
SPREAD_Z = 0.84  # a spread read from the cells is counted at its upper 80 % bound
DF_MAX = 1000  # Student's t beyond this many degrees of freedom is read as at this many


@functools.lru_cache(maxsize=4096)
def t_quantile(level: float, df: int) -> float:
    """sequential.t_quantile, kept: a gate asks for the same few over and over."""
    return _t_quantile(level, df)


@dataclass(frozen=True)
class Spread:
    """The run-to-run spread counted in every cell: ``tau`` the sd (log) it adds to a cell's
    difference of two runs (sqrt 2 x one run's), ``how`` where it comes from: ``read`` from
    ``cells`` cells (its upper bound, with ``df`` degrees of freedom; ``read`` what the cells
    show), ``assumed`` (fewer than SPREAD_CELLS cells: ASSUMED_RUN_SPREAD a run) or ``stated``
    (the user's, a run), both taken as known (df infinite)."""

    tau: float
    how: str
    cells: int
    df: float = math.inf
    read: float = 0.0

    @property
    def per_run(self) -> float:
        """One run's sd (log): tau / sqrt 2."""
        return self.tau / math.sqrt(2)


@dataclass
class CellTest:
    """One cell's tok/s new/old in log: ``d`` the difference of the runs' mean log rates, ``se_rounds``
    its standard error from the rounds (Welch), ``df`` its degrees of freedom; ``tau`` the
    run-to-run spread added (0 when not counted) and ``tau_df`` its degrees of freedom (infinite:
    taken as known); ``p`` the one-sided p of "new/old >= the floor"; ``floor``
    this cell's own (an open loop's 1 / (1 + the allowed latency rise)), None: Holm's."""

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
    tau_df: float = math.inf

    @property
    def se(self) -> float:
        return math.sqrt(self.se_rounds**2 + self.tau**2)

    def dof(self) -> int:
        """The degrees of freedom of ``se``: Welch's of the rounds, with the spread's by
        Satterthwaite (a spread taken as known adds none; a read one's few cells can take most)."""
        a = self.se_rounds**2
        if self.tau == 0:
            return self.df
        den = a * a / self.df + self.tau**4 / self.tau_df
        if den == 0:
            return DF_MAX
        return max(1, min(DF_MAX, int((a + self.tau**2) ** 2 / den + 1e-9)))

    def interval(self) -> tuple[float, float, float]:
        """new/old with its 95 % interval (the rounds and the run-to-run spread)."""
        half = t_quantile(0.05, self.dof()) * self.se
        return math.exp(self.d), math.exp(self.d - half), math.exp(self.d + half)

    def detectable(self, floor: float, cells: int) -> float:
        """The smallest drop (1 - new/old) that fails this cell with probability POWER at Holm's
        strictest bar (ALPHA / cells, the bar a lone regressed cell among ``cells`` meets first):
        floor x exp(-lambda x se / m) below 1, lambda the noncentral t's shift (power_shift) and
        m the median of se over the true standard error (median_se_ratio): se read from rounds
        is below the true one in half the runs, and a drop read off it would be missed more often.
        With a spread read from the cells: at the fewer of the cell's and the spread's degrees of
        freedom, less one (the spread counted, an upper bound, moves from run to run more than a
        variance of its degrees of freedom would, and a drop claimed where it read low would be
        missed more often; simulated in tests/test_gate_power.py)."""
        df = self.dof()
        if math.isfinite(self.tau_df):
            df = max(1, min(df, int(self.tau_df + 1e-9)) - 1)
        shift = power_shift(ALPHA / cells, POWER, df) * self.se / median_se_ratio(df)
        return 1 - floor * math.exp(-shift)


def median_se_ratio(df: int) -> float:
    """The median of a standard error read with ``df`` degrees of freedom over the true one:
    sqrt(the chi-square median / df), the median by Wilson and Hilferty (a little low: the ratio's
    inverse errs large)."""
    if df >= DF_MAX:
        return 1.0
    return math.sqrt((1 - 2 / (9 * df)) ** 3)


@functools.lru_cache(maxsize=512)
def power_shift(alpha: float, power: float, df: int) -> float:
    """The shift lambda (in standard errors) at which a one-sided t-test at ``alpha`` with ``df``
    degrees of freedom rejects with probability ``power``: P(Z - lambda <= -t_alpha x S) = power,
    S the estimated standard error over the true one (sqrt of chi-square over df). Not t_alpha +
    t_power, which holds for a known standard error only: at 4 degrees of freedom among 20 cells
    that sum is 7.70 where 8.44 is needed."""
    t_bar = t_quantile(2 * alpha, df)
    lo, hi = 0.0, t_bar + 2.0
    while _power(hi, t_bar, df) < power:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if _power(mid, t_bar, df) < power:
            lo = mid
        else:
            hi = mid
    return hi


def _power(shift: float, t_bar: float, df: int, steps: int = 400) -> float:
    """E[Phi(shift - t_bar x S)], S = sqrt(chi2_df / df), by Simpson's rule over S's density."""
    if df >= DF_MAX:
        return _phi(shift - t_bar)
    width = 10 / math.sqrt(2 * df)
    lo, hi = max(0.0, 1 - width), 1 + max(width, 8 / math.sqrt(df))
    h = (hi - lo) / steps
    log_c = df / 2 * math.log(df) - (df / 2 - 1) * math.log(2) - math.lgamma(df / 2)
    total = 0.0
    for i in range(steps + 1):
        s = lo + i * h
        if s <= 0:
            dens = math.sqrt(2 / math.pi) if df == 1 else 0.0
        else:
            dens = math.exp(log_c + (df - 1) * math.log(s) - df * s * s / 2)
        w = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += w * dens * _phi(shift - t_bar * s)
    return total * h / 3


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


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


def run_to_run_spread(tests: Sequence[CellTest], stated: float | None = None) -> Spread:
    """The spread of the cells' new/old (log) beyond what their rounds explain. ``stated`` (one
    run's sd, from repeat runs of the same code): that, known. Below SPREAD_CELLS cells:
    ASSUMED_RUN_SPREAD a run, assumed (too few cells to tell spread from a change). Else read
    from the cells: ``read`` the smallest tau**2 at which their log ratios, each over its own
    standard error sqrt(se_rounds**2 + tau**2), have a robust scale of at most 1 (1.4826 x the
    median absolute deviation from the median, squared, x k / (k - 1): a few real regressions do
    not count as spread, and cells of few noisy rounds do not hide the spread of steady ones).
    What is counted is its upper bound, read + SPREAD_Z x its standard error: tau**2's variance
    from its Fisher information as k cells of the median cell's variance v would hold it, 2 v**2
    / k, over MAD_EFFICIENCY (a few cells cannot tell a spread of 0 from one of the rounds' size,
    and a few steady cells among noisy ones cannot pin it down). That bound carries
    MAD_EFFICIENCY x (k - 1) degrees of freedom, which enter every cell's by Satterthwaite. A
    shift common to every cell (the whole machine, or the whole code, slower) is not spread: it
    stays in each cell's d."""
    k = len(tests)
    if stated is not None:
        return Spread(math.sqrt(2) * stated, "stated", k)
    if k < SPREAD_CELLS:
        return Spread(math.sqrt(2) * ASSUMED_RUN_SPREAD, "assumed", k)
    mid = statistics.median(t.d for t in tests)
    tau2 = 0.0
    if _scale2(tests, 0.0, mid) > 1:
        lo, hi = 0.0, max((t.d - mid) ** 2 for t in tests)
        while _scale2(tests, hi, mid) > 1:
            hi *= 2
        for _ in range(60):
            tau2 = (lo + hi) / 2
            lo, hi = (tau2, hi) if _scale2(tests, tau2, mid) > 1 else (lo, tau2)
        tau2 = hi
    v = statistics.median(t.se_rounds**2 + tau2 for t in tests)
    upper = tau2 + SPREAD_Z * v * math.sqrt(2 / (MAD_EFFICIENCY * k))
    return Spread(math.sqrt(upper), "read", k, MAD_EFFICIENCY * (k - 1), math.sqrt(tau2))


def _scale2(tests: Sequence[CellTest], tau2: float, mid: float) -> float:
    """The squared robust scale of the cells' (d - mid) / sqrt(se_rounds**2 + tau2)."""
    r = []
    for t in tests:
        v = t.se_rounds**2 + tau2
        if v > 0:
            r.append((t.d - mid) / math.sqrt(v))
        else:  # steady rounds: any difference from the others is beyond them
            r.append(0.0 if t.d == mid else math.copysign(math.inf, t.d - mid))
    m = statistics.median(r)
    if not math.isfinite(m):
        return math.inf
    return (1.4826 * statistics.median(abs(x - m) for x in r)) ** 2 * len(r) / (len(r) - 1)


def holm(tests: list[CellTest], floor: float, spread: Spread | float | None) -> None:
    """In place: each test's p against ``floor`` (with the run-to-run ``spread`` added: a Spread,
    or a known tau, or None for none), its Holm bar and whether it regressed (Holm's step-down at
    ALPHA over ``tests``). A test with a floor of its own is held to it."""
    if not isinstance(spread, Spread):
        spread = Spread(spread or 0.0, "stated", len(tests))
    for t in tests:
        t.tau, t.tau_df = spread.tau, spread.df
        fl = math.log(floor if t.floor is None else t.floor)
        if t.se == 0:
            t.p = 0.0 if t.d < fl else 1.0
        else:
            t.p = one_sided_p((t.d - fl) / t.se, t.dof())
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
