"""The run's packed schedule (planning/schedule.py packs it): one job per engine group with a cell
to run, timed from the plan (``planned_seconds``, the one place the schedule reads the plan's
durations), a family's groups and its sentinels as one job (sentinel.py), and the plan's
printout of the schedule for the run's workers."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from ..engines import get_backend
from ..matrix.cells import Cell, EngineGroup
from ..planning import schedule
from . import busy_gpus, sentinel
from .gpu_pool import reserved_gpus
from .hook_windows import hook_windows
from .skip_reasons import skip_reason
from .state import SpecbenchState
from .xdist_sched import workers


@dataclass(frozen=True)
class Planned:
    start_s: float  # engine start (not its process's first)
    first_start_extra_s: float  # what a process's first start of the backend adds
    cells_s: float  # the cells with an ETA
    no_eta: int  # cells without one (counted as 0 s)


def planned_seconds(plan: Any, group: EngineGroup, cells: list[Cell]) -> Planned:
    """A group's planned durations: the one place the schedule reads them from the plan (the
    group's start_s / first_start_extra_s where the plan has them, else ENGINE_START_S; each
    cell's eta_s)."""
    from ..planning.eta import ENGINE_START_S

    gp = plan.groups.get(group.id)
    start = getattr(gp, "start_s", None)
    if not isinstance(start, (int, float)):
        start = ENGINE_START_S.get(group.method.backend, 60.0)
    extra = getattr(gp, "first_start_extra_s", 0.0)
    etas = [cp.eta_s if (cp := plan.cells.get(c.id)) is not None else None for c in cells]
    return Planned(
        float(start),
        float(extra) if isinstance(extra, (int, float)) else 0.0,
        sum(e for e in etas if e is not None),
        sum(1 for e in etas if e is None),
    )


@dataclass
class Jobs:
    jobs: list[schedule.Job]  # groups with a cell to run, in first-appearance order
    no_eta: int  # their cells without an ETA
    gpu_skipped: dict[str, tuple[int, str]]  # group -> (cells, reason): wider than the pool


def jobs(config: pytest.Config, st: SpecbenchState, cells: Iterable[Cell]) -> Jobs:
    """One job per engine group with a cell to run."""
    plan = st.get_plan()
    by_group: dict[str, list[Cell]] = {}
    gpu_skipped: dict[str, tuple[int, str]] = {}
    for c in cells:
        if not skip_reason(config, st, c):
            by_group.setdefault(c.group.id, []).append(c)
        elif (why := st.gpu_skip_reason(c)) is not None:
            n, _ = gpu_skipped.get(c.group.id, (0, why))
            gpu_skipped[c.group.id] = (n + 1, why)
    out, no_eta = [], 0
    for run in by_group.values():
        g = run[0].group
        p = planned_seconds(plan, g, run)
        no_eta += p.no_eta
        gpus = g.tp if get_backend(g.method.backend).gpu else 0
        out.append(
            schedule.Job(g.id, gpus, p.start_s + p.cells_s, g.tp, g.method.backend, p.first_start_extra_s)
        )
    return Jobs(out, no_eta, {g: v for g, v in gpu_skipped.items() if g not in by_group})


def plan_schedule(config: pytest.Config, st: SpecbenchState, cells: list[Cell]) -> tuple[Any, list[str]]:
    """The packed schedule of the selected cells for the run's workers (None when the pool is
    unknown and a group needs GPUs) and its printout."""
    k = st.plan_workers or workers(config)
    js = jobs(config, st, cells)
    if not js.jobs:
        return None, []
    apart = list(js.jobs)  # every group on its own, as if no family were kept together
    fj = sentinel.merge(config, st, js, cells, planned_seconds)  # a family's groups and sentinel: one job
    if st.gpus is None and any(j.gpus for j in js.jobs):  # the sentinels are in the serial total still
        return None, ["schedule: GPU pool unknown (no NVML): --specbench-gpus 0,1,... plans for those GPUs"]
    pool, reserved = tuple(st.gpus or ()), reserved_gpus(st)
    order = schedule.hooked_last(schedule.longest_first(js.jobs) if k > 1 else js.jobs, pool, reserved)
    sched = fj.expand(schedule.pack(order, pool, k, reserved))
    if k > 1 and fj.fams:
        free = schedule.pack(
            schedule.hooked_last(schedule.longest_first(apart), pool, reserved), pool, k, reserved
        ).makespan_s
        fj.cost_s = (sched.makespan_s, free)
    left_out = [(g, f"{n} cells skipped, {why}") for g, (n, why) in js.gpu_skipped.items()]
    lines = schedule.format_schedule(sched, st.gpu_unavailable, left_out)
    if js.no_eta:
        lines.insert(-1, f"  ({js.no_eta} cells without an ETA count as 0 s)")
    cpu = [j for j in js.jobs if not j.gpus and not get_backend(j.backend or "hf").external]
    cores = os.cpu_count() or 1
    if k > 1 and cpu and k > cores // 2:
        lines.insert(
            -1,
            f"  (CPU groups are packed as if each worker had its own cores; this machine has {cores}: "
            f"{k} workers running the CPU backend slow each other, and their measurements with them)",
        )
    # under --specbench-race this schedule is the full factorial's; the racing section prints the
    # expected raced run's window too (plan_race.py)
    raced = bool(config.getoption("specbench_race", False))
    return sched, lines + fj.lines() + busy_gpus.plan_lines(st, sched) + hook_windows(
        st, sched, full_factorial=raced
    )
