"""Tuning a swept method the way one tunes by hand (``tune: {at: {...}, keep: K}``, under
``--specbench-race``): its cells matching ``at`` run first; once they have, its settings are ranked
by their geometric-mean speedup over the baseline on those cells, and a setting separated from the
best by an interval is tuned out ("tuned out at SHAPE: best was X"); the rest run on the others.
The two-phase order costs an engine start for every kept setting whose engine group has cells in
both phases (``plan_lines`` says how many).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..matrix.cells import Cell, Matrix
from ..stats import paired, sequential
from .selection import pct


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
    complete one). Tuned out by the race's rule (deciding/selection.py): a setting dropped at a
    deciding cell (more than δ behind its leader there), or one whose upper bound against the best,
    over the deciding cells, is below 1 - δ (each of the K - 1 comparisons one-sided at
    5 % / (K - 1)). ``keep`` is honoured among the rest when every one of them is within δ of the
    best (lower bound at least 1 - δ): any K of them is a choice within δ, the best K by point are
    kept and ``within_delta`` names them all; a setting neither more than δ behind nor within δ is
    carried past ``keep`` (choosing on a point would be a bet), said in ``how``. With no interval
    to decide on (one round, cells measured apart from their baseline), every setting."""
    settings = [m.name for m in race.matrix.methods if m.sweep == sweep]
    cells = [c for c in race.matrix.cells() if c.method.sweep == sweep and deciding(c)]
    shapes = sorted({paired.axes(c.params()) for c in cells})
    scores: list[tuple[int, float, str]] = []
    for name in settings:
        logs = []
        for shape in shapes:
            r = race.standing(name, shape)
            if r:
                logs.append(math.log(r))
        scores.append((len(logs), math.exp(sum(logs) / len(logs)) if logs else 0.0, name))
    ranked = sorted(scores, key=lambda s: (-s[0], -s[1]))
    measured = [s for s in ranked if s[0]]
    out: dict[str, Any] = {
        "at": tune.label,
        "keep": tune.keep,
        "cells": sorted(c.id for c in cells),  # what it was decided on (report/pooled.py reuses none)
        "ranking": [{"method": n, "speedup_geomean": round(g, 6), "cells": k} for k, g, n in measured],
    }
    lost = {
        name: info
        for name in settings
        for c, info in getattr(race, "losses", {}).get(name, [])
        if deciding(c) and not info.get("skipped")
    }
    measured = [m for m in measured if m[2] not in lost or m is measured[0]]
    if not measured:
        out["kept"] = settings
        return out
    best = measured[0][2]
    family = max(1, len(measured) - 1)
    delta = getattr(race, "delta", paired.EQUIVALENCE)
    kept, separated, within = [best], {}, []
    for name, info in lost.items():  # out of the race at a deciding cell: more than δ behind its leader
        if name != best:
            separated[name] = [info.get(k) for k in ("ratio", "lo", "hi")]
    for _, _, name in measured[1:]:
        iv = against(race, shapes, name, best, family)
        if iv is None:  # no interval to tell it from the best: carried, never cut on a point
            kept.append(name)
            continue
        if iv[2] < 1 - delta:  # more than δ behind the best with the run's confidence: tuned out
            separated[name] = [round(x, 6) for x in iv]
        else:
            kept.append(name)
            if iv[1] >= 1 - delta:
                within.append(name)
    by_interval = bool(separated) or len(kept) > 1
    if not by_interval:  # no interval tells them apart: choosing by point would be a bet
        kept = [n for _, _, n in measured] + [
            n for _, _, n in ranked if n not in {m[2] for m in measured} and n not in lost
        ]
        out["how"] = (
            "no interval to decide on (cells measured apart from their baseline, or one round): all "
            "carried; a baseline beside each (sglang-server, hf) lets intervals decide"
        )
    else:
        out["how"] = (
            f"by interval: tuned out what is more than δ = {pct(delta)} behind {best} (each at 5 %/{family}, "
            "one-sided)"
        )
        if len(kept) > tune.keep and len(within) == len(kept) - 1:
            # every setting left is within δ of the best: any keep of them is a choice within δ
            out["within_delta"] = [best, *within]
            out["how"] += (
                f"; {', '.join(kept)} within δ of each other: the best {tune.keep} by point kept (keep: "
                f"{tune.keep})"
            )
            kept = kept[: tune.keep]
        elif len(kept) > tune.keep:  # a setting neither separated nor within δ: not a bet, carried
            if within:
                out["within_delta"] = [best, *within]
            out["how"] += (
                f"; {len(kept)} kept, more than keep: {tune.keep}: "
                f"{', '.join(n for n in kept[1:] if n not in within)} neither more than δ behind nor "
                "within δ, all carried (more rounds at the deciding cells would decide them)"
            )
    out["kept"] = kept
    if separated:
        out["separated"] = separated
    return out


def against(
    race: Any, shapes: list[tuple[Any, ...]], name: str, best: str, family: int
) -> tuple[float, float, float] | None:
    """``name`` over ``best`` across the deciding shapes: the mean of the per-shape log ratios of
    their speeds over the baseline beside each (independent samples: Welch), its interval at
    5 % / ``family``; None where a shape lacks an interval (one round, or one measured beside its
    baseline and the other not). Two settings both measured apart from their baseline (their
    own tok/s, in different engine groups) are compared on their own speeds, the interval
    widened by the drift between their groups (``race.apart_drift``: the run's brackets', or the
    given allowance) either way; None where no drift was measured between them."""
    parts, apart = [], False
    for shape in shapes:
        entries = {e.method: e for e in race.shapes.get(shape, [])}
        a, b = entries.get(name), entries.get(best)
        if a is None or b is None or a.relative != b.relative:
            return None
        apart = not a.relative
        la = [math.log(x) for x in a.speeds if x]
        lb = [math.log(x) for x in b.speeds if x]
        if len(la) < 2 or len(lb) < 2:
            return None
        va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
        parts.append((statistics.fmean(la) - statistics.fmean(lb), va + vb, min(len(la), len(lb)) - 1))
    if not parts:
        return None
    # one-sided at 5 % / family: the two-sided interval at twice that (tuning out claims one side)
    iv = paired.pooled_log_interval(parts, 2 * sequential.ALPHA / family)
    if iv is None or not apart:
        return iv
    groups = [race._cells[(shape, m)].group.id for m in (name, best) if (shape, m) in race._cells]
    allowed = race.apart_drift(*groups) if len(groups) == 2 else None
    if allowed is None:
        return None  # measured apart and no drift measured between the groups: carried
    d = allowed[0]
    return (iv[0], iv[1] * (1 - d), iv[2] / (1 - d))


def plan_lines(matrix: Matrix, cells: list[Cell], interleaving: frozenset[str] | None = None) -> list[str]:
    """The plan's lines for --specbench-race: what the rounds do, and per tuned sweep the cells
    it is decided on and the extra engine starts the two-phase order costs: an engine group with
    cells in both phases starts twice (the baselines' groups always, a sweep's only for the kept
    settings)."""
    out = [
        "racing (--specbench-race): cells stop at the first look where their verdict is settled; a "
        "loser skips a costlier shape only where no measured method gained enough toward it. The ETA "
        "above is the full factorial at `rounds` each, an upper bound but for undecided cells running "
        "to max_rounds"
    ]
    apart = sorted({c.method.backend for c in cells if c.method.backend not in (interleaving or frozenset())})
    if apart:
        out.append(
            f"  measured apart from their baseline ({', '.join(apart)}: no baseline beside a member): such "
            "cells are dropped only on an interval widened by their brackets or --specbench-race-drift; "
            "a tuned sweep decides on its settings' own speeds widened by the drift allowed between "
            "groups, every setting within it carried"
        )
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
        rest = len(mine) - decided_on
        kept = _kept_cells(mine, tune.keep)
        out.append(
            f"tune {sweep}: {len(settings)} settings decided on {decided_on} cells ({tune.label}) that run "
            f"first; the best {tune.keep} run the sweep's other {rest} cells' shapes: at most {kept} of "
            f"them, at least {rest - kept} skipped; two-phase order: {extra} extra engine starts ("
            + (f"{', '.join(others)}, and " if others else "")
            + f"{kept_both} for the kept settings among the {len(mine_both)} tuned groups with cells in both "
            "phases)"
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
