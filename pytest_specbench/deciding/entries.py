"""What the race knows of a cell and says of it (deciding/race.py decides with these): its shape
and whether a sibling shape is costlier, its per-round speeds against the baseline beside it or
its own, a measured cell's entry at its shape, a member's interval against the leader from their
intervals against their baselines, and the text of a cell out of the race. No pytest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..matrix.cells import Cell
from ..stats import paired
from ..stats.sequential import Looks

MIN_ROUNDS = 3  # a racing cell's first look, where its cap leaves at least 3 looks


def first_look(cap: int) -> int:
    """A racing cell's first look: 3, or earlier (never before 2 rounds, the first interval) so
    that a cap of 3 or 4 rounds still leaves looks to stop at (3 looks from a cap of 4)."""
    return max(2, min(MIN_ROUNDS, cap - 2))


COSTLIER = ("concurrency", "context_tokens", "output_tokens")  # larger: a costlier sibling shape


def shape_label(cell: Cell) -> str:
    """A cell's id without its method: the shape (``tp1-c4-out32``)."""
    name = cell.method.name
    i = cell.id.find(f"{name}-")
    return cell.id[i + len(name) + 1 :] if i >= 0 else cell.id


def forced(cell: Cell) -> bool:
    spec = cell.method.speculative
    return spec is not None and spec.simulate_accept_length is not None


def costlier(cell: Cell, than: Cell) -> bool:
    """Same method, workload, TP and other axes, and at least as large a concurrency, context and
    output as ``than``, one of them larger."""
    p, q = cell.params(), than.params()
    if p["method"] != q["method"] or p["workload"] != q["workload"]:
        return False
    for k in set(p) | set(q):
        if k not in COSTLIER and p.get(k) != q.get(k):
            return False
    bigger = [(p.get(k) or 0) - (q.get(k) or 0) for k in COSTLIER]
    return all(d >= 0 for d in bigger) and any(d > 0 for d in bigger)


TP_DRIFT = paired.TP_DRIFT


def same_but_tp(a: Cell, b: Cell) -> bool:
    """The same method, workload and every axis but the TP size."""
    p, q = a.params(), b.params()
    return all(p.get(k) == q.get(k) for k in set(p) | set(q) if k != "tp")


def tp_text(info: dict[str, Any]) -> str:
    return (
        f"out of the race: its TP size is dominated: at shape {info['shape']} it ran x{info['ratio']:.3f} "
        f"[{info['lo']:.3f}, {info['hi']:.3f}] per user of {info['tp_dominated_by']} (drift of "
        f"±{info['drift_allowed']:.1%} between groups {info.get('drift_from', 'allowed')}), "
        f"x{info['per_gpu']:.3f} per GPU"
    )


def out_text(cell_id: str, info: dict[str, Any]) -> str:
    if "tp_dominated_by" in info:
        return tp_text(info)
    return (
        f"out of the race: lost to {info['lost_to']} by x{info['ratio']:.3f} "
        f"[{info['lo']:.3f}, {info['hi']:.3f}] at shape {info['shape']}"
        + (
            f" (more than δ = {info['delta']:.1%} behind; bounds one-sided at the race's level)".replace(
                ".0%", "%"
            )
            if info.get("delta") is not None
            else ""
        )
        + (
            f" (drift of ±{info['drift_allowed']:.0%} between groups allowed)"
            if info.get("drift_allowed")
            else ""
        )
        + (
            f"; no method measured gained more than x{info['largest_gain']:.3f} on its baseline "
            "toward this shape"
            if info.get("largest_gain")
            else ""
        )
    )


@dataclass
class Entry:
    """A measured cell at its shape: its per-round speed (relative to its interleaved baseline
    when ``relative``, else its own rounds' tok/s or 1 / p50 latency)."""

    cell_id: str
    method: str
    speeds: list[float | None]
    relative: bool
    looks: Looks | None
    can_lead: bool
    rates: list[float] | None = None  # its own tok/s per round (closed loop), for the TP rule

    @property
    def point(self) -> float:
        logs = [math.log(s) for s in self.speeds if s]
        return math.exp(sum(logs) / len(logs)) if logs else 0.0


def speeds_of(own: list[float], ref: list[float] | None, closed: bool) -> list[float | None]:
    """Per round: the cell's speed over its interleaved baseline's round (tok/s ratio, or the
    baseline's p50 over the cell's), or without one its own tok/s (1 / p50 in an open loop)."""
    if ref is not None:
        return [(a / b if closed else b / a) if a and b else None for a, b in zip(own, ref, strict=False)]
    return [(a if closed else 1 / a) if a else None for a in own]


def _own_rates(result: dict[str, Any]) -> list[float] | None:
    """A closed-loop cell's own tok/s per timed round (None in an open loop or without rounds)."""
    if result["params"].get("request_rate") or not result.get("metrics"):
        return None
    rates = paired.round_rates(result["metrics"], result.get("round_times") or [])
    return [float(x) for x in rates if x] or None


def _result_speeds(result: dict[str, Any]) -> tuple[list[float | None], bool]:
    m = result["metrics"]
    closed = not result["params"].get("request_rate")
    own = paired.round_rates(m, result.get("round_times") or []) if closed else paired.round_p50s(m)
    ref = m.get("reference")
    if ref:
        theirs = ref.get("round_tokens_per_s") if closed else ref.get("round_latency_s_p50")
        return speeds_of(own, [x or 0.0 for x in theirs or []], closed), True
    return speeds_of(own, None, closed), False


def _apart(own: Any, lead: Any) -> Any:
    """A member against the leader from their intervals against the baseline beside each: the
    ratio of the points, and the interval from their far ends (lo: own lo / lead hi; hi: own hi /
    lead lo). Wholly below 0.98 only when the two intervals do not overlap (beyond the margin):
    with every member's interval covering at 5 % / m, no drop of the shape is false in 95 % of
    runs, whichever member leads (the leader is picked from the data)."""
    if own is None or lead is None or None in (own.lo, own.hi, lead.lo, lead.hi) or not lead.lo:
        return None
    return paired.Interval(own.point / lead.point, own.lo / lead.hi, own.hi / lead.lo, min(own.n, lead.n))
