"""Brackets' pure parts: the level a bracketed member ran at, between its two brackets, and a
measured ratio's interval widened by it (report/brackets.py applies them over a results JSON;
docs/metrics.md "Brackets"). Pure: no pytest, no I/O."""

from __future__ import annotations

Range = tuple[float, float]


def drift_range(before: float | None, after: float) -> Range:
    """The level a member ran at, relative to its baseline's cells: between its brackets'
    (``before`` None: the baseline's own cell, 1.0)."""
    b = 1.0 if before is None else before
    return (min(b, after), max(b, after))


def widen(lo: float, hi: float, own: Range, lead: Range = (1.0, 1.0)) -> tuple[float, float]:
    """A measured ratio's interval [lo, hi] (member over ``lead``) widened by the levels the
    member (``own``) and the leader (``lead``; the baseline's own cell: 1.0) may have run at."""
    return lo * lead[0] / own[1], hi * lead[1] / own[0]
