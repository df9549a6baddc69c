"""The window of the matrix's group hooks that name their GPUs (``hooks: {gpus: [...]}``): the
groups that need a hooked GPU run back to back, last, in one process by the items' order
(``hooked_window_last``), under -n by the scheduler's (xdist_policy.py); the service their hooks
stop is stopped once, by the first start that leases its GPU, and started once, when no start
holds it and none of the cells that need it is left (``before`` / ``after`` around each start in
group_hooks.py, over gpus/service_window.py, shared by every process of the run; here ``expect``
and ``done`` count the cells, ``close_at_end`` closes what a run left open, ``windows_doc`` says
them in the JSON). Also the plan's lines for the hooks over the packed schedule
(``hook_windows``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..engines import get_backend
from ..planning import schedule
from . import group_hooks
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
    per such GPU the window the engine starts leasing it span (a family's bracket or sentinel is
    a start too; the schedule runs them back to back, last), a service living there stopped once
    before the first and started once after the last, so down from the first's start to the
    last's end (GPU idle time inside included, as a run keeps it stopped). ``full_factorial``:
    the schedule is the full factorial's of a raced run (said in the head line); ``run``: what
    the makespan is of; ``head``: without the first line."""
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
            idle = (last - first) - sum(b - a for a, b in ws)
            span = f"{schedule.clock(first)} -> {schedule.clock(last)}"
            out.append(
                f"  GPU {g} (its hooks' service): {len(mine)} engine start(s) lease it, "
                + (
                    f"back to back in one window, {span}"
                    if len(ws) == 1
                    else f"in one window, {span}, with {idle / 60:.1f} min idle between {len(ws)} spans"
                )
                + f": the service is down {(last - first) / 60:.1f} min of {run}'s "
                f"{sched.makespan_s / 60:.1f}, stopped once before the first start and started once "
                "after the last"
            )
            continue
        out.append(
            f"  GPU {g}: {len(mine)} hooked group(s) between {schedule.clock(first)} and "
            f"{schedule.clock(last)}: "
            f"a service their hooks stop while they hold GPU {g} is down {held / 60:.1f} min of those "
            f"{(last - first) / 60:.1f} min"
        )
    return out


# ------------------------------------------------------------------------------ the run's window


def cell_key(st: SpecbenchState, cell: Any) -> str | None:
    """The window a cell's start needs: its group cannot run without a hooked GPU of the pool
    (schedule.needs_reserved) and its hooks name one; else None."""
    reserved = reserved_gpus(st)
    only = group_hooks.hook_gpus(cell.group) or frozenset()
    if not (only & set(reserved)) or not get_backend(cell.method.backend).gpu:
        return None
    if not schedule.needs_reserved(cell.tp, tuple(st.gpus or ()), reserved):
        return None
    return group_hooks.window_key(cell.group, only)


def _windows(st: SpecbenchState) -> Any:
    from ..gpus.service_window import ServiceWindows

    return ServiceWindows(st.leases.dir)


def expect(st: SpecbenchState, cells: Iterable[tuple[str, Any]]) -> None:
    """The run's cells that need a window ((node id, cell) of every item that will run or be
    skipped, a sentinel's with the cell it re-runs), set once by the process that schedules them
    (the controller under -n) before any engine starts."""
    if st.leases is None or not reserved_gpus(st):
        return
    items = {n: k for n, c in cells if c is not None and (k := cell_key(st, c)) is not None}
    _windows(st).expect(items)


def done(st: SpecbenchState, nodeid: str, cell: Any) -> None:
    """A cell that needs a window has run (or was skipped): it no longer keeps it open."""
    if cell is not None and st.leases is not None and cell_key(st, cell) is not None:
        _windows(st).done(nodeid)


def close_at_end(st: SpecbenchState) -> None:
    """At the run's end, by the process that owns the lease directory: a window still open (its
    cells were interrupted, a worker crashed) is closed by its after-hook, recorded as an event of
    the group that opened it (a failure fails the run like any after_group's)."""
    if st.leases is None or not st.lease_dir_owned or st.matrix is None:
        return
    from ..gpus.service_window import ServiceWindows

    if not ServiceWindows(st.leases.dir).state_path.exists():
        return
    groups = {g.id: g for g in st.matrix.groups()}
    for key, opener in _windows(st).close_open():
        group = groups.get(opener)
        if group is None:
            continue
        ev: dict[str, Any] = {
            "group": opener,
            "event": "hook_window",
            "hook_window": "closed at the run's end",
        }
        group_hooks.after_group(group, tuple(json.loads(key)[0]), ev, ok=False)
        st.pending.append(ev)


def windows_doc(st: SpecbenchState) -> list[dict[str, Any]]:
    """The run's hook windows for the results JSON (``specbench.hook_windows``): per hook, its
    GPUs and commands, the starts inside it, which group stopped the service and which started
    it again, how often each hook ran and how long the service was down."""
    if st.leases is None:
        return []
    from ..gpus.service_window import ServiceWindows

    w = ServiceWindows(st.leases.dir)
    if not w.state_path.exists():
        return []
    out = []
    for key, x in w.info().items():
        gpus, before_cmd, after_cmd = json.loads(key)
        if not x["starts"]:
            continue
        down = x["closed_at"] - x["opened_at"] if x["closed_at"] and x["opened_at"] else None
        out.append(
            {
                "gpus": gpus,
                "before_group": before_cmd,
                "after_group": after_cmd,
                "starts": x["starts"],
                "stopped_by": x["opened_by"],
                "started_by": x["closed_by"],
                "before_group_runs": x["before_runs"],
                "after_group_runs": x["after_runs"],
                "down_s": round(down, 3) if down is not None else None,
                "open": x["state"] != "closed",
            }
        )
    return out
