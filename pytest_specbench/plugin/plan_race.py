"""The plan's racing lines (``--specbench-plan``): the makespan of the selected cells as a full
factorial, and as a run with the matrix's ``tune`` keys and ``--specbench-race`` would make it,
expected and at worst (deciding/raced_plan.py), each packed on the GPU pool by as many workers as the
run has (-n; a raced run under -n races on every GPU set at once, its decisions shared)."""

from __future__ import annotations

from typing import Any

import pytest

from ..deciding import raced_plan
from ..engines import get_backend
from ..matrix.cells import Cell
from ..planning import schedule
from .state import SpecbenchState


def _workers(config: pytest.Config, st: SpecbenchState) -> int:
    """The workers a raced run is planned with: -n (without it, one process)."""
    from .xdist_sched import workers

    return max(1, getattr(st, "plan_workers", None) or workers(config))


def _pack(st: SpecbenchState, cells: list[Cell], secs: dict[str, float], n: int = 1) -> tuple[float, int]:
    """(makespan, engine starts) of ``cells`` at ``secs`` by ``n`` workers on the run's GPU pool
    (serially where the pool is unknown), their groups handed out as the schedule orders them."""
    from .xdist_sched import planned_seconds

    plan = st.get_plan()
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        if c.id in secs:
            by_group.setdefault(c.group.id, []).append(c)
    jobs = []
    for run in by_group.values():
        g = run[0].group
        p = planned_seconds(plan, g, [])
        gpus = g.tp if get_backend(g.method.backend).gpu else 0
        dur = p.start_s + sum(secs[c.id] for c in run)
        jobs.append(schedule.Job(g.id, gpus, dur, g.tp, g.method.backend, p.first_start_extra_s))
    if not jobs:
        return 0.0, 0
    sched = schedule.pack(jobs, st.gpus or tuple(range(max(j.gpus for j in jobs))), n)
    return (sched.makespan_s if st.gpus else sched.serial_s), len(jobs)


def race_plan(
    config: pytest.Config, st: SpecbenchState, cells: list[Cell]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The racing section of the plan (JSON, lines); nothing without ``tune`` keys or the option."""
    from .xdist_sched import skip_reason

    assert st.matrix is not None
    tuned = raced_plan.tunes(st.matrix)
    race = bool(config.getoption("specbench_race", False))
    if not tuned and not race:
        return None, []
    from .sentinel import interleaving

    beside = interleaving(config)
    apart = sorted(
        n for n in tuned if any(m.sweep == n and m.backend not in beside for m in st.matrix.methods)
    )
    tuned = {n: t for n, t in tuned.items() if n not in apart}  # measured apart: every setting carried
    plan = st.get_plan()
    runnable = [c for c in cells if not skip_reason(config, st, c)]

    def eta(c: Cell) -> float:
        cp = plan.cells.get(c.id)
        return float(cp.eta_s or 0.0) if cp is not None else 0.0

    doc: dict[str, Any] = {
        "race": race,
        "tune": {n: {"at": dict(t.tune.at), "keep": t.keep} for n, t in tuned.items()},
    }
    lines = []

    def said(t: raced_plan.Tune) -> str:
        return f"{t.method}: decided on cells with {t.tune.label}, best {t.keep} carried"

    how = "; ".join(
        [said(t) for t in tuned.values()] + [f"{n}: measured apart, every setting carried" for n in apart]
    )
    n = _workers(config, st)
    where = (
        f"packed on the GPU pool ({len(st.gpus)} GPUs) by {n} worker(s), every GPU set racing at once "
        "on one shared decision state"
        if st.gpus
        else "one process, its groups one after another"
    )
    lines.append(f"racing/tuning ({how or 'no tune keys: racing drops are not predicted'}), {where}:")
    full_s = None
    for v in raced_plan.variants(runnable, eta, tuned):
        first = [c for c in runnable if c.id in v.phase1]
        later = [c for c in runnable if c.id in v.cells and c.id not in v.phase1]
        m1, n1 = _pack(st, first, v.cells, n)
        m2, n2 = _pack(st, later, v.cells, n)
        total = m1 + m2
        full_s = total if full_s is None else full_s
        again = ", ".join(v.extra_starts)
        extra = (
            f"; {len(v.extra_starts)} extra engine start(s) for the two-phase order ({again})"
            if again
            else ""
        )
        phases = f" ({m1 / 60:.1f} min deciding and untuned, then {m2 / 60:.1f} carried)" if later else ""
        ratio = f", {total / full_s:.2f}x the full factorial" if v.name != "full factorial" and full_s else ""
        counts = f"{len(v.cells)} cells, {n1 + n2} engine starts"
        lines.append(f"  {v.name}: {total / 60:.1f} min{phases}, {counts}{ratio}{extra}")
        doc[v.name.replace(" ", "_")] = {
            "makespan_s": total,
            "cells": len(v.cells),
            "engine_starts": n1 + n2,
            "extra_starts": list(v.extra_starts),
        }
    if race or tuned:
        lines.append(
            "  (expected: the tuned sweeps' deciding cells in full, K settings of median cost elsewhere; "
            "worst case: the K most expensive, every cell to its max_rounds; the carried settings start "
            "after the first phase, a conservative order)"
        )
    return doc, lines
