"""The window of the matrix's group hooks that name their GPUs (``hooks: {gpus: [...]}``): the
groups that need a hooked GPU run back to back, last, so a service their hooks stop is down
only within that window; in one process by the items' order (``hooked_window_last``), under -n
by the scheduler's (xdist_policy.py). Also the plan's lines for the hooks over the packed
schedule (``hook_windows``)."""

from __future__ import annotations

from typing import Any

from ..engines import get_backend
from ..planning import schedule
from .gpu_pool import reserved_gpus
from .state import SpecbenchState


def hooked_window_last(items: list[Any], cell_of: Any, st: SpecbenchState) -> None:
    """In one process, in place: the items of the groups that need a hooked GPU (hooks with
    ``gpus:``) after every other, in their order, so those groups run back to back at the end
    and a service their hooks stop is stopped only within that window, around each of those
    starts (under -n the scheduler orders them so)."""
    reserved = reserved_gpus(st)
    if not reserved:
        return
    pool = tuple(st.gpus or ())

    def hooked(item: Any) -> bool:
        c = cell_of(item)
        gpus = c.tp if c is not None and get_backend(c.method.backend).gpu else 0
        return c is not None and schedule.needs_reserved(gpus, pool, reserved)

    items[:] = [i for i in items if not hooked(i)] + [i for i in items if hooked(i)]


def windows(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of (start, end) spans as disjoint windows, in time order (touching ones join)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1e-6:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def hook_windows(
    st: SpecbenchState, sched: Any, full_factorial: bool = False, run: str = "the run", head: bool = True
) -> list[str]:
    """The plan's lines for the matrix's group hooks: which groups run them, and per GPU of the
    packed schedule when its hooked groups hold it. Hooks that name their GPUs (``gpus: [0]``):
    per such GPU the window(s) the engine starts leasing it span (a family's bracket or sentinel
    is a start too), a service living there down that long (one window: the schedule runs them
    back to back, last), and the stop/start cycles the window holds (the hooks run around every
    start). ``full_factorial``: the schedule is the full factorial's of a raced run (said in the
    head line); ``run``: what the makespan is of; ``head``: without the first line."""
    if st.matrix is None or sched is None:
        return []
    from .group_hooks import hook_gpus

    groups = {g.id: g for g in st.matrix.groups() if g.method.hooks}
    # a family's bracket or sentinel ("ar-tp8 (bracket after ...)") is a start of its group too
    slots = [s for s in sched.slots if s.group.split(" ")[0] in groups]
    if not slots:
        return []
    kinds = sorted({k for g in groups.values() for k in dict(g.method.hooks) if k != "gpus"})
    reserved = reserved_gpus(st)
    if reserved:
        slots = [s for s in slots if (hook_gpus(groups[s.group.split(" ")[0]]) or set()) & set(s.gpus)]
    which = "the full factorial's schedule above; the expected raced run's below" if full_factorial else ""
    which = which or "the schedule"
    out = [f"hooks: {', '.join(kinds)} around {len(slots)} group(s) of {which} (docs/matrix.md)"]
    out = out if head else []
    per_gpu: dict[int, list[Any]] = {}
    for sl in slots:
        for g in sl.gpus:
            if not reserved or g in reserved:
                per_gpu.setdefault(g, []).append(sl)
    for g in sorted(per_gpu):
        mine = per_gpu[g]
        first, last = min(x.start_s for x in mine), max(x.end_s for x in mine)
        held = sum(x.end_s - x.start_s for x in mine)
        if reserved:
            ws = windows([(x.start_s, x.end_s) for x in mine])
            down = sum(b - a for a, b in ws)
            span = ", ".join(f"{schedule.clock(a)} -> {schedule.clock(b)}" for a, b in ws)
            out.append(
                f"  GPU {g} (its hooks' service): {len(mine)} engine start(s) lease it, "
                + (f"back to back in one window, {span}" if len(ws) == 1 else f"in {len(ws)} windows, {span}")
                + f": the service is down {down / 60:.1f} min of {run}'s {sched.makespan_s / 60:.1f}, "
                f"stopped and started {len(mine)} times (its hooks run around each start)"
            )
            continue
        out.append(
            f"  GPU {g}: {len(mine)} hooked group(s) between {schedule.clock(first)} and "
            f"{schedule.clock(last)}: "
            f"a service their hooks stop while they hold GPU {g} is down {held / 60:.1f} min of those "
            f"{(last - first) / 60:.1f} min"
        )
    return out
