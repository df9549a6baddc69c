"""Two levels of variance (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013):
rounds vary within an engine start, and engine starts vary within a configuration. Pure: no pytest,
no I/O (docs/metrics.md "Two levels: rounds and engine starts").

A round's log speed is ``mu + u + e``: ``u`` its engine start's own level (an instance effect: where
the OS placed its processes, which GPU of a set, what a cache held), the same for every round of
that start, with variance tau², and ``e`` the round's noise. Alternating rounds cancel what the
machine does over time, never ``u``: two methods compared, each one start, differ by their u's as
well, whose variance 2 tau² no number of rounds shrinks. So every comparison of engines started
apart carries ``tau² (1/s_a + 1/s_b)`` (``s``: the starts whose rounds each side averages) on top of
its rounds' variance, and where that dominates, another start narrows it and more rounds do not.

tau² is read from pairs of starts of one configuration (``Pair``): an A/A control (a twin of the
baseline) against the baseline beside it, and two starts of a member (a twin in the matrix: the same
engine under another name). A pair's difference ``d`` of mean logs has E[d²] = 2 tau² + v (v: its
rounds' variance). Kalibera and Jones's level-2 estimate takes v out, Σ (d² - v) / 2K over K pairs,
at least 0; here it is left in, Σ d² / 2K: an estimate biased up by the rounds' share that holds
its level where K is 1 or 2 (a run with one A/A control: false verdicts between equal methods 4.1 %
of comparisons where the subtracted one gave 7.6 %, tau 3 %, round CV 2 %, tests/test_instances.py)
and costs little where rounds are tight. It has K degrees of freedom; an interval combines it with
its rounds' variance by Satterthwaite's rule (``widen``). One tau² per run: the starts of one backend on one
kind of GPU are assumed to vary alike whatever the method (the pairs are pooled over shapes and
configurations, which is what gives an estimate degrees of freedom at all).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .paired import _sd, log_se, satterthwaite_df
from .sequential import t_quantile, t_two_sided_p


@dataclass(frozen=True)
class Pair:
    """Two starts of one configuration measured at one shape: ``a`` and ``b`` name them (cells),
    ``d`` the difference of their mean log speeds, ``v`` its variance from their rounds."""

    a: str
    b: str
    d: float
    v: float


@dataclass(frozen=True)
class Starts:
    """The start-to-start variance of a run: ``tau2`` (log scale) from ``k`` pairs."""

    tau2: float
    k: int
    pairs: tuple[Pair, ...] = ()

    @property
    def sd(self) -> float:
        return math.sqrt(self.tau2)

    def var(self, starts_a: int = 1, starts_b: int = 1) -> float:
        """The variance two sides' start effects add to a comparison of them (each side the mean
        over its ``starts``)."""
        return self.tau2 * (1 / starts_a + 1 / starts_b)


def estimate(pairs: Sequence[Pair], leave_out: str | None = None) -> Starts | None:
    """tau² from ``pairs`` (Σ d² / 2K: each pair's round noise left in), without the pairs that hold the cell
    ``leave_out`` (a pair judged against the others); None without a pair."""
    use = tuple(p for p in pairs if leave_out not in (p.a, p.b))
    if not use:
        return None
    tau2 = math.fsum(p.d**2 for p in use) / (2 * len(use))
    return Starts(tau2, len(use), use)


def pair_of(a: str, b: str, logs_a: Sequence[float], logs_b: Sequence[float] | None = None) -> Pair | None:
    """The pair of two starts from their per-round log speeds (``logs_b`` None: ``logs_a`` are a
    control's logs against the baseline beside it, already a difference); None without two rounds
    a side."""
    if len(logs_a) < 2 or (logs_b is not None and len(logs_b) < 2):
        return None

    def mean_var(xs: Sequence[float]) -> tuple[float, float]:
        return math.fsum(xs) / len(xs), _sd(xs) ** 2 / len(xs)

    ma, va = mean_var(logs_a)
    if logs_b is None:
        return Pair(a, b, ma, va)
    mb, vb = mean_var(logs_b)
    return Pair(a, b, ma - mb, va + vb)


def per_start(pairs: Sequence[tuple[tuple[object, ...], Pair]]) -> list[Pair]:
    """One pair per pair of starts: the pairs read at several shapes of the same two starts (``key``:
    which two starts), their mean difference with the variance of that mean. One engine start serves
    every shape of its group, so its shapes are one pair of starts, not several."""
    groups: dict[tuple[object, ...], list[Pair]] = {}
    for key, p in pairs:
        groups.setdefault(key, []).append(p)
    out = []
    for ps in groups.values():
        n = len(ps)
        out.append(Pair(ps[0].a, ps[0].b, math.fsum(p.d for p in ps) / n, math.fsum(p.v for p in ps) / n**2))
    return out


def satterthwaite(parts: Sequence[tuple[float, float]]) -> tuple[float, int]:
    """(Σ variance, Satterthwaite's degrees of freedom) of a sum of independent variance estimates,
    each (variance, its degrees of freedom): stats/paired.py's ``satterthwaite_df``."""
    return math.fsum(v for v, _ in parts), satterthwaite_df([(0.0, v, int(df)) for v, df in parts])


def widen(
    point: float,
    lo: float,
    hi: float,
    t: float,
    df: int,
    starts: Starts,
    starts_a: int = 1,
    starts_b: int = 1,
) -> tuple[float, float, float, int]:
    """An interval [lo, hi] of a ratio (read with multiplier ``t`` at ``df``) widened by the start
    effects of its two sides: the same two-sided level, its variance plus ``starts.var``, degrees
    of freedom by Satterthwaite's rule over the rounds' (``df``) and tau²'s (``starts.k``). Returns
    (lo, hi, t, df)."""
    se = log_se(lo, hi, t)
    extra = starts.var(starts_a, starts_b)
    if extra <= 0:
        return lo, hi, t, df
    level = t_two_sided_p(t, df)
    var, ndf = satterthwaite([(se**2, df), (extra, starts.k)])
    nt = t_quantile(level, ndf)
    half = nt * math.sqrt(var)
    c = math.log(point)
    return math.exp(c - half), math.exp(c + half), nt, ndf


def disagree(pair: Pair, others: Starts | None, level: float = 0.05) -> bool:
    """Whether two starts of one configuration differ by more than the other pairs' tau² and their
    rounds allow (two-sided at ``level``): an instance that sits off the others. Without other
    pairs, against the rounds alone (a normal quantile: the rounds' variance of a mean is known
    well enough for a check, not for a verdict)."""
    if others is None or others.tau2 <= 0:
        z = t_quantile(level, 1000)
        return abs(pair.d) > z * math.sqrt(pair.v) if pair.v > 0 else pair.d != 0
    var, df = satterthwaite([(pair.v, 1000), (2 * others.tau2, others.k)])
    return abs(pair.d) > t_quantile(level, df) * math.sqrt(var)
