"""How a cell's timed rounds stop: the one stopping protocol. ``workloads/rounds.py`` runs rounds
and, after every timed round, asks the cell's ``Stopping`` with the round figures so far (the
cell's, and its interleaved baseline's); the answer is continue, settled or dropped, with what the
cell's JSON records of it. When the rounds run out without a stop, ``finish`` says why (the cap,
or a fixed count). GuideLLM's constraints are the same idea: a rule the loop consults, that owns
its reasons.

The rule: a look after every round from ``looks.first`` to ``looks.last``; the cell stops at the
first look where its verdict is settled (stats/sequential.py: intervals at the per-look level,
valid over every look), or where its race against the shape's leader (``race``, deciding/race.py)
puts it out. Without a reference (its baseline measured apart) "settled" means its own rounds'
interval is within the ±2 % margin of their mean: its half of a comparison read after the run.
Pure: no pytest, no engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..matrix.cells import Cell
from ..stats import paired, sequential
from ..stats.sequential import Looks
from .selection import pct

CONTINUE, SETTLED, DROPPED = "continue", "settled", "dropped"
# the futility projection's half-width at the cap, as a share of what the spread so far projects:
# a cell stops only where even an interval this much narrower would not settle it (at the current
# point: conditional power well under 50 %)
OPTIMISM = 0.5
# a racing cell open against its leader stops once the start-to-start level is more than this share
# of its gap's variance: rounds then narrow what is left by little, another start would
STARTS_SHARE = 0.8

# the race's look at a cell: (own rounds, reference rounds or None, closed loop, looks) ->
# (its interval against the shape's leader, what the JSON says of that leader) or None
RaceLook = Callable[[list[float], list[float] | None, bool, Looks], tuple[Any, dict[str, Any]] | None]


@dataclass(frozen=True)
class Answer:
    """After a round: ``state`` is continue, settled or dropped; ``record`` what the cell's JSON
    keeps of it (``stop_reason``, ``rounds_stop``, ``race``); empty while it continues."""

    state: str
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def stops(self) -> bool:
        return self.state != CONTINUE


@dataclass(frozen=True)
class Stopping:
    """A cell's stopping rule: ``looks`` (when it may stop and the level its intervals pay for
    looking), ``race`` (its look against the shape's leader; None outside a race)."""

    looks: Looks
    race: RaceLook | None = None
    # a precision target: settled needs the interval's half-width (relative) within it too
    precision: float | None = None

    def after_round(self, own: list[float], ref: list[float] | None, closed: bool) -> Answer:
        """After the cell's latest timed round: its per-round figures so far (tok/s closed loop,
        p50 E2E latency open loop) and its interleaved baseline's (None: measured apart). A racing
        cell more than δ behind its shape's leader is dropped; one settled against its baseline
        stops, but not while its gap to the leader is still open (neither behind nor within δ)
        and looks remain: the race needs its rounds more than the verdict does."""
        looks = self.looks
        n = len(own)
        if n < looks.first:
            return Answer(CONTINUE)
        lead = self.race(own, ref, closed, looks) if self.race is not None else None
        gap = lead[0] if lead is not None else None
        if gap is not None and getattr(gap, "behind", False):
            text = (
                f"out of the race after {n} rounds: x{gap.point:.3f} [{gap.lo:.3f}, {gap.hi:.3f}] against "
                f"the shape's leader, more than δ = {pct(gap.delta)} behind (one-sided, at the race's level)"
            )
            assert lead is not None
            return Answer(DROPPED, {"stop_reason": DROPPED, "rounds_stop": text, "race": lead[1]})
        stop = sequential.check(n, looks, decided(own, ref, closed, looks, self.precision))
        if (
            gap is not None
            and getattr(gap, "starts_share", 0) > STARTS_SHARE
            and not (gap.behind or gap.within)
        ):
            text = (
                f"stopped after {n} rounds open against the shape's leader: the start-to-start "
                f"variance is {gap.starts_share:.0%} of its gap's, which more rounds do not narrow; "
                "another start of it would (starts: 2: the report reads its starts together)"
            )
            kept = self._kept(lead)
            kept.setdefault("race", {})["another_start"] = True
            return Answer(SETTLED, {"stop_reason": "starts", "rounds_stop": text, **kept})
        if (
            stop is None
            and n < looks.last
            and self.race is not None
            and not _leads_for_rivals(gap, lead)
            and _futile(own, ref, closed, looks, gap)
        ):
            text = (
                f"stopped after {n} rounds: at its rounds' spread so far, {looks.last} rounds would settle "
                "neither its verdict nor its standing against the shape's leader"
            )
            return Answer(SETTLED, {"stop_reason": "futile", "rounds_stop": text, **self._kept(lead)})
        if stop is None:
            return Answer(CONTINUE, self._kept(lead))
        if (
            gap is not None
            and n < looks.last
            and (
                getattr(gap, "status", "") == "open"
                or (gap.point >= 1 and not _known_to(own, ref, closed, looks, gap.delta / 2))
            )
        ):  # open against the leader, or leading and not yet known to ±δ/2: the race reads its rounds
            return Answer(CONTINUE, self._kept(lead))
        return Answer(stop.reason, {"stop_reason": stop.reason, "rounds_stop": stop.text, **self._kept(lead)})

    @staticmethod
    def _kept(lead: tuple[Any, dict[str, Any]] | None) -> dict[str, Any]:
        """What the JSON keeps of a kept racing cell's standing against its leader (within δ, or
        open), under ``race``."""
        if lead is None or lead[1].get("status") == "dropped":
            return {}
        return {"race": {**lead[1]}}

    def finish(
        self,
        own: list[float],
        ref: list[float] | None,
        closed: bool,
        last: Answer | None,
        max_rounds: int | None,
    ) -> dict[str, Any]:
        """What the cell's JSON records of how its rounds ended: the looks (when the count was
        chosen by looking: intervals pay for it), and the stop, or the cap, or a fixed count."""
        looks = self.looks
        out: dict[str, Any] = {}
        if not looks.one:
            out["sequential"] = looks.as_dict()
        if last is not None and not last.stops and last.record.get("race"):
            out["race"] = last.record["race"]  # its standing against the leader when its rounds ran out
        if last is not None and last.stops:
            out.update(last.record)
        elif looks.last > looks.first:
            cap = (
                f"max_rounds ({max_rounds}) reached"
                if max_rounds is not None and looks.last == max_rounds
                else f"cap of {looks.last} rounds reached"
            )
            out.update(
                stop_reason="cap", rounds_stop=f"{cap}, not decided: " + undecided(own, ref, closed, looks)
            )
        else:
            out["stop_reason"] = "fixed"
        return out


Rule = Stopping  # the name the race and the workloads used for it


def for_cell(cell: Cell) -> Stopping:
    """A cell outside a race: a look after every round from ``rounds`` to ``max_rounds`` (one look,
    ``rounds``, without max_rounds)."""
    w = cell.workload
    return Stopping(Looks(w.rounds, w.round_cap), precision=getattr(w, "precision", None))


def _projected(lo: float, hi: float, n: int, looks: Looks) -> float:
    """An interval's log half-width after n rounds projected to the cap: its t multiplier at the
    cap's look and sqrt(n / cap) of its standard error, the spread as it is now."""
    h = (math.log(hi) - math.log(lo)) / 2
    if n < 2:
        return h
    return OPTIMISM * h * looks.critical(looks.last) / looks.critical(n) * math.sqrt(n / looks.last)


def _resolvable(c: float, h: float, lo_edge: float, hi_edge: float) -> bool:
    """Whether an interval of log half-width ``h`` about ``c`` would lie beyond an edge (below
    ``lo_edge`` or above ``hi_edge``) or within both."""
    return c - h > hi_edge or c + h < lo_edge or (c - h >= lo_edge and c + h <= hi_edge)


def _futile(own: list[float], ref: list[float] | None, closed: bool, looks: Looks, gap: Any) -> bool:
    """A racing cell that its cap could not settle, at its point and spread so far (conditional
    power at the current trend): its verdict against its baseline (faster, slower, within ±2 %)
    and, where it has a leader, its gap (behind or within δ). Stopping for futility claims nothing,
    so the race's error is unchanged; the cell keeps its open interval."""
    iv = interval(own, ref, closed, looks)
    if ref is None or iv is None or iv.lo is None or iv.hi is None or iv.lo <= 0:
        return False
    e = math.log(1 + paired.EQUIVALENCE)
    if _resolvable(math.log(iv.point), _projected(iv.lo, iv.hi, len(own), looks), -e, e):
        return False
    if gap is None or getattr(gap, "lo", None) is None or gap.lo <= 0:
        return True
    if gap.behind or gap.within:
        return True
    edge = math.log(1 - gap.delta)
    h = _projected(gap.lo, gap.hi, len(own), looks)
    return not (math.log(gap.point) + h < edge or math.log(gap.point) - h >= edge)


def _leads_for_rivals(gap: Any, lead: tuple[Any, dict[str, Any]] | None) -> bool:
    """A shape's leader with rivals still to read its rounds: it runs on (no futility stop)."""
    return gap is not None and gap.point >= 1 and _rivals_to_come(lead)


def _rivals_to_come(lead: tuple[Any, dict[str, Any]] | None) -> bool:
    """Whether rivals that may still read a leader's rounds remain at its shape (the race's count;
    unknown: assumed so)."""
    return lead is None or lead[1].get("rivals_to_come", 1) > 0


def _can_know(own: list[float], ref: list[float] | None, closed: bool, looks: Looks, delta: float) -> bool:
    """Whether the cap could bring the cell's interval within ±δ at its spread so far."""
    iv = interval(own, ref, closed, looks)
    if iv is None or iv.lo is None or iv.hi is None or iv.lo <= 0 or ref is None:
        return True
    return _projected(iv.lo, iv.hi, len(own), looks) <= math.log(1 + delta)


def _known_to(own: list[float], ref: list[float] | None, closed: bool, looks: Looks, delta: float) -> bool:
    """Whether a cell's interval (against its baseline, or its own rounds') is within ±δ: the
    precision the race needs of a shape's leader, whose rounds every rival is compared with."""
    iv = interval(own, ref, closed, looks)
    if iv is None or iv.lo is None or iv.hi is None or iv.lo <= 0:
        return False
    return _half_width(iv, ref is not None) <= math.log(1 + delta)


def _half_width(iv: Any, ratio: bool) -> float:
    """An interval's half-width as a fraction: of a ratio's log (against a reference), else of its
    mean (a cell's own rounds)."""
    return (math.log(iv.hi) - math.log(iv.lo)) / 2 if ratio else (iv.hi - iv.lo) / 2 / iv.point


def interval(own: list[float], ref: list[float] | None, closed: bool, looks: Looks | None = None) -> Any:
    """What the cell's verdict rests on, so far: with a reference, the paired ratio (the cell's
    tok/s ÷ the baseline's, or the baseline's p50 ÷ the cell's); else the cell's own rounds'
    mean (its half of a comparison with a baseline measured apart)."""
    if ref is not None:
        num, den = (own, ref[: len(own)]) if closed else (ref[: len(own)], own)
        return paired.ratio_interval(num, den, looks)
    return paired.mean_interval(own, looks)


def decided(
    own: list[float],
    ref: list[float] | None,
    closed: bool,
    looks: Looks | None = None,
    precision: float | None = None,
) -> str | None:
    """What a cell's verdict is settled as after these rounds (None: not settled), its interval
    wide enough for every look of ``looks`` (stats/sequential.py). With a reference: the
    speedup's verdict (faster, slower or within the ±2 % margin; not "not separated"). Without:
    its rounds' interval is within ±2 % of their mean, so that its part in a comparison is inside
    the verdict's margin."""
    iv = interval(own, ref, closed, looks)
    if iv is None or iv.lo is None:
        return None
    if precision is not None:
        half = _half_width(iv, ref is not None)
        if not half <= math.log(1 + precision):
            return None
        if ref is not None:
            return f"{iv.verdict()} [{iv.lo:.3f}, {iv.hi:.3f}], within the precision target ±{precision:.1%}"
        return f"its rounds' interval ±{half:.1%} is within the precision target ±{precision:.1%}"
    if ref is not None:
        v = sequential.settled(iv)
        return None if v is None else f"{v} [{iv.lo:.3f}, {iv.hi:.3f}]"
    half = (iv.hi - iv.lo) / 2 / iv.point if iv.point else float("inf")
    if half <= paired.EQUIVALENCE:
        return (
            f"its rounds' interval ±{half:.1%} is within ±{paired.EQUIVALENCE:.0%} "
            "(its half of a comparison measured apart; the verdict is read after the run)"
        )
    return None


def undecided(own: list[float], ref: list[float] | None, closed: bool, looks: Looks | None = None) -> str:
    iv = interval(own, ref, closed, looks)
    if iv is None or iv.lo is None:
        return "no interval"
    if ref is not None:
        return f"x{iv.point:.3f} [{iv.lo:.3f}, {iv.hi:.3f}] not separated"
    return f"its rounds' interval ±{(iv.hi - iv.lo) / 2 / iv.point:.1%}"
