"""The run's packed schedule (planning/schedule.py packs it): one job per engine group with a cell
to run, timed from the plan (planned.py: ``planned_seconds``, the one place the schedule reads
the plan's durations), a family's groups and its sentinels as one job (sentinel.py), and the
plan's printout of the schedule for the run's workers, with its GPU-minute bound."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..engines import get_backend
from ..matrix.cells import Cell
from ..planning import schedule
from . import busy_gpus, sentinel
from .gpu_pool import reserved_gpus
from .hook_windows import hook_windows
from .planned import Jobs, Planned, jobs, machine_warm_s, planned_seconds  # noqa: F401  (their home)
from .state import SpecbenchState
from .xdist_sched import workers


def bound_lines(
    sched: schedule.Schedule,
    cells_gpu_s: float,
    starts_gpu_s: float,
    drift_gpu_s: float,
    groups_s: dict[str, float],
    makespan_s: float | None = None,
) -> list[str]:
    """The schedule's GPU-minute bound beside its makespan (``makespan_s``: the one printed, if
    not the schedule's), and where its GPU time goes (also put in ``sched.bound`` for the plan's
    JSON)."""
    if not sched.pool:
        return []
    made = sched.makespan_s if makespan_s is None else makespan_s
    b = schedule.bound(cells_gpu_s, groups_s, len(sched.pool))
    sp = schedule.spent(sched, cells_gpu_s, starts_gpu_s, drift_gpu_s)
    sched.bound = {
        "bound_s": b.bound_s,
        "cells_gpu_s": b.cells_gpu_s,
        "area_s": b.area_s,
        "longest_group": b.longest,
        "longest_group_s": b.longest_s,
        "ratio": b.ratio(made),
        "gpu_s": {
            "total": sp.total,
            "cells": sp.cells,
            "starts": sp.starts,
            "first_start_extra_and_warm_up": sp.extra,
            "brackets_and_sentinels": sp.drift,
            "idle": {str(g): s for g, s in sp.idle.items()},
        },
    }
    return [f"  {b.said(made)}"] + sp.lines("  ")


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
    lines += bound_lines(sched, js.cells_gpu_s, js.starts_gpu_s, fj.gpu_s(), js.groups_s)
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
