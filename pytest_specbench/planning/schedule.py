"""Packing engine groups onto GPUs: which group runs on which GPUs, from when to when.

Pure (no pytest, no I/O). The plan's printout and the xdist scheduler's ordering both come from
here, and the GPU leases (leases.py) grant GPUs with the same rule (:func:`grant`). The printed
schedule is what a run does when the planned durations hold and every group has several cells:
xdist gives a worker its next group when its current one has one cell left, so a worker whose
group has a single cell takes the following group with it, and a run can then differ from the
printout (other GPUs, earlier or later starts; the makespan in the simulation test held within
1.15x).

The model of a run with K workers:
- the groups are handed out in one order: :func:`longest_first` under xdist (planned duration,
  larger TP first among equals, then the id), the collection order in a single process;
- a free worker takes the next group; its engine start waits for ``gpus`` GPUs from the pool
  shared by every worker (0 for a backend that needs none);
- waiting starts are served by their rank in that order, first fit: each one that fits in what
  is free gets the lowest free GPUs, so a small group may pass a large one that does not fit yet;
- a GPU a group hook's service lives on (``hooks: {gpus: [0]}``, reserved) goes only to a start
  that cannot run without it, and those starts are handed out last (:func:`hooked_last`): they
  run back to back at the end, so the service is stopped only within that one window (its hooks
  stop and start it around each of those starts);
- a group holds its GPUs for its planned duration (engine start + its cells, plus the extra of
  a process's first start of its backend when it is its worker's first), then returns them and
  its worker takes the next group.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Job:
    group: str
    gpus: int  # GPUs its engine needs (the TP size; 0 for a backend without GPUs)
    duration_s: float  # planned: engine start + its cells
    tp: int = 0  # for the order among equal durations (defaults to gpus)
    backend: str = ""
    first_extra_s: float = 0.0  # added when it is its worker's first start of its backend
    # its worker holds it without GPUs until then (a tuned sweep's carried cells wait for the
    # decision, deciding/race.py): it asks for GPUs at max(taken, not_before_s); with ``tail_s``
    # only its last ``tail_s`` seconds wait (they start no earlier than not_before_s, the rest
    # runs at once: a family whose tuned members come last)
    not_before_s: float = 0.0
    tail_s: float = 0.0
    # the machine's warm-up pass (untimed), added when it is the first start on its GPU set
    # (:func:`pack`; workloads/kinds.py ``warm_machine`` runs it)
    warm_s: float = 0.0

    @property
    def size(self) -> int:
        return self.tp or self.gpus


@dataclass(frozen=True)
class Slot:
    group: str
    gpus_needed: int
    gpus: tuple[int, ...]
    worker: int  # 0..K-1 in the model (not an xdist id: any free worker takes the next group)
    ready_s: float  # its worker took it and asked for GPUs
    start_s: float  # it got them
    end_s: float
    extra_s: float = 0.0  # of which its worker's first start of its backend and the warm-up pass

    @property
    def waited_s(self) -> float:
        return self.start_s - self.ready_s


@dataclass
class Schedule:
    workers: int
    pool: tuple[int, ...]
    slots: list[Slot]
    unplaceable: list[Job]  # needs more GPUs than the pool has: never starts
    makespan_s: float
    serial_s: float  # the same groups one after another (one worker)
    bound: dict[str, Any] | None = None  # its GPU-minute bound and where its time goes (the plan's)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "pool": list(self.pool),
            "makespan_s": self.makespan_s,
            "serial_s": self.serial_s,
            "slots": [asdict(s) | {"gpus": list(s.gpus)} for s in self.slots],
            "unplaceable": [asdict(j) for j in self.unplaceable],
            **({"bound": self.bound} if self.bound is not None else {}),
        }


def longest_first(jobs: Sequence[Job]) -> list[Job]:
    """The order groups are handed to workers: longest planned duration first, the larger TP
    first among equals (so the widest groups are not left for the end), then by id."""
    return sorted(jobs, key=lambda j: (-j.duration_s, -j.size, j.group))


def grant(
    free: Sequence[int],
    waiting: Sequence[tuple[K, int]],
    reserved: Sequence[int] = (),
    pool_size: int = 0,
    wants: Mapping[K, Sequence[int]] | None = None,
) -> dict[K, tuple[int, ...]]:
    """Who gets GPUs now: ``waiting`` in rank order as (key, GPUs needed); first fit, each one
    that fits in what is left gets the lowest free GPUs. A ``reserved`` GPU (one a hook's
    service lives on) goes only to a start that cannot run without it (needing more than the
    ``pool_size`` less the reserved ones), after every other free GPU. ``wants``: a waiting
    start that keeps a GPU set (the next start of a drift family's part, on the GPUs its
    baseline's rounds were measured on) gets those GPUs and no others, before anyone, and no
    other start takes them."""
    left = sorted(free)
    out: dict[K, tuple[int, ...]] = {}
    wants = {k: tuple(sorted(w)) for k, w in (wants or {}).items() if w}
    kept = {g for k, _ in waiting if k in wants for g in wants[k]}
    for key, _ in waiting:
        if key in wants and all(g in left for g in wants[key]):
            out[key] = wants[key]
            left = [g for g in left if g not in out[key]]
    for key, n in waiting:
        if key in wants:
            continue
        needs = bool(reserved) and n > pool_size - len(reserved)
        # a start that needs a reserved GPU takes every other free one first
        can = [g for g in left if g not in reserved and g not in kept]
        if needs:
            can += [g for g in left if g in reserved and g not in kept]
        if n <= len(can):
            out[key] = tuple(sorted(can[:n]))
            left = [g for g in left if g not in out[key]]
    return out


def needs_reserved(gpus: int, pool: Sequence[int], reserved: Sequence[int]) -> bool:
    """Whether a start of ``gpus`` GPUs cannot run without a reserved GPU of ``pool``."""
    mine = [g for g in reserved if g in pool]
    return bool(mine) and gpus > len(pool) - len(mine)


def hooked_last(jobs: Sequence[Job], pool: Sequence[int], reserved: Sequence[int]) -> list[Job]:
    """``jobs`` in their order, but those that need a reserved GPU after every other one (and in
    their order among themselves): they then run back to back at the end, the reserved GPUs
    leased in one window."""
    return [j for j in jobs if not needs_reserved(j.gpus, pool, reserved)] + [
        j for j in jobs if needs_reserved(j.gpus, pool, reserved)
    ]


def pack(jobs: Sequence[Job], pool: Sequence[int], workers: int, reserved: Sequence[int] = ()) -> Schedule:
    """Simulate the run: ``jobs`` in the order they are handed out, ``workers`` workers, the GPUs
    of ``pool`` (``reserved`` ones as :func:`grant` gives them). Jobs needing more GPUs than the
    pool has are left out (``unplaceable``)."""
    workers = max(1, workers)
    reserved = tuple(g for g in reserved if g in pool)
    started: set[tuple[int, str]] = set()  # (worker, backend) that has started an engine
    warm: set[tuple[int, ...]] = set()  # GPU sets an engine has started on (warmed)
    pool_t = tuple(sorted(pool))
    queue = [j for j in jobs if j.gpus <= len(pool_t)]
    unplaceable = [j for j in jobs if j.gpus > len(pool_t)]
    t = 0.0
    free = list(pool_t)
    idle = list(range(workers))
    waiting: list[tuple[int, Job, int, float]] = []  # (rank, job, worker, ready)
    running: list[tuple[float, Slot]] = []
    slots: list[Slot] = []
    rank = {id(j): i for i, j in enumerate(queue)}
    nxt = 0
    while nxt < len(queue) or waiting or running:
        while idle and nxt < len(queue):
            j = queue[nxt]
            waiting.append((rank[id(j)], j, idle.pop(0), t if j.tail_s else max(t, j.not_before_s)))
            nxt += 1
        waiting.sort(key=lambda w: w[0])
        got = grant(free, [(w[0], w[1].gpus) for w in waiting if w[3] <= t], reserved, len(pool_t))
        for w in [w for w in waiting if w[0] in got]:
            gpus = got[w[0]]
            free = [g for g in free if g not in gpus]
            job, worker = w[1], w[2]
            extra = 0.0 if (worker, job.backend) in started else job.first_extra_s
            started.add((worker, job.backend))
            if gpus and gpus not in warm:  # the first engine on this GPU set warms it
                extra += job.warm_s
                warm.add(gpus)
            end = t + job.duration_s + extra
            if job.tail_s and job.not_before_s:  # its tail waits for the decision, GPUs held
                end = max(end - job.tail_s, job.not_before_s) + job.tail_s
            s = Slot(job.group, job.gpus, gpus, worker, w[3], t, end, extra)
            slots.append(s)
            running.append((s.end_s, s))
            waiting.remove(w)
        later = [w[3] for w in waiting if w[3] > t]
        if not running and not later:  # nothing can start and nothing will end: cannot happen
            break
        running.sort(key=lambda r: (r[0], r[1].worker))
        t = min(later + ([running[0][0]] if running else []))
        while running and running[0][0] <= t:
            _, s = running.pop(0)
            free = sorted(free + list(s.gpus))
            idle.append(s.worker)
        idle.sort()
    return Schedule(
        workers=workers,
        pool=pool_t,
        slots=slots,
        unplaceable=unplaceable,
        makespan_s=max((s.end_s for s in slots), default=0.0),
        serial_s=sum(j.duration_s for j in queue)
        + sum(
            next(j.first_extra_s for j in queue if j.backend == b)
            for b in dict.fromkeys(j.backend for j in queue)
        ),
    )


def clock(seconds: float) -> str:
    """0:00 / 12:34 / 1:02:03."""
    s = int(round(seconds))
    h, m, sec = s // 3600, s // 60 % 60, s % 60
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def format_schedule(
    sched: Schedule, notes: Sequence[str] = (), left_out: Sequence[tuple[str, str]] = ()
) -> list[str]:
    """The packed schedule as lines: one per group (GPUs, from, to, waiting), the groups left out
    (``left_out``: group and why, said by the caller), then the makespan against the serial time."""
    pool = ",".join(map(str, sched.pool)) or "none"
    head = f"schedule with {sched.workers} worker{'s' if sched.workers != 1 else ''}, GPU pool {pool}"
    lines = [head + (f" ({'; '.join(notes)})" if notes else "") + ":"]
    width = max([len(s.group) for s in sched.slots] + [len(g) for g, _ in left_out], default=5)
    for s in sorted(sched.slots, key=lambda s: (s.start_s, s.gpus, s.group)):
        gpus = ",".join(map(str, s.gpus)) if s.gpus else "-"
        wait = f"  (waits {clock(s.waited_s)} for GPUs)" if s.waited_s > 0.5 else ""
        lines.append(
            f"  {s.group:<{width}}  GPUs {gpus:<15} {clock(s.start_s):>8} -> {clock(s.end_s):>8}{wait}"
        )
    lines += [f"  {g:<{width}}  not scheduled: {why}" for g, why in left_out]
    for j in sched.unplaceable:
        lines.append(f"  {j.group:<{width}}  not scheduled: needs {j.gpus} GPUs, {len(sched.pool)} free")
    ratio = f", {sched.serial_s / sched.makespan_s:.1f}x" if sched.makespan_s > 0 else ""
    lines.append(
        f"makespan {sched.makespan_s / 60:.1f} min with {sched.workers} worker"
        f"{'s' if sched.workers != 1 else ''}; serial {sched.serial_s / 60:.1f} min{ratio}"
    )
    return lines


# ------------------------------------------------------------------------------ the bound


@dataclass(frozen=True)
class Bound:
    """The GPU-minute bound of what a schedule runs: no schedule on ``gpus`` GPUs ends before its
    cells' GPU-seconds (a cell's planned seconds x its GPUs) spread evenly over them, nor before
    its longest group (one engine: its start and its cells, one after another) ends."""

    gpus: int
    cells_gpu_s: float
    longest_s: float
    longest: str  # that group

    @property
    def area_s(self) -> float:
        return self.cells_gpu_s / self.gpus if self.gpus else 0.0

    @property
    def bound_s(self) -> float:
        return max(self.area_s, self.longest_s)

    def ratio(self, makespan_s: float) -> float | None:
        return makespan_s / self.bound_s if self.bound_s > 0 else None

    def said(self, makespan_s: float) -> str:
        """ "bound 231.0 min (...), 1.12x" for a makespan."""
        r = self.ratio(makespan_s)
        return (
            f"bound {self.bound_s / 60:.1f} min (cells' {self.cells_gpu_s / 60:,.0f} GPU-minutes / "
            f"{self.gpus} GPUs = {self.area_s / 60:.1f}; longest group {self.longest} "
            f"{self.longest_s / 60:.1f})" + (f", makespan {r:.2f}x the bound" if r is not None else "")
        )


def bound(cells_gpu_s: float, groups_s: Mapping[str, float], gpus: int) -> Bound:
    """The bound of a schedule whose cells take ``cells_gpu_s`` GPU-seconds, with groups of
    ``groups_s`` seconds each (engine start and cells), on ``gpus`` GPUs."""
    longest = max(groups_s, key=lambda g: (groups_s[g], g), default="")
    return Bound(gpus, cells_gpu_s, groups_s.get(longest, 0.0), longest)


@dataclass(frozen=True)
class Spent:
    """Where a schedule's GPU time goes (GPU-seconds): its GPUs x its makespan is the cells, the
    groups' engine starts, the first starts' extra and the warm-up passes, the drift brackets'
    and sentinels' restarts and rounds, and each GPU's idle time; ``other`` is what none of these
    names (cells without an ETA count 0 s)."""

    total: float
    cells: float
    starts: float
    extra: float
    drift: float
    idle: dict[int, float]

    @property
    def other(self) -> float:
        return self.total - self.cells - self.starts - self.extra - self.drift - sum(self.idle.values())

    def lines(self, indent: str = "  ") -> list[str]:
        gm = 60.0
        parts = [
            f"cells {self.cells / gm:,.0f}",
            f"engine starts {self.starts / gm:,.0f}",
            f"first starts' extra and warm-up passes {self.extra / gm:,.0f}",
            f"brackets and sentinels {self.drift / gm:,.0f}",
            f"idle {sum(self.idle.values()) / gm:,.0f}",
        ]
        if abs(self.other) >= gm / 2:
            parts.append(f"unaccounted {self.other / gm:,.0f}")
        idle = ", ".join(f"GPU {g} {s / gm:.1f}" for g, s in sorted(self.idle.items()))
        return [
            f"{indent}GPU-minutes ({len(self.idle)} GPUs x the makespan = {self.total / gm:,.0f}): "
            + ", ".join(parts),
            f"{indent}idle minutes by GPU: {idle}",
        ]


def spent(sched: Schedule, cells_gpu_s: float, starts_gpu_s: float, drift_gpu_s: float) -> Spent:
    """Where ``sched``'s GPU time goes, its cells, engine starts and brackets given (GPU-seconds:
    seconds x GPUs held); the first starts' extra and warm-up passes from its slots."""
    busy = {g: 0.0 for g in sched.pool}
    extra = 0.0
    for s in sched.slots:
        for g in s.gpus:
            busy[g] = busy.get(g, 0.0) + (s.end_s - s.start_s)
        extra += s.extra_s * len(s.gpus)
    idle = {g: max(0.0, sched.makespan_s - b) for g, b in busy.items()}
    total = sched.makespan_s * len(busy)
    return Spent(total, cells_gpu_s, starts_gpu_s, extra, drift_gpu_s, idle)
