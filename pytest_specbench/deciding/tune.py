"""Tuning a swept method the way one tunes by hand (``tune: {at: {...}, keep: K}``, under
``--specbench-race``): its cells matching ``at`` run first; once they have, its settings are ranked
by their geometric-mean speedup over the baseline on those cells, and only the best K run on the
others ("tuned out at SHAPE: best was X" for the rest). The two-phase order costs an engine start
for every kept setting whose engine group has cells in both phases (``plan_lines`` says how many).
"""

from __future__ import annotations

import math
from typing import Any

from ..matrix.cells import Cell, Matrix
from ..report import paired


def deciding(cell: Cell) -> bool:
    """A cell its sweep is decided on (its method's ``tune.at`` matches it)."""
    tune = getattr(cell.method, "tune", None)
    return tune is not None and tune.matches(cell.params())


def first_phase(cells: list[Cell], matrix: Matrix) -> set[str]:
    """Ids of the cells that run first: tuned sweeps' deciding cells, and the baselines' cells
    at their shapes (a speedup measured apart needs its baseline)."""
    first = {c.id for c in cells if deciding(c)}
    baselines = matrix.baselines()
    shapes = {(paired.axes(c.params()), baselines.get(c.method.name)) for c in cells if c.id in first}
    first |= {c.id for c in cells if (paired.axes(c.params()), c.method.name) in shapes}
    return first


def decision(race: Any, sweep: str, tune: Any) -> dict[str, Any]:
    """The sweep's settings ranked by their geometric-mean speedup over the deciding cells
    measured (a setting missing at one of them, failed or out of the race, ranks after every
    complete one); the best ``keep`` are kept."""
    settings = [m.name for m in race.matrix.methods if m.sweep == sweep]
    cells = [c for c in race.matrix.cells() if c.method.sweep == sweep and deciding(c)]
    shapes = sorted({paired.axes(c.params()) for c in cells})
    scores: list[tuple[int, float, str]] = []
    for name in settings:
        logs = []
        for shape in shapes:
            r = _relative(race, shape, name)
            if r:
                logs.append(math.log(r))
        scores.append((len(logs), math.exp(sum(logs) / len(logs)) if logs else 0.0, name))
    ranked = sorted(scores, key=lambda s: (-s[0], -s[1]))
    measured = [s for s in ranked if s[0]]
    return {
        "at": tune.label,
        "keep": tune.keep,
        "ranking": [{"method": n, "speedup_geomean": round(g, 6), "cells": k} for k, g, n in measured],
        "kept": [n for _, _, n in ranked[: tune.keep]] if measured else settings,
    }


def _relative(race: Any, shape: tuple[Any, ...], name: str) -> float | None:
    """A method's point speedup at a shape from the race's entries: over its interleaved
    baseline, or its tok/s over the baseline cell's."""
    entries = {e.method: e for e in race.shapes.get(shape, [])}
    e = entries.get(name)
    if e is None or not e.point:
        return None
    if e.relative:
        return e.point
    base = entries.get(race.baselines.get(name) or "")
    return e.point / base.point if base is not None and base.point else None


def plan_lines(matrix: Matrix, cells: list[Cell]) -> list[str]:
    """The plan's lines for --specbench-race: what the rounds do, and per tuned sweep the cells
    it is decided on and the extra engine starts the two-phase order costs: an engine group with
    cells in both phases starts twice (the baselines' groups always, a sweep's only for the kept
    settings)."""
    out = [
        "racing (--specbench-race): cells stop at the first look (rounds 3..cap) where their verdict is "
        "settled; losers skip their costlier shapes. The ETA above is the full factorial at `rounds` "
        "each, an upper bound but for undecided cells running to max_rounds"
    ]
    first = first_phase(cells, matrix)
    phases: dict[str, set[bool]] = {}
    for c in cells:
        phases.setdefault(c.group.id, set()).add(c.id in first)
    both = {g for g, p in phases.items() if len(p) == 2}
    sweeps = {c.method.sweep: c.method.tune for c in cells if getattr(c.method, "tune", None) is not None}
    swept_groups = {c.group.id for c in cells if c.method.sweep in sweeps}
    others = sorted(both - swept_groups)
    for sweep, tune in sweeps.items():
        mine = [c for c in cells if c.method.sweep == sweep]
        settings = sorted({c.method.name for c in mine})
        mine_both = {c.group.id for c in mine} & both
        kept_both = min(len(mine_both), tune.keep * len({c.tp for c in mine if c.group.id in mine_both}))
        decided_on = sum(1 for c in mine if deciding(c))
        extra = kept_both + len(others)
        out.append(
            f"tune {sweep}: {len(settings)} settings decided on {decided_on} cells ({tune.label}) that run "
            f"first; the best {tune.keep} run the other {len(mine) - decided_on} cells' shapes "
            f"({len(mine) - decided_on - _kept_cells(mine, tune.keep)} or more cells skipped); two-phase "
            f"order: {extra} extra engine starts ("
            + (f"{', '.join(others)}, and " if others else "")
            + f"the kept settings' of {len(mine_both)} groups with cells in both phases)"
        )
        others = []  # counted once
    return out


def _kept_cells(cells: list[Cell], keep: int) -> int:
    """Cells outside the deciding ones that the kept settings run (at most)."""
    per: dict[str, int] = {}
    for c in cells:
        if not deciding(c):
            per[c.method.name] = per.get(c.method.name, 0) + 1
    return sum(sorted(per.values(), reverse=True)[:keep])
