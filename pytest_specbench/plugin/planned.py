"""The groups' planned times, as jobs of the packed schedule (planning/schedule.py packs them):
one job per engine group with a cell to run, timed from the plan (``planned_seconds``, the one
place the schedule reads the plan's durations), with the machine's warm-up pass it runs when it
is the first engine on its GPU set. packed_schedule.py and sentinel.py (a family spread over GPU
sets is split on the packed schedule) both read them here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..engines import get_backend
from ..matrix.cells import Cell, EngineGroup
from ..planning import schedule
from .skip_reasons import skip_reason
from .state import SpecbenchState


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
    # what the bound reads (schedule.bound, schedule.spent): GPU-seconds of the cells and of the
    # groups' engine starts, and each group's seconds (engine start and cells)
    cells_gpu_s: float = 0.0
    starts_gpu_s: float = 0.0
    groups_s: dict[str, float] = field(default_factory=dict)


def machine_warm_s(plan: Any, cells: list[Cell]) -> float:
    """The machine's warm-up pass a group's engine runs when it is the first on its GPU set
    (workloads/kinds.py ``warm_machine``), planned: one wave of a round at each shape its cells
    use (its longest cell's there); 0 for a backend without GPUs."""
    from ..deciding.families import wave_s

    by: dict[tuple[int, int, bool], float] = {}
    for c in cells:
        if get_backend(c.method.backend).gpu:
            key = (c.concurrency, c.context_tokens, c.workload.streamed)
            by[key] = max(by.get(key, 0.0), wave_s(c, plan))
    return sum(by.values())


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
    js = Jobs([], 0, {g: v for g, v in gpu_skipped.items() if g not in by_group})
    for run in by_group.values():
        g = run[0].group
        p = planned_seconds(plan, g, run)
        no_eta += p.no_eta
        gpus = g.tp if get_backend(g.method.backend).gpu else 0
        out.append(
            schedule.Job(
                g.id,
                gpus,
                p.start_s + p.cells_s,
                g.tp,
                g.method.backend,
                p.first_start_extra_s,
                warm_s=machine_warm_s(plan, run),
            )
        )
        js.cells_gpu_s += p.cells_s * gpus
        js.starts_gpu_s += p.start_s * gpus
        js.groups_s[g.id] = p.start_s + p.cells_s
    js.jobs, js.no_eta = out, no_eta
    return js
