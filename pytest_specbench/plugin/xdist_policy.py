"""The xdist scheduling policy, on the controller: every engine group to one worker (one engine
start per group), longest planned group first (planning/schedule.py), those that need a hooked GPU
last (hook_windows.py), and a worker's next group only when its current one is down to its last
cell (``EngineGroupScheduling``); and the controller's hooks that install it and hand each worker
the lease directory and the race's decision store (``XdistHooks``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from ..deciding import families
from ..matrix.cells import Cell
from ..planning import schedule
from . import sentinel
from .gpu_pool import LEASE_DIR_KEY, reserved_gpus
from .hook_windows import expect
from .packed_schedule import Jobs, jobs, planned_seconds
from .state import SPLIT_PROP, SpecbenchState
from .xdist_sched import RACE_STORE_KEY, cell_id_of

CARRIED = "(carried)"  # a scope's suffix: a tuned race's cells that run after its deciding cells


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
    """The run's scheduler (EngineGroupScheduling) over ``st``'s matrix."""
    return EngineGroupScheduling(config, log, st)


class EngineGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Every engine group to one worker (one engine start per group), longest group first, and a
    worker's next group only when its current one is down to its last cell.

    xdist's own "loadgroup" mode cannot be relied on: it renames node ids through a private
    attribute that pytest 9.2 no longer reads. The controller knows every cell id from the
    matrix, so the scope of a node id is its cell's engine group. LoadScopeScheduling hands a
    worker a second group up front and another whenever it has two cells left; here a worker
    has one group at a time (the worker needs the next item before it runs its last one, so the
    next group is assigned when one cell is left) and groups go out in the schedule's order.
    """

    collection: list[str] | None

    def __init__(self, config: pytest.Config, log: Any, st: SpecbenchState):
        super().__init__(config, log)
        assert st.matrix is not None
        self._st = st
        self._cells = {c.id: c for c in st.matrix.cells()}
        self._fj: families.FamilyJobs | None = None  # the collection's families (drift sentinels)
        # --specbench-race with `tune`: the cells that decide (phase 1) go out before the rest, in
        # scopes of their own (a group with cells in both phases starts twice, as in one process);
        # a carried cell's worker waits for every deciding cell (deciding/race.py, Race.wait_decided)
        self._first_phase: set[str] = set()
        if st.race is not None:
            from ..deciding.tune import first_phase

            self._first_phase = first_phase(list(self._cells.values()), st.matrix)

    def _cell_of(self, nodeid: str) -> Cell | None:
        cid = cell_id_of(nodeid)
        return self._cells.get(cid) if cid is not None else None

    def _split_scope(self, nodeid: str) -> str:
        scope = self._base_scope(nodeid)
        c = self._cell_of(nodeid)
        first = self._first_phase
        return f"{scope} {CARRIED}" if first and c is not None and c.id not in first else scope

    def _base_scope(self, nodeid: str) -> str:
        c = self._cell_of(nodeid)
        if c is not None and c.method.url:  # groups on one endpoint: one worker, in turn (they
            return f"endpoint {c.method.url}"  # would share its GPUs, cache and counters)
        if self._fj is not None:  # a family's groups and its sentinel: one worker, back to back
            rid = cell_id_of(nodeid)  # a bracket: its GPU set's scope (a spread family has several)
            scope = self._fj.scope_of_run(rid) if c is None and rid is not None else None
            if scope is not None:
                return scope
            c = c or sentinel.sentinel_base(self._cell_of, nodeid)
            return self._fj.scope_of(c.group.id) if c is not None else nodeid
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
        config, st = self.config, self._st
        run = [c for n in collection if (c := self._cell_of(n)) is not None]
        js = jobs(config, st, run)
        fj = self._fj = sentinel.merge(config, st, js, run, planned_seconds)
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
            # the cells that keep a hooked GPU's window open until each has run (a sentinel's
            # with the cell it re-runs)
            expect(
                st, [(n, self._cell_of(n) or sentinel.sentinel_base(self._cell_of, n)) for n in collection]
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
