"""Verdicts read more than once: the boundaries that keep a cell's false-verdict rate at 5 % over
every look a rule takes at its rounds. Pure functions, no pytest, no I/O, no numpy.

A rule that looks at a cell's paired rounds after each round and stops on a verdict (``max_rounds``,
early stopping, racing) gets a false verdict whenever *any* look's interval misses the true ratio;
with a 95 % t-interval at every look that happens far more often than 5 % (11 % over looks 3-10
at a true ratio of 1.02, tests/test_sequential.py). Here every look from ``first`` to ``last``
rounds uses one per-look level alpha' (Pocock's constant boundary on the nominal-significance
scale), set so that the t-intervals of all the looks together cover the true ratio 95 % of the
time: a confidence sequence over the looks. Every verdict a rule reads off them, at whichever
look it stops (faster, slower, within the margin, out of the race), is then false at most 5 % of
the time. The levels (``LEVELS``) come from the joint law of the looks' t-statistics, which under
normal log ratios depends on neither the true ratio nor the spread (scripts/sequential_levels.py
simulates it); outside the table, Bonferroni's alpha / K (valid, wider). docs/metrics.md
"Sequential verdicts" says why this and not O'Brien-Fleming spending or an anytime-valid
mixture boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

ALPHA = 0.05  # two-sided: the false-verdict rate over all looks

# per first look (rounds, 2..10): alpha' for last look = first, first + 1, ..., 30
# (scripts/sequential_levels.py, 1,000,000 simulated sequences)
# fmt: off
LEVELS: dict[int, tuple[float, ...]] = {
    2: (
        0.05002, 0.02755, 0.02002, 0.01628, 0.01403, 0.01247, 0.01133, 0.01047, 0.00979, 0.00921,
        0.00875, 0.00837, 0.00802, 0.00772, 0.00747, 0.00724, 0.00703, 0.00685, 0.00668, 0.00652,
        0.00637, 0.00624, 0.00612, 0.00601, 0.00590, 0.00581, 0.00571, 0.00562, 0.00554,
    ),
    3: (
        0.05031, 0.03055, 0.02295, 0.01871, 0.01610, 0.01432, 0.01295, 0.01193, 0.01113, 0.01049,
        0.00996, 0.00950, 0.00908, 0.00874, 0.00844, 0.00816, 0.00790, 0.00769, 0.00748, 0.00730,
        0.00713, 0.00698, 0.00684, 0.00670, 0.00657, 0.00646, 0.00635, 0.00625,
    ),
    4: (
        0.04979, 0.03275, 0.02513, 0.02077, 0.01794, 0.01597, 0.01450, 0.01332, 0.01239, 0.01168,
        0.01104, 0.01053, 0.01011, 0.00970, 0.00935, 0.00904, 0.00875, 0.00849, 0.00825, 0.00804,
        0.00783, 0.00765, 0.00750, 0.00734, 0.00721, 0.00708, 0.00696,
    ),
    5: (
        0.04958, 0.03404, 0.02680, 0.02241, 0.01945, 0.01734, 0.01581, 0.01456, 0.01354, 0.01268,
        0.01202, 0.01146, 0.01096, 0.01053, 0.01016, 0.00981, 0.00950, 0.00920, 0.00893, 0.00868,
        0.00847, 0.00828, 0.00808, 0.00791, 0.00776, 0.00762,
    ),
    6: (
        0.04972, 0.03519, 0.02814, 0.02375, 0.02072, 0.01857, 0.01694, 0.01566, 0.01456, 0.01368,
        0.01297, 0.01234, 0.01179, 0.01134, 0.01091, 0.01053, 0.01019, 0.00989, 0.00960, 0.00934,
        0.00909, 0.00887, 0.00868, 0.00849, 0.00833,
    ),
    7: (
        0.04972, 0.03611, 0.02923, 0.02484, 0.02187, 0.01962, 0.01792, 0.01657, 0.01553, 0.01460,
        0.01380, 0.01310, 0.01253, 0.01203, 0.01157, 0.01118, 0.01082, 0.01048, 0.01019, 0.00991,
        0.00965, 0.00943, 0.00921, 0.00901,
    ),
    8: (
        0.04976, 0.03689, 0.03012, 0.02591, 0.02287, 0.02055, 0.01883, 0.01749, 0.01636, 0.01542,
        0.01457, 0.01386, 0.01323, 0.01269, 0.01220, 0.01179, 0.01141, 0.01104, 0.01073, 0.01045,
        0.01018, 0.00992, 0.00970,
    ),
    9: (
        0.04995, 0.03758, 0.03102, 0.02680, 0.02369, 0.02142, 0.01969, 0.01828, 0.01711, 0.01611,
        0.01529, 0.01454, 0.01388, 0.01329, 0.01282, 0.01235, 0.01196, 0.01160, 0.01128, 0.01096,
        0.01067, 0.01042,
    ),
    10: (
        0.04987, 0.03808, 0.03162, 0.02738, 0.02439, 0.02216, 0.02037, 0.01893, 0.01774, 0.01671,
        0.01587, 0.01512, 0.01444, 0.01385, 0.01333, 0.01286, 0.01243, 0.01208, 0.01174, 0.01142,
        0.01111,
    ),
}
# fmt: on
LEVELS_LAST = 30


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (integer) degrees of freedom (Abramowitz &
    Stegun 26.7.3-4: a finite series in cos^2 of atan(t / sqrt(df)))."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1; got {df}")
    x = math.atan(abs(t) / math.sqrt(df))
    c2, s, c = math.cos(x) ** 2, math.sin(x), math.cos(x)
    if df % 2:  # odd
        total, term = 0.0, 0.0
        if df > 1:
            term, total = 1.0, 1.0
            for k in range(1, (df - 3) // 2 + 1):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            total *= c
        inside = 2 / math.pi * (x + s * total)
    else:
        term, total = 1.0, 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def t_quantile(level: float, df: int) -> float:
    """The c with P(|T| >= c) = ``level`` (two-sided), by bisection on t_two_sided_p."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > level:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if t_two_sided_p(mid, df) > level:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class Looks:
    """The rounds after which a rule may read a cell's verdict: every round from ``first`` to
    ``last`` (one look when they are equal: the ordinary 95 % t-interval). ``family``: how many
    comparisons share the 5 % at the cell's shape (a race's members; Bonferroni: each gets
    5 % / family, so that no verdict or drop of the shape is false in 95 % of runs)."""

    first: int
    last: int
    family: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last:
            raise ValueError(f"looks need 1 <= first <= last; got {self.first}, {self.last}")
        if self.family < 1:
            raise ValueError(f"a family holds at least one comparison; got {self.family}")

    @property
    def one(self) -> bool:
        """A single 95 % look (the ordinary t-interval)."""
        return self.last <= self.first and self.family == 1

    @property
    def count(self) -> int:
        """Looks that can give an interval (one round gives none)."""
        return self.last - max(self.first, 2) + 1

    @property
    def level(self) -> float:
        """alpha': the two-sided level each look's t-interval uses."""
        return self.looks_level / self.family

    @property
    def looks_level(self) -> float:
        """alpha' of one comparison over its looks (before the family's share)."""
        first = max(self.first, 2)
        if self.last <= first:
            return ALPHA
        row = LEVELS.get(first)
        if row is not None and self.last <= LEVELS_LAST:
            return row[self.last - first]
        return ALPHA / self.count  # Bonferroni: valid for any looks, wider

    def critical(self, n: int) -> float:
        """The t multiplier of the interval after ``n`` paired rounds (n >= 2)."""
        return _critical(self.level, n - 1)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"looks": [self.first, self.last], "level": round(self.level, 6)}
        if self.family > 1:
            out["family"] = self.family
        return out

    @classmethod
    def of(cls, info: Any) -> Looks | None:
        """The looks a results JSON's ``extra_info.sequential`` recorded (None: one look)."""
        seq = (info or {}).get("sequential") if isinstance(info, dict) else None
        if not seq or not seq.get("looks"):
            return None
        first, last = seq["looks"]
        family = int(seq.get("family") or 1)
        return cls(int(first), int(last), family) if last > first or family > 1 else None


_CACHE: dict[tuple[float, int], float] = {}


def _critical(level: float, df: int) -> float:
    key = (level, df)
    if key not in _CACHE:
        _CACHE[key] = t_quantile(level, df)
    return _CACHE[key]


def union(*looks: Looks | None) -> Looks | None:
    """Looks covering each given one (two cells compared: the rounds either may have stopped at)."""
    given = [x for x in looks if x is not None]
    if not given:
        return None
    return Looks(min(x.first for x in given), max(x.last for x in given), max(x.family for x in given))


class _Interval(Protocol):
    point: float
    lo: float | None
    hi: float | None
    n: int

    def verdict(self, null: float = 1.0) -> str: ...


SETTLED = ("faster", "slower")  # and "within ±N%": any verdict but "not separated"


def settled(iv: _Interval | None) -> str | None:
    """The verdict of a ratio's interval when it is settled either way (faster, slower, within
    the margin), else None."""
    if iv is None or iv.lo is None or iv.hi is None:
        return None
    v = iv.verdict()
    return None if v == "not separated" else v


def lost(iv: _Interval | None) -> bool:
    """Whether a method's interval against a shape's leader lies wholly below it, beyond the
    margin (its verdict against the leader is "slower")."""
    if iv is None or iv.lo is None:
        return False
    behind = getattr(iv, "behind", None)  # a gap with an indifference zone (deciding/selection.py)
    return bool(behind) if behind is not None else iv.verdict() == "slower"


@dataclass(frozen=True)
class Stop:
    """Why a cell's rounds end: ``reason`` is "settled", "dropped" (out of the race), "cap" or
    "fixed"; ``text`` says it for a reader."""

    reason: str
    text: str


def check(n: int, looks: Looks, settled_as: str | None, vs_leader: _Interval | None = None) -> Stop | None:
    """After ``n`` rounds, stop now? Only at a look (first <= n): out of the race when the interval
    against the shape's leader lies wholly below it; settled when ``settled_as`` (what the verdict
    against the reference is settled as, from intervals over ``looks``) says so and there are
    looks left to skip; else None: another round (the caller stops at ``last``)."""
    if n < looks.first:
        return None
    if lost(vs_leader):
        assert vs_leader is not None and vs_leader.lo is not None and vs_leader.hi is not None
        return Stop(
            "dropped",
            f"out of the race after {n} rounds: x{vs_leader.point:.3f} "
            f"[{vs_leader.lo:.3f}, {vs_leader.hi:.3f}] against the shape's leader",
        )
    if settled_as is not None and looks.last > looks.first:
        return Stop("settled", f"decided after {n} rounds: {settled_as}")
    return None
