"""What the raced plan predicts of the race and of tuning, from the plan's own round times: which
cells settle at their first look, which TP sizes a smaller one dominates, which settings of a tuned
sweep its decision carries. The plugin's plan (plugin/plan_race.py) reads these; they apply the
race's own rules (race.py, tune.py) to planned figures. Pure: no pytest; ``plan`` is
planning/plan.py's."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ..matrix.cells import Cell
from ..stats import paired
from . import raced_plan
from .race import TP_DRIFT, costlier, same_but_tp

SETTLES = 1.10  # a member planned this far from its baseline (either way) is expected to settle at once


def settles(plan: Any, baselines: Mapping[str, str], cells: list[Cell]) -> Callable[[Cell], bool]:
    """The expected early stop: the baseline's own cells, and a cell whose planned round is at
    least ``SETTLES`` times faster or slower than its baseline's at the same shape."""
    base = baselines
    at = {(paired.axes(c.params()), c.method.name): c for c in cells}

    def round_s(c: Cell | None) -> float | None:
        cp = plan.cells.get(c.id) if c is not None else None
        return getattr(cp, "round_s", None) if cp is not None else None

    def settles(c: Cell) -> bool:
        b = base.get(c.method.name)
        if b is None or b == c.method.name:
            return b is not None
        mine, theirs = round_s(c), round_s(at.get((paired.axes(c.params()), b)))
        if not mine or not theirs:
            return False
        return max(mine / theirs, theirs / mine) >= SETTLES

    return settles


def tp_standing(
    plan: Any, baselines: Mapping[str, str], cells: list[Cell]
) -> tuple[Callable[[Cell], bool], list[float]]:
    """The expected skip of a dominated TP size (deciding/race.py ``tp_dominated``, on the plan's
    round times): a cell is skipped when at a cheaper shape its method's planned speed per user at
    its TP size is below a smaller TP size's by more than the rule's margin and drift allowance;
    and every planned per-user ratio (larger TP over the next smaller one, same method and shape)."""

    def round_s(c: Cell) -> float | None:
        cp = plan.cells.get(c.id)
        return getattr(cp, "round_s", None) if cp is not None else None

    by_shape: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        p = {k: v for k, v in c.params().items() if k != "tp"}
        by_shape.setdefault(tuple(sorted(p.items(), key=str)), []).append(c)
    ratios: dict[str, float] = {}  # cell id -> its per-user speed over the next smaller TP's
    for same in by_shape.values():
        ranked = sorted(same, key=lambda c: c.tp)
        for small, big in zip(ranked, ranked[1:], strict=False):
            a, b = round_s(small), round_s(big)
            if a and b and same_but_tp(small, big):
                ratios[big.id] = a / b
    limit = (1 - paired.EQUIVALENCE) * (1 - TP_DRIFT)
    base = baselines
    losers = [c for c in cells if ratios.get(c.id, 1.0) < limit and base.get(c.method.name) != c.method.name]

    def skips(c: Cell) -> bool:
        return any(costlier(c, lo) for lo in losers)

    return skips, sorted(ratios.values())


def carried(plan: Any, cells: list[Cell], apart_groups: set[str]) -> Callable[[raced_plan.Tune], set[str]]:
    """A tuned sweep's settings its decision is not expected to separate (deciding/tune.py): on
    the plan's own round times at the deciding cells, each setting within the margin (and, where
    its deciding cells are measured apart from their baseline, the drift allowed between groups)
    of the planned fastest; at least ``keep``, the next fastest added. None predicted (the K of
    median cost) where a setting's accept length is the plan's upper bound (nothing expected)."""

    def carry(t: raced_plan.Tune) -> set[str]:
        speed: dict[str, list[float]] = {}
        apart = False
        mine = [c for c in cells if (c.method.sweep or c.method.name) == t.method]
        if any(getattr(plan.groups.get(c.group.id), "accept_from", "") == "upper bound" for c in mine):
            return set()  # times at an accept length of 1 tell nothing of which setting wins
        for c in mine:
            if t.deciding(c):
                cp = plan.cells.get(c.id)
                r = getattr(cp, "round_s", None) if cp is not None else None
                if r:
                    speed.setdefault(c.method.name, []).append(1.0 / r)
                apart = apart or c.group.id in apart_groups
        if not speed:
            return set()
        score = {n: math.exp(sum(map(math.log, v)) / len(v)) for n, v in speed.items()}
        ranked = sorted(score, key=lambda n: (-score[n], n))
        floor = score[ranked[0]] * (1 - paired.EQUIVALENCE) * ((1 - TP_DRIFT) if apart else 1.0)
        return {n for n in ranked if score[n] >= floor} | set(ranked[: t.keep])

    return carry
