"""GPUs and xdist for the plugin: the run's GPU pool and its leases, the skip of a cell wider than
the pool, the order engine groups are handed to workers, and the packed schedule the plan prints.

- The GPU pool is chosen once, by the xdist controller (or the single pytest process), from one
  NVML read before any engine starts: busy GPUs (someone else's process) never enter it. A run
  directory holds its lease file (leases.py); workers get its path in ``workerinput``.
- Each engine start of a GPU backend (``Backend.gpu``) leases ``tp`` GPUs of the pool and sets
  ``CUDA_VISIBLE_DEVICES`` to them (state.py), so TP1, TP4 and TP8 groups share the GPUs under
  ``-n K``; a cell needing more GPUs than the pool has is skipped at collection.
- Under xdist each engine group goes to one worker, longest planned group first (schedule.py);
  a worker gets its next group when its current one is down to its last cell.
Without NVML and without ``--specbench-gpus`` the GPUs are unknown: nothing is leased, pinned or
skipped for its TP size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..deciding import families
from ..engines import get_backend
from ..matrix.cells import Cell, EngineGroup
from ..planning import schedule
from . import sentinel
from .state import SPLIT_PROP, SpecbenchState

LEASE_DIR_KEY = "specbench_lease_dir"  # workerinput: the controller's lease directory
CARRIED = "(carried)"  # a scope's suffix: a tuned race's cells that run after its deciding cells
RACE_STORE_KEY = "specbench_race_store"  # workerinput: the controller's decision store (race.py)
LEASE_LOG = "gpu-leases.jsonl"  # copied into --specbench-log-dir at the end of the run


# ------------------------------------------------------------------------------ the pool


def setup_pool(config: pytest.Config, st: SpecbenchState, inv: list[Any]) -> None:
    """Choose the run's GPUs and create its lease directory (controller or single process), or
    open the controller's (xdist worker). Runs in pytest_configure, before any engine starts."""
    from ..gpus import inventory as gpus
    from ..gpus.leases import LeasePool

    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        d = workerinput.get(LEASE_DIR_KEY)
        if d:
            st.leases = LeasePool(d)
            info = st.leases.info()
            st.gpus = tuple(info["pool"])
            st.gpu_unavailable = list(info["notes"])
            st.gpu_baseline = {int(k): v for k, v in info["baseline_mib"].items()}
        return
    explicit = config.getoption("specbench_gpus")
    env = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if explicit is None and env and all(x.strip().isdigit() for x in env.split(",")):
        # the user's own restriction: the pool is those GPUs (NVML indices), never others
        explicit = tuple(int(x) for x in env.split(","))
    if not inv and explicit is None:  # no NVML: the GPUs are unknown
        if workers(config) > 1 and not config.getoption("specbench_plan"):
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    "GPU backends under -n without NVML (nvidia-ml-py) or --specbench-gpus: no GPU "
                    "is leased, every worker's engines see all GPUs and may share GPU 0; install "
                    "nvidia-ml-py or give --specbench-gpus 0,1,..."
                ),
                stacklevel=2,
            )
        return
    try:
        chosen, notes = gpus.choose(inv, explicit)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    st.gpus = chosen
    st.gpu_notes = notes
    st.gpu_unavailable = gpus.left_out(inv, chosen, explicit)
    st.gpu_baseline = {g.index: g.memory_used_mib for g in inv if g.index in chosen}
    if config.getoption("specbench_plan"):
        return  # the plan starts nothing
    run_dir = tempfile.mkdtemp(prefix="specbench-gpu-leases-")
    st.leases = LeasePool.create(run_dir, chosen, st.gpu_unavailable, st.gpu_baseline)
    st.lease_dir_owned = True
    if reserved_gpus(st):  # a hooked GPU only for starts that need it, in one process too
        st.leases.set_order([], {}, reserved_gpus(st))


def finish_pool(config: pytest.Config, st: SpecbenchState) -> None:
    """At unconfigure, by the process that created the lease directory: keep the lease log in
    --specbench-log-dir (gpu-leases.jsonl), remove the directory."""
    if st.leases is None or not st.lease_dir_owned:
        return
    log = st.leases.log_path
    if log.exists():
        dest = Path(config.getoption("specbench_log_dir"))
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, dest / LEASE_LOG)
    shutil.rmtree(st.leases.dir, ignore_errors=True)
    st.lease_dir_owned = False


def skip_reason(config: pytest.Config, st: SpecbenchState, cell: Cell) -> str | None:
    """Why a cell does not run (collection marks it skipped; the schedule leaves it out)."""
    reason = get_backend(cell.method.backend).skip_reason(cell.group) or st.gpu_skip_reason(cell)
    if not reason:
        reason = st.get_plan().skip_reason(cell)
    if cell.id in st.resumed:  # measured by the run being resumed: no engine start for it
        reason = f"measured in {config.getoption('specbench_resume')} (resumed)"
    return reason


# ------------------------------------------------------------------------------ durations


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


def reserved_gpus(st: SpecbenchState) -> tuple[int, ...]:
    """The pool's GPUs a group hook's service lives on (``hooks: {gpus: [...]}``)."""
    if st.matrix is None or not st.gpus:
        return ()
    from .group_hooks import hooked_gpus

    return hooked_gpus(st.matrix.groups(), tuple(st.gpus))


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


def group_order(js: Jobs, groups: Iterable[str], st: SpecbenchState | None = None) -> list[str]:
    """Engine groups in the order xdist hands them out: longest planned first, those that need a
    hooked GPU last (one window), then the groups with nothing to run (skipped at once)."""
    jobs = schedule.longest_first(js.jobs)
    if st is not None:
        jobs = schedule.hooked_last(jobs, tuple(st.gpus or ()), reserved_gpus(st))
    order = [j.group for j in jobs]
    return order + [g for g in groups if g not in order]


def _first_units(units: list[dict[str, bool]], nodes: int, scopes: list[str]) -> list[str]:
    """The scope each worker starts with: the workers take units in turn, each until it has
    more than one item (the rule of EngineGroupScheduling._reschedule)."""
    first, i = [], 0
    for _ in range(nodes):
        pending = 0
        while i < len(units) and pending <= 1:
            if pending == 0:
                first.append(scopes[i])
            pending += len(units[i])
            i += 1
    return first


def workers(config: pytest.Config) -> int:
    """Worker processes of this run: xdist's -n / --tx, else 1."""
    if getattr(config.option, "dist", "no") == "no" or not getattr(config.option, "tx", None):
        return 1
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))


def run_plan_in_controller(config: pytest.Config, st: SpecbenchState) -> None:
    """--specbench-plan under -n K: the controller collects and prints the plan for K workers
    itself (xdist would start K workers that print nothing); nothing runs either way."""
    st.plan_workers = workers(config)
    ds = config.pluginmanager.get_plugin("dsession")
    if ds is not None:
        config.pluginmanager.unregister(ds)
    config.option.dist = "no"
    config.option.tx = []


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
    return sched, lines + fj.lines() + hook_windows(st, sched, full_factorial=raced)


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


# ------------------------------------------------------------------------------ xdist


class XdistHooks:
    """Registered on the xdist controller only (xdist's hooks are unknown without it)."""

    def __init__(self, st: SpecbenchState):
        self.st = st

    def pytest_configure_node(self, node: Any) -> None:
        if self.st.leases is not None:
            node.workerinput[LEASE_DIR_KEY] = str(self.st.leases.dir)
        store = getattr(self.st.race, "store", None)
        if store is not None:  # --specbench-race: every worker decides on the controller's state
            node.workerinput[RACE_STORE_KEY] = str(store.dir)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker's split (sharding.py), also from a worker that ran nothing (an empty shard)."""
        split = (getattr(node, "workeroutput", None) or {}).get(SPLIT_PROP)
        if self.st.shard_doc is None and isinstance(split, dict):  # as sharding.receive
            self.st.shard_doc = split

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") in ("no", "each") or self.st.matrix is None:
            return None
        return make_scheduler(config, log, self.st)


def make_scheduler(config: pytest.Config, log: Any, st: SpecbenchState) -> Any:
    """Every engine group to one worker (one engine start per group), longest group first, and a
    worker's next group only when its current one is down to its last cell.

    xdist's own "loadgroup" mode cannot be relied on: it renames node ids through a private
    attribute that pytest 9.2 no longer reads. The controller knows every cell id from the
    matrix, so the scope of a node id is its cell's engine group. LoadScopeScheduling hands a
    worker a second group up front and another whenever it has two cells left; here a worker
    has one group at a time (the worker needs the next item before it runs its last one, so the
    next group is assigned when one cell is left) and groups go out in the schedule's order.
    """
    from xdist.scheduler import LoadScopeScheduling

    assert st.matrix is not None
    cells = {c.id: c for c in st.matrix.cells()}

    def cell_of(nodeid: str) -> Cell | None:
        cid = cell_id_of(nodeid)
        return cells.get(cid) if cid is not None else None

    fj: families.FamilyJobs | None = None  # the collection's families (drift sentinels)
    # --specbench-race with `tune`: the cells that decide (phase 1) go out before the rest, in
    # scopes of their own (a group with cells in both phases starts twice, as in one process); a
    # carried cell's worker waits for every deciding cell (deciding/race.py, Race.wait_decided)
    first: set[str] = set()
    if st.race is not None:
        from ..deciding.tune import first_phase

        first = first_phase(list(cells.values()), st.matrix)

    class EngineGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        collection: list[str] | None

        def _split_scope(self, nodeid: str) -> str:
            scope = self._base_scope(nodeid)
            c = cell_of(nodeid)
            return f"{scope} {CARRIED}" if first and c is not None and c.id not in first else scope

        def _base_scope(self, nodeid: str) -> str:
            c = cell_of(nodeid)
            if c is not None and c.method.url:  # groups on one endpoint: one worker, in turn (they
                return f"endpoint {c.method.url}"  # would share its GPUs, cache and counters)
            if fj is not None:  # a family's groups and its sentinel: one worker, back to back
                c = c or sentinel.sentinel_base(cell_of, nodeid)
                return fj.scope_of(c.group.id) if c is not None else nodeid
            return c.group.id if c is not None else nodeid

        def schedule(self) -> None:
            assert self.collection_is_completed
            if self.collection is not None:
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            collection: list[str] = list(next(iter(self.registered_collections.values())))
            self.collection = collection
            if not collection:
                return
            nonlocal fj
            run = [c for n in collection if (c := cell_of(n)) is not None]
            js = jobs(config, st, run)
            fj = sentinel.merge(config, st, js, run, planned_seconds)
            units: dict[str, dict[str, bool]] = {}
            for nodeid in collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            order = group_order(js, units, st)
            rank = {g: i for i, g in enumerate(order)}
            pool, reserved = tuple(st.gpus or ()), reserved_gpus(st)
            hooked = {j.group for j in js.jobs if schedule.needs_reserved(j.gpus, pool, reserved)}

            def key(s: str) -> tuple[bool, bool, int]:  # the hooked window last, in one piece
                g = s.removesuffix(f" {CARRIED}")
                return (g in hooked, s.endswith(CARRIED), rank.get(g, len(rank)))

            for scope in sorted(units, key=key):
                self.workqueue[scope] = units[scope]
            for _ in range(len(self.nodes) - len(self.workqueue)):  # more workers than groups
                unused, _work = self.assigned_work.popitem()
                unused.shutdown()
            if st.leases is not None:  # before any worker can ask: who comes first
                needs = {j.group: j.gpus for j in js.jobs if j.gpus}
                first = _first_units(list(self.workqueue.values()), len(self.nodes), list(self.workqueue))
                st.leases.set_order(
                    fj.lease_order(order),
                    fj.lease_expected({g: needs[g] for g in first if g in needs}),
                    reserved,
                )
            for node in self.nodes:
                self._reschedule(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            while self.workqueue and self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)
            if not self.workqueue:
                node.shutdown()

    return EngineGroupScheduling(config, log)


def cell_id_of(nodeid: str) -> str | None:
    """A bench item's cell id: its node id's parameter (``...::test_throughput[ID]``), or None."""
    i = nodeid.rfind("[")
    return nodeid[i + 1 : -1] if i >= 0 and nodeid.endswith("]") else None


def warn_cpu_engines_share_cores(config: pytest.Config, st: SpecbenchState) -> None:
    """CPU backends under -n K: K engines at once split the cores (each gets cores // K torch
    threads, engines/hf.py); past one thread each they oversubscribe them. Said once, on the
    controller, when it learns the session's items (a worker's collection, or its own under
    --specbench-plan) and they hold a cell of a CPU backend: a session that collected none (a
    project's own tests, run beside its CPU matrix) starts no CPU engine and is told nothing."""
    k = workers(config)
    if hasattr(config, "workerinput") or k <= 1 or st.matrix is None:
        return
    cpu = {
        c.id
        for c in st.matrix.cells()
        if not get_backend(c.method.backend).gpu and not get_backend(c.method.backend).external
    }
    if not cpu:
        return
    cores = os.cpu_count() or 1
    share = f"{max(1, cores // k)} thread(s) each"
    over = " (more engines than cores: they oversubscribe them)" if k > cores else ""
    warning = pytest.PytestConfigWarning(
        f"-n {k} runs {k} CPU engines at once on {cores} cores, {share}{over}: CPU cells run "
        "slower and noisier than serially, and cells that overlap disturb each other (marked "
        "'disturbed'); run CPU matrices without -n to compare methods"
    )

    class CpuCellsCollected:
        said = False

        def _told(self, nodeids: Iterable[str]) -> None:
            if self.said or not any(cell_id_of(n) in cpu for n in nodeids):
                return
            self.said = True
            config.issue_config_time_warning(warning, stacklevel=2)

        def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
            self._told(ids)

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            self._told(item.nodeid for item in session.items)

    config.pluginmanager.register(CpuCellsCollected(), "specbench-cpu-cells-warning")
