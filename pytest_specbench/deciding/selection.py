"""Selection with an indifference zone: when a racing member is out, when it is within δ of the
shape's leader, and when it is still open (docs/metrics.md "Racing with an indifference zone").
Pure: no pytest, no I/O.

The user says the smallest difference worth a decision, δ (``DELTA``; the matrix's ``race: {delta:}``
or ``--specbench-race-delta``). After every look a member is compared with the shape's leader so
far on the difference of their mean log speeds (``gap``):

- its speeds are per round, each against the baseline beside it (an interleaved baseline) or its
  own tok/s (measured apart; then widened by the drift its brackets bound, deciding/race.py);
- the two samples are independent cells, so the difference is Welch's, every round of both used
  (pairing by index would stop at the shorter one's count), plus ``extra_var``: the variance of
  engine starts (two instances compared: 2 τ², stats/instances.py) where one is known;
- the bound is one-sided at the look's level (stats/sequential.py: Pocock's constant per-look level
  over the cell's looks, divided over the shape's racing methods), so over every look and every
  rival the chance that any member truly within δ of the best is put out stays under 5 %.

``behind``: the upper bound of member / leader is below 1 - δ: the member is more than δ behind with
the run's confidence, and is dropped. ``within``: its lower bound is at least 1 - δ: it cannot be more
than δ behind; it is kept and said to be within δ. ``open``: neither yet: another round, up to the
cap. Kim & Nelson's fully sequential procedure (ACM TOMACS 2001) drops on a triangular region that
closes at δ, so two methods within δ are separated at its end by whichever reads lower; this rule
keeps them both (a user who says "within δ is the same to me" gets both named) and tests the one
hypothesis a drop claims, "more than δ behind", at each look. F-Race's Friedman test over
instances is the other reference: here the instances are the rounds and the shapes are raced
separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..stats.instances import satterthwaite
from ..stats.paired import _sd, welch
from ..stats.sequential import Looks, t_quantile

DELTA = 0.02  # the indifference zone's default: the ±2 % margin every verdict already reads

BEHIND, WITHIN, OPEN = "behind", "within", "open"


@dataclass(frozen=True)
class Gap:
    """A member over the shape's leader: ``point`` (ratio of geometric means), the two one-sided
    bounds at the look's level (``lo``, ``hi``), the rounds of each, Welch's degrees of freedom,
    δ and the status (behind, within, open)."""

    point: float
    lo: float
    hi: float
    n: int
    lead_n: int
    df: int
    delta: float
    status: str
    starts_share: float = 0.0  # of the variance, what the start-to-start level gives (stats/instances.py)

    @property
    def behind(self) -> bool:
        return self.status == BEHIND

    @property
    def within(self) -> bool:
        return self.status == WITHIN


def one_sided(level: float, df: int) -> float:
    """The t multiplier of a one-sided bound at ``level`` (its two-sided quantile at 2 x level)."""
    return t_quantile(min(1.0, 2 * level), max(1, df))


def pooled(samples: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The within-cell variance of per-round log speeds pooled over a shape's cells (each cell's
    rounds about its own mean): (variance, degrees of freedom, the sum of n - 1); (0, 0) without a
    cell of two rounds."""
    ss, df = 0.0, 0
    for xs in samples:
        logs = [math.log(x) for x in xs if x and x > 0]
        if len(logs) > 1:
            m = math.fsum(logs) / len(logs)
            ss += math.fsum((x - m) ** 2 for x in logs)
            df += len(logs) - 1
    return (ss / df if df else 0.0), df


NOISIER = 0.05  # a side whose own round variance exceeds the pool's at this level keeps its own


def _chi2_over_k(p: float, k: int) -> float:
    """χ²_p(k) / k by Wilson and Hilferty's cube (within a few per cent for k >= 2)."""
    z = {0.90: 1.2816, 0.95: 1.6449, 0.99: 2.3263}[p]
    c = 2 / (9 * k)
    return (1 - c + z * math.sqrt(c)) ** 3


def _side(logs: Sequence[float], shape_var: tuple[float, int]) -> tuple[float, int, bool]:
    """One side's variance of its mean and its degrees of freedom. Its own rounds' variance is
    judged against the pool's: no larger than the pool's upper 95 % point for its n - 1 degrees of
    freedom (the same noise as the shape's cells), it is read with the pool's variance (or its
    own where larger) and the pool's degrees of freedom; larger (a noisier cell), with its own
    variance and its own n - 1."""
    sp, sdf = shape_var
    k = len(logs) - 1
    own = _sd(logs) ** 2 if k > 0 else 0.0
    if k > 0 and own > sp * _chi2_over_k(1 - NOISIER, k):
        return own / len(logs), k, False
    return max(sp, own) / len(logs), sdf, True


def gap(
    own: Sequence[float],
    lead: Sequence[float],
    looks: Looks,
    delta: float = DELTA,
    extra_var: float = 0.0,
    shape_var: tuple[float, int] | None = None,
    extra_df: int | None = None,
) -> Gap | None:
    """The member (``own``: its per-round speeds) over the leader (``lead``), at the looks' per-look
    level (one-sided); None without an interval (one round each). ``shape_var``: the round
    variance pooled over the shape's cells (``pooled``): a side whose rounds vary as the shape's
    do is read with the pool's variance (its own where larger) and degrees of freedom, a noisier
    one with its own (``_side``); the two sides' degrees of freedom combine as Satterthwaite's, so
    a noisy side with few rounds is read with few degrees of freedom whatever the pool holds.
    ``extra_var``: the start-to-start variance the two sides add (stats/instances.py), an estimate
    with ``extra_df`` degrees of freedom (None: known) combined by Satterthwaite's rule."""
    la = [math.log(x) for x in own if x and x > 0]
    lb = [math.log(x) for x in lead if x and x > 0]
    w = welch(la, lb, extra_var)
    if w is None:
        return None
    d, var, df = w
    if shape_var is not None and shape_var[1] > df:
        sides = [_side(la, shape_var), _side(lb, shape_var) if len(lb) > 1 else (0.0, 0, True)]
        v = sum(x for x, _, _ in sides)
        if v > 0 and all(pool for _, _, pool in sides):  # one estimate, the pool's: its df
            var, df = v + extra_var, shape_var[1]
        elif v > 0:  # a noisier side on its own: Satterthwaite's over the two
            parts = sum(x**2 / k for x, k, _ in sides if k)
            var, df = v + extra_var, max(1, int(v**2 / parts))
    if extra_var > 0 and extra_df:
        var, df = satterthwaite([(var - extra_var, df), (extra_var, extra_df)])
    half = one_sided(looks.level, df) * math.sqrt(var)
    lo, hi = math.exp(d - half), math.exp(d + half)
    share = extra_var / var if var > 0 else 0.0
    return Gap(math.exp(d), lo, hi, len(la), len(lb), df, delta, classify(lo, hi, delta), share)


def classify(lo: float, hi: float, delta: float) -> str:
    """The status of bounds [lo, hi] of member / leader (after any widening) against δ."""
    floor = 1 - delta
    return BEHIND if hi < floor else WITHIN if lo >= floor else OPEN


POWER_Z = 0.8416  # the normal quantile for 80 % power


def rounds_needed(cv: float, delta: float, looks: Looks, gap_: float = 0.0, most: int = 200) -> int | None:
    """The rounds each of two cells needs, at round CV ``cv`` (of the figure compared: the paired
    ratio where a baseline is interleaved), for the one-sided bound of a true ratio ``1 - gap_`` to
    clear 1 - δ in 80 % of runs: a member ``gap_`` behind dropped (``gap_`` > δ), or one level with
    the leader (``gap_`` 0) said to be within δ; None past ``most``, or where ``gap_`` is within
    δ but not 0 (such a member is neither dropped nor surely within)."""
    s = math.log(1 + cv)
    if 0 < gap_ <= delta:
        return None
    target = abs(math.log(1 - delta) - math.log(1 - gap_))
    for n in range(2, most + 1):
        se = s * math.sqrt(2 / n)
        if (one_sided(looks.level, 2 * n - 2) + POWER_Z) * se < target:
            return max(n, looks.first)
    return None


def pct(x: float) -> str:
    """A fraction as the screen says it: 2%, 2.5%."""
    return f"{x:.1%}".replace(".0%", "%")


DEFAULT_CVS = (0.005, 0.01, 0.03, 0.05)  # in-process SGLang with CUDA graphs .. a busy CPU


def plan_lines(delta: float, looks: Looks, cvs: Sequence[float] = DEFAULT_CVS, source: str = "") -> list[str]:
    """The plan's lines for the race's indifference zone: at each round CV (of the figure compared),
    the rounds each of two cells needs to drop a member 5 % or 10 % behind its leader, and to say
    one level with it is within δ, at the race's per-look level (``looks``: the racing cells' looks
    and family)."""
    where = source or "assumed; --specbench-plan-from a results JSON gives the CVs it measured"
    out = [
        f"  indifference zone δ = {pct(delta)} (race: {{delta: ...}} or --specbench-race-delta): a member "
        f"more than δ behind its shape's leader is dropped, one within δ kept; rounds each cell needs in "
        f"80 % of runs, looks {looks.first}..{looks.last} shared by {looks.family} (round CV: {where}):"
    ]
    gaps = [(f"{pct(g)} behind", g) for g in (0.05, 0.10, 0.20) if g > delta][:2]
    for cv in cvs:
        cols = []
        for label, g in (*gaps, (f"level: within {pct(delta)}", 0.0)):
            n = rounds_needed(cv, delta, looks, g)
            cols.append(f"{label} {n if n is not None and n <= looks.last else f'> {looks.last}'}")
        out.append(f"    CV {cv:.1%}: " + ", ".join(cols))
    return out


GATE_DROPS = (0.05, 0.10)


def gate_rounds(cv: float, drop: float, run_sd: float, cells: int = 1, most: int = 200) -> int | None:
    """The rounds each of two runs of a cell needs for the gate (stats/gate_stats.py: one-sided at
    ALPHA over its cells by Holm, the run-to-run spread ``run_sd`` a run counted in every cell) to
    fail a true drop of ``drop`` in 80 % of runs, one cell of ``cells`` regressing (Holm's first
    step, ALPHA / cells); None where no number of rounds would: the run-to-run spread alone is too
    wide (repeat the runs instead), or past ``most``."""
    from statistics import NormalDist

    from ..stats.gate_stats import ALPHA

    z = NormalDist().inv_cdf(1 - ALPHA / max(1, cells)) + POWER_Z
    target = -math.log(1 - drop)
    s = math.log(1 + cv)
    for n in range(2, most + 1):
        if z * math.sqrt(2 * s * s / n + 2 * run_sd**2) < target:
            return n
    return None


def gate_lines(cvs: Sequence[float], cells: int, source: str = "") -> list[str]:
    """The plan's lines for the gate: at each round CV, the rounds a cell needs in each of two runs
    to catch a drop of 5 % or 10 % in 80 %, at the run-to-run spread the gate assumes with few
    cells and with none."""
    from ..stats.gate_stats import ASSUMED_RUN_SPREAD

    where = source or "assumed; --specbench-plan-from a results JSON gives the CVs it measured"
    out = [
        "  the gate (python -m pytest_specbench.report OLD NEW --max-tok-s-drop F): rounds each run of a "
        f"cell needs to fail a true drop of F in 80 %, one cell of {cells} regressing (round CV: {where}):"
    ]
    for cv in cvs:
        cols = []
        for spread, label in ((ASSUMED_RUN_SPREAD, f"run spread {pct(ASSUMED_RUN_SPREAD)}"), (0.0, "none")):
            got = [gate_rounds(cv, f, spread, cells) for f in GATE_DROPS]
            cols.append(
                f"{label}: "
                + ", ".join(
                    f"F {pct(f)} {n if n is not None else 'never'}"
                    for f, n in zip(GATE_DROPS, got, strict=True)
                )
            )
        out.append(f"    CV {cv:.1%}: " + "; ".join(cols))
    out.append(
        "    (no number of rounds narrows a run's own level: where it says never, repeat the runs, or let "
        "the gate read the spread from 4 or more cells)"
    )
    return out
