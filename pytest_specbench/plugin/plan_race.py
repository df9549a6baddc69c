"""The plan's racing lines (``--specbench-plan``): the makespan of the selected cells as a full
factorial, and as a run with the matrix's ``tune`` keys and ``--specbench-race`` would make it,
expected and at worst (deciding/raced_plan.py), each packed on the GPU pool by as many workers as the
run has (-n; a raced run under -n races on every GPU set at once, its decisions shared)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ..deciding import predict, raced_plan
from ..engines import get_backend
from ..matrix.cells import Cell
from ..planning import schedule
from .state import SpecbenchState


def _workers(config: pytest.Config, st: SpecbenchState) -> int:
    """The workers a raced run is planned with: -n (without it, one process)."""
    from .xdist_sched import workers

    return max(1, getattr(st, "plan_workers", None) or workers(config))


@dataclasses.dataclass
class _Jobs:
    jobs: list[schedule.Job]
    parts: dict[str, list[tuple[str, float]]]  # a family's job -> its groups and brackets, in order
    restarts: dict[str, int]  # the baselines' restarts for brackets and sentinels (FamilyJobs.restarts)
    # what the bound reads (packed_schedule.bound_lines): GPU-seconds of the cells, of the groups'
    # engine starts and of the brackets and sentinels, and each group's seconds
    cells_gpu_s: float = 0.0
    starts_gpu_s: float = 0.0
    drift_gpu_s: float = 0.0
    groups_s: dict[str, float] = dataclasses.field(default_factory=dict)


def _jobs(
    config: pytest.Config,
    st: SpecbenchState,
    cells: list[Cell],
    secs: dict[str, float],
    carried: bool,
    spread_by: list[Cell] | None = None,
) -> _Jobs:
    """One job per engine group of ``cells`` at ``secs``, a drift family's groups (and its
    sentinel or brackets) as one job as the run's scopes have them (deciding/families.py; a
    family spread over GPU sets as ``spread_by``'s cells, the run's, split it); a carried scope's
    id ends "(carried)"."""
    from ..deciding.families import merge_jobs
    from .planned import machine_warm_s, planned_seconds
    from .sentinel import families_of
    from .xdist_policy import CARRIED

    plan = st.get_plan()
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        if c.id in secs:
            by_group.setdefault(c.group.id, []).append(c)
    jobs = []
    cells_gpu_s = starts_gpu_s = 0.0
    groups_s: dict[str, float] = {}
    for run in by_group.values():
        g = run[0].group
        p = planned_seconds(plan, g, [])
        gpus = g.tp if get_backend(g.method.backend).gpu else 0
        dur = p.start_s + sum(secs[c.id] for c in run)
        warm = machine_warm_s(plan, run)
        jobs.append(schedule.Job(g.id, gpus, dur, g.tp, g.method.backend, p.first_start_extra_s, warm_s=warm))
        cells_gpu_s += (dur - p.start_s) * gpus
        starts_gpu_s += p.start_s * gpus
        groups_s[g.id] = dur
    fams = families_of(config, st, [c for c in cells if c.id in secs], spread_by)
    fj = merge_jobs(fams, jobs, plan, planned_seconds)
    tuned = {c.group.id for c in cells if getattr(c.method, "tune", None) is not None}
    out = []
    named: dict[str, list[tuple[str, float]]] = {}
    for j in fj.jobs:  # a carried scope's tuned settings wait for the decision: a family's tail
        parts = fj.parts.get(j.group) or [(j.group, j.duration_s)]
        k = next((i for i, (g, _) in enumerate(parts) if g in tuned), None)
        name = f"{j.group} {CARRIED}" if carried else j.group
        if j.group in fj.parts:
            named[name] = parts
        if not carried:
            out.append(j)
            continue
        tail = sum(d for _, d in parts[k:]) if k is not None and len(parts) > 1 else 0.0
        out.append(
            dataclasses.replace(j, group=name, not_before_s=-1.0 if k is not None else 0.0, tail_s=tail)
        )
    return _Jobs(out, named, fj.restarts(), cells_gpu_s, starts_gpu_s, fj.gpu_s(), groups_s)


@dataclasses.dataclass
class _Packed:
    makespan_s: float
    done_s: float  # when the first phase is done
    starts: int  # the groups' engine starts
    restarts: dict[str, int]  # the baselines' restarts for brackets and sentinels
    sched: schedule.Schedule | None  # each family's groups and brackets as slots of their own
    # what its bound reads (packed_schedule.bound_lines): cells', starts' and brackets'
    # GPU-seconds, each group's seconds
    bound: tuple[float, float, float, dict[str, float]] = (0.0, 0.0, 0.0, {})


def _pack(
    config: pytest.Config,
    st: SpecbenchState,
    first: list[Cell],
    later: list[Cell],
    secs: dict[str, float],
    n: int = 1,
    spread_by: list[Cell] | None = None,
) -> _Packed:
    """The makespan, when the first phase is done, engine starts and schedule of the cells at
    ``secs`` by ``n``
    workers on the run's GPU pool (serially where the pool is unknown), in the run's order: the
    first phase's groups (a tuned sweep's deciding cells and their baselines') longest first, then
    every other group's scope longest first, those needing a hooked GPU last (as
    xdist_policy.make_scheduler hands them out); a tuned setting's carried scope waits until the
    first phase is done (its worker idle, no GPUs held), a drift family's only at its tuned
    members (its GPUs held: the family's other groups ran)."""
    from ..deciding.families import FamilyJobs
    from .gpu_pool import reserved_gpus

    j1 = _jobs(config, st, first, secs, False, spread_by)
    j2 = _jobs(config, st, later, secs, bool(first), spread_by)
    one, two = j1.jobs, j2.jobs
    restarts = {k: j1.restarts.get(k, 0) + j2.restarts.get(k, 0) for k in {**j1.restarts, **j2.restarts}}
    if not one + two:
        return _Packed(0.0, 0.0, 0, restarts, None)
    pool = tuple(st.gpus or range(max(j.gpus for j in one + two)))
    reserved = reserved_gpus(st)
    # the groups that need a hooked GPU last, in one window, as the run hands them out
    jobs = schedule.hooked_last(schedule.longest_first(one) + schedule.longest_first(two), pool, reserved)
    # pass 1: when the first phase is done; pass 2: the carried scopes that wait start no earlier
    free = [dataclasses.replace(j, not_before_s=0.0) for j in jobs]
    sched = schedule.pack(free, pool, n if st.gpus else 1, reserved)
    names = {j.group for j in one}
    done = max((s.end_s for s in sched.slots if s.group in names), default=0.0)
    waits = [dataclasses.replace(j, not_before_s=done if j.not_before_s < 0 else 0.0) for j in jobs]
    sched = schedule.pack(waits, pool, n if st.gpus else 1, reserved)
    done = max((s.end_s for s in sched.slots if s.group in names), default=0.0)
    starts = len({c.group.id for c in first}) + len({c.group.id for c in later})
    makespan = sched.makespan_s
    sched = FamilyJobs([], [], {**j1.parts, **j2.parts}, {}).expand(sched)
    # a group with cells in both phases starts twice: two chains
    both = {**j1.groups_s, **{g: max(s, j1.groups_s.get(g, 0.0)) for g, s in j2.groups_s.items()}}
    gpu_s = (
        j1.cells_gpu_s + j2.cells_gpu_s,
        j1.starts_gpu_s + j2.starts_gpu_s,
        j1.drift_gpu_s + j2.drift_gpu_s,
    )
    return _Packed(makespan, done, starts, restarts, sched, (*gpu_s, both))


def _by_tp(sched: schedule.Schedule) -> str:
    """Per TP size of the schedule's GPU groups: the GPUs its starts held and from when to when
    ("TP1 on GPU 1 0:00 -> 1:06:30")."""
    spans: dict[int, list[Any]] = {}
    for s in sched.slots:
        if s.gpus:
            spans.setdefault(s.gpus_needed, []).append(s)
    out = []
    for tp in sorted(spans):
        mine = spans[tp]
        gpus = sorted({g for s in mine for g in s.gpus})
        first, last = min(s.start_s for s in mine), max(s.end_s for s in mine)
        out.append(
            f"TP{tp} on GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))} "
            f"{schedule.clock(first)} -> {schedule.clock(last)} ({(last - first) / 60:.1f} min)"
        )
    return "; ".join(out)


def _where(cells: list[Cell], secs: dict[str, float]) -> dict[str, dict[str, float]]:
    """GPU-minutes (a cell's planned minutes x its TP size) by workload and TP, and by method
    (a sweep's settings together), engine starts apart."""
    out: dict[str, dict[str, float]] = {}
    for c in cells:
        if c.id in secs:
            gm = secs[c.id] / 60 * c.tp
            for k in (c.workload.name, f"method {c.method.sweep or c.method.name}"):
                row = out.setdefault(k, {})
                row[f"tp{c.tp}"] = row.get(f"tp{c.tp}", 0.0) + gm
    return out


def _where_lines(where: dict[str, dict[str, float]]) -> list[str]:
    def row(k: str) -> str:
        parts = where[k]
        tps = sorted(parts, key=lambda t: int(t[2:]))
        return f"    {k}: {sum(parts.values()):,.0f} (" + ", ".join(f"{t} {parts[t]:,.0f}" for t in tps) + ")"

    wl = [k for k in where if not k.startswith("method ")]
    return (
        ["  where the expected time goes, GPU-minutes of cells (minutes x TP size; engine starts apart):"]
        + [row(k) for k in sorted(wl, key=lambda k: -sum(where[k].values()))]
        + [row(k) for k in sorted(set(where) - set(wl), key=lambda k: -sum(where[k].values()))]
    )


def race_plan(
    config: pytest.Config, st: SpecbenchState, cells: list[Cell]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The racing section of the plan (JSON, lines); nothing without ``tune`` keys or the option."""
    from .skip_reasons import skip_reason

    assert st.matrix is not None
    tuned = raced_plan.tunes(st.matrix)
    race = bool(config.getoption("specbench_race", False))
    if not tuned and not race:
        return None, []
    from .sentinel import interleaving

    beside = interleaving(config)
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

    apart_groups = {c.group.id for c in runnable if c.method.backend not in beside} | set(
        getattr(st, "bracketed_groups", lambda: ())()
    )
    carried = predict.carried(st.get_plan(), runnable, apart_groups)

    def said(t: raced_plan.Tune) -> str:
        sure = carried(t)
        more = (
            f" (expected: {', '.join(sorted(sure))}: the plan's own times put them within what the "
            "decision can separate)"
            if len(sure) > t.keep
            else ""
        )
        return f"{t.method}: decided on cells with {t.tune.label}, best {t.keep} carried{more}"

    how = "; ".join(said(t) for t in tuned.values())
    n = _workers(config, st)
    where = (
        f"packed on the GPU pool ({len(st.gpus)} GPUs) by {n} worker(s), every GPU set racing at once "
        "on one shared decision state"
        if st.gpus
        else "one process, its groups one after another"
    )
    lines.append(f"racing/tuning ({how or 'no tune keys: racing drops are not predicted'}), {where}:")
    full_s = None
    from ..deciding.tune import first_phase

    first_ids = first_phase(runnable, st.matrix) if tuned else set()
    base = st.matrix.baselines() if st.matrix is not None else {}
    settles = predict.settles(st.get_plan(), base, runnable) if race else None
    skips, ratios = predict.tp_standing(st.get_plan(), base, runnable) if race else (None, [])
    worst_s = 0.0
    expected: _Packed | None = None
    from ..planning.text import restarts_text

    for v in raced_plan.variants(runnable, eta, tuned, settles, skips, carried):
        phased = v.name != "full factorial"  # the full factorial: a run without the race's order
        first = [c for c in runnable if c.id in v.cells and c.id in first_ids and phased]
        later = [c for c in runnable if c.id in v.cells and c.id not in first_ids or not phased]
        packed = _pack(config, st, first, later, v.cells, n, runnable)
        total, done, starts = packed.makespan_s, packed.done_s, packed.starts
        if v.name == "expected":
            expected = packed
        if v.name == "worst case":  # at least the expected (its other settings may pack better)
            total = max(total, worst_s)
        if v.name == "expected":
            worst_s = total
        full_s = total if full_s is None else full_s
        again = sorted({c.group.id for c in first} & {c.group.id for c in later})
        extra = f"; {len(again)} extra engine start(s) for the two-phase order ({', '.join(again)})"
        extra = extra if again else ""
        phases = f" (the deciding cells done by {done / 60:.1f} min)" if first and later else ""
        ratio = f", {total / full_s:.2f}x the full factorial" if v.name != "full factorial" and full_s else ""
        counts = f"{len(v.cells)} cells, {starts} engine starts{restarts_text(packed.restarts)}"
        lines.append(f"  {v.name}: {total / 60:.1f} min{phases}, {counts}{ratio}{extra}")
        if st.gpus and packed.sched is not None:  # its GPU-minute bound, where its time goes
            from .packed_schedule import bound_lines

            lines += ["  " + x for x in bound_lines(packed.sched, *packed.bound, makespan_s=total)]
        doc[v.name.replace(" ", "_")] = {
            "makespan_s": total,
            "cells": len(v.cells),
            "engine_starts": starts,
            "baseline_restarts": packed.restarts,
            "extra_starts": again,
            "gpu_min": _where(runnable, v.cells),
            **({"bound": packed.sched.bound} if packed.sched is not None and packed.sched.bound else {}),
        }
    if race or tuned:
        lines.append(
            "  (expected: the tuned sweeps' deciding cells in full, elsewhere the settings the plan's times "
            "cannot separate, else K settings of median cost"
            + (
                ", a cell planned at least 10 % from its baseline (and the baseline's own) stopping at "
                "its first look"
                if race
                else ""
            )
            + "; worst case: those and the K most expensive, every cell to its cap; the run's order: "
            "the deciding cells first, the carried settings waiting for them; racing's drops not predicted)"
        )
        lines += _where_lines(doc["expected"]["gpu_min"])
    if race and expected is not None and expected.sched is not None and st.gpus:
        from .hook_windows import hook_windows

        by_tp = _by_tp(expected.sched)
        if by_tp:
            lines.append(f"  the expected run's schedule by TP size: {by_tp}")
        hooked = hook_windows(st, expected.sched, run="the expected run", head=False)
        if hooked:
            lines.append("  GPUs of the hooks' service in the expected run's schedule:")
            lines += ["  " + x for x in hooked]
    if race and ratios:
        from ..deciding.race import TP_DRIFT

        skipped = sum(1 for c in runnable if skips is not None and skips(c))
        lines.append(
            "  a TP size slower per user than a smaller one at a cheaper shape, beyond the drift the run's "
            "brackets measure between the two groups (none measured: none skipped), skips its costlier "
            f"shapes: planned per user, larger over smaller TP, x{ratios[0]:.2f} to x{ratios[-1]:.2f}: "
            f"{skipped} cell(s) expected skipped (the plan assumes ±{TP_DRIFT:.0%} drift)"
        )
        doc["tp_skipped_expected"] = skipped
    return doc, lines
