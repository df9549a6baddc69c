"""Drift sentinels (docs/metrics.md "Drift sentinel"): where a baseline is not interleaved, its
family (deciding/families.py) runs back to back, baseline first, on one worker, and an extra item
``<baseline's first cell>-sentinel`` after the family's last group re-runs that shape for one
timed round on a fresh start of the baseline's engine. Its tok/s against the baseline's own
measurement is the family's drift (report/drift.py). A bracketed family (a member whose baseline
does not fit beside it, planning/residency.py; every family with --specbench-brackets) gets
such an item after each member instead, ``<first cell>-after-<member group>-sentinel``: the
member's brackets, whose drift widens its intervals (report/brackets.py) and, once measured,
its race (deciding/race.py ``brackets``). Under -n on a GPU pool with several GPU sets of a
family's TP size, the family is spread over them (deciding/spread.py): each set runs its share of
the members between brackets of the baseline measured on that set, the one the baseline's group
runs on opened by the baseline's own cell, every other by ``<first cell>-before-<its first
member>-sentinel``. This module owns the sentinel items (collection, order, run), the family's
place in the packed schedule and the plan's lines.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..deciding.families import (
    BRACKET_INFIX,
    OPENING_INFIX,
    SENTINEL_SUFFIX,
    Family,
    FamilyJobs,
    as_first,
    by_part,
    families,
    group_order,
    merge_jobs,
    rounds_s,
)
from ..deciding.spread import choose
from ..engines import BACKENDS
from ..matrix.cells import Cell
from .state import STATE, SpecbenchState, interleaving_backends

SENTINEL_PROP = "specbench_sentinel"


@dataclass
class Sentinels:
    by_id: dict[str, Family] = field(default_factory=dict)  # sentinel id -> its family (all cells)
    measured_at: dict[str, float] = field(default_factory=dict)  # cell id -> when it finished (time.time)
    # a family's first cell's result (this process's), the brackets' drift measured against it
    first_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    bracket_ratio: dict[str, float] = field(default_factory=dict)  # bracket item id -> its level
    # the selection's family scopes (one per GPU set of a spread family): the GPU set a scope's
    # starts keep (plugin/state.py asks its lease for the GPUs its scope started on)
    scope_of_group: dict[str, str] = field(default_factory=dict)
    scope_of_run: dict[str, str] = field(default_factory=dict)
    spread_memo: dict[Any, list[Family]] = field(default_factory=dict)  # _spread's, per set of cells


KEY = pytest.StashKey[Sentinels]()


def _state(config: pytest.Config) -> Sentinels:
    if KEY not in config.stash:
        config.stash[KEY] = Sentinels()
    return config.stash[KEY]


def sentinel_backends(config: pytest.Config) -> frozenset[str]:
    """Backends whose non-interleaved baselines get a family and a sentinel: those registered with
    ``sentinel`` (sglang; sglang-server only where its baseline is not resident), and the
    interleaving ones (hf) under --specbench-no-interleave."""
    if config.getoption("specbench_no_sentinel", False):
        return frozenset()
    no_inter = config.getoption("specbench_no_interleave", False)
    return frozenset(
        n
        for n, b in BACKENDS.items()
        if (b.sentinel and (no_inter or not b.resident)) or (no_inter and (b.interleave or b.resident))
    )


def interleaving(config: pytest.Config) -> frozenset[str]:
    return frozenset() if config.getoption("specbench_no_interleave", False) else interleaving_backends()


def _rule(config: pytest.Config, st: SpecbenchState) -> dict[str, Any] | None:
    """``families``' arguments but the cells, under this run's options; None: no families."""
    backends = sentinel_backends(config)
    if st.matrix is None or not backends:
        return None
    return {
        "baselines": st.matrix.baselines(),
        "sentinel_backends": backends,
        "interleaving": interleaving(config),
        "bracketed": st.bracketed_groups(),
        "brackets": bool(config.getoption("specbench_brackets", False)),
    }


def families_of(
    config: pytest.Config, st: SpecbenchState, cells: list[Cell], spread_by: list[Cell] | None = None
) -> list[Family]:
    """The families of ``cells`` under this run's options, each spread over its TP size's GPU
    sets where the run has several (deciding/spread.py) as ``spread_by``'s cells split them
    (default: ``cells``; the raced plan's variants split as the run's collection does)."""
    rule = _rule(config, st)
    if rule is None:
        return []
    fams = families(cells, **rule)
    sets = _sets(config, st)
    if sets is None or not fams:
        return fams
    if spread_by is None:
        return _spread(config, st, fams, cells, sets)
    whole = _spread(config, st, families(spread_by, **rule), spread_by, sets)
    out = []
    for f in fams:  # each family of ``cells`` as its family of ``spread_by`` is split
        split = [x for x in whole if x.baseline == f.baseline and x.spread]
        out += [
            dataclasses.replace(
                f,
                members=tuple(m for m in x.members if m in f.members),
                gpu_set=x.gpu_set,
                gpu_sets=x.gpu_sets,
            )
            for x in split
        ] or [f]
    return out


def _spread(
    config: pytest.Config, st: SpecbenchState, fams: list[Family], cells: list[Cell], sets: Any
) -> list[Family]:
    """``fams`` spread over their GPU sets as deciding/spread.py ``choose``s, on the packed
    schedule of ``cells`` (the run's order, pool and workers): computed once per set of cells."""
    key = (tuple(c.id for c in cells), tuple(f.scope for f in fams))
    memo = _state(config).spread_memo
    if key not in memo:
        from ..planning import schedule
        from .gpu_pool import reserved_gpus
        from .planned import jobs, planned_seconds

        plan = st.get_plan()
        js = jobs(config, st, cells).jobs
        pool, reserved, k = tuple(st.gpus or ()), reserved_gpus(st), run_workers(config, st)

        def makespan(split: list[Family]) -> float:
            merged = merge_jobs(split, js, plan, planned_seconds).jobs
            order = schedule.hooked_last(schedule.longest_first(merged), pool, reserved)
            return schedule.pack(order, pool, k, reserved).makespan_s

        rank = {g.id: i for i, g in enumerate(st.matrix.groups())} if st.matrix is not None else None
        memo[key] = choose(fams, _durations(config, st, cells), sets, _bracket_s(st), makespan, rank)
    return memo[key]


def run_workers(config: pytest.Config, st: SpecbenchState) -> int:
    """The run's worker processes: -n (its plan's, or the count xdist gives each worker)."""
    from .xdist_sched import workers

    given = getattr(config, "workerinput", {}).get("workercount")
    return max(1, int(st.plan_workers or given or workers(config)))


def _sets(config: pytest.Config, st: SpecbenchState) -> Any:
    """A family's GPU sets the run can use at once (its TP size's in the pool, a hooked GPU's
    service left out where the size does not need it, at most one per worker), as a function;
    None where nothing spreads (one process, or no GPU pool)."""
    from .gpu_pool import reserved_gpus

    pool = tuple(st.gpus or ())
    k = run_workers(config, st)
    if len(pool) < 2 or k < 2:
        return None
    free = len(pool) - len(reserved_gpus(st))

    def sets(f: Family) -> int:
        tp = max(1, f.first.tp)
        if not BACKENDS[f.first.method.backend].gpu:
            return 1
        return max(1, min(k, (free if tp <= free else len(pool)) // tp))

    return sets


def _durations(config: pytest.Config, st: SpecbenchState, cells: list[Cell]) -> dict[str, float]:
    """Each group's planned seconds over ``cells`` that run (engine start and cells, as the
    packed schedule reads them); groups without a cell to run are left out."""
    from .planned import planned_seconds
    from .skip_reasons import skip_reason

    plan = st.get_plan()
    by: dict[str, list[Cell]] = {}
    for c in cells:
        if not skip_reason(config, st, c):
            by.setdefault(c.group.id, []).append(c)
    out = {}
    for g, cs in by.items():
        p = planned_seconds(plan, cs[0].group, cs)
        out[g] = p.start_s + p.cells_s
    return out


def _bracket_s(st: SpecbenchState) -> Any:
    """A family's bracket, planned: its baseline's restart and its first shape's rounds."""
    from .planned import planned_seconds

    plan = st.get_plan()
    return lambda f: planned_seconds(plan, f.first.group, []).start_s + rounds_s(f, plan)


def shard_sentinels(
    config: pytest.Config, st: SpecbenchState, parts: list[list[Cell]]
) -> tuple[tuple[str, ...], ...]:
    """Per shard (``parts``: each shard's cells that run), the ids of its drift sentinels: one
    per family whose baseline and members it holds (deciding/families.py ``by_part``), or its
    brackets where the shard's run spreads the family over GPU sets (as its own collection does)."""
    rule = _rule(config, st)
    if rule is None:
        return tuple(() for _ in parts)
    sets = _sets(config, st)
    split = [
        _spread(config, st, fams, part, sets) if sets is not None and fams else fams
        for fams, part in zip(by_part(parts, **rule), parts, strict=True)
    ]
    return tuple(tuple(rid for f in fams for rid, _ in f.runs()) for fams in split)


# ------------------------------------------------------------------------------ collection


def possible(config: pytest.Config, st: SpecbenchState) -> list[Family]:
    """The families whose sentinels a process may run: each family of the whole matrix; on a
    shard (--specbench-shard), each with every baseline cell as its first, since the split
    (matrix/shards.py, by shape) may leave any of them the first on a shard that holds members
    (deciding/families.py ``as_first``). ``order`` keeps the ones the selection's families have."""
    assert st.matrix is not None
    fams = families_of(config, st, st.matrix.cells())
    return as_first(fams, st.matrix.cells()) if st.shard is not None else fams


def candidates(config: pytest.Config, st: SpecbenchState) -> dict[str, Family]:
    """Every sentinel or bracket item id a process may run -> a family it belongs to: the
    ``possible`` families' runs and, where a family may be spread, the brackets before and
    after each of its members and its sentinel (the selection decides how it splits; ``order``
    keeps what the selection's families run)."""
    out: dict[str, Family] = {}
    sets = _sets(config, st)
    for f in possible(config, st):
        for rid, _ in f.runs():
            out.setdefault(rid, f)
        if f.spread or (sets is not None and sets(f) > 1):  # a shard or a selection may split it
            for m in f.members:
                for infix in (OPENING_INFIX, BRACKET_INFIX):
                    out.setdefault(f"{f.first.id}{infix}{m}{SENTINEL_SUFFIX}", f)
            out.setdefault(f.sentinel_id, f)
    return out


def params(config: pytest.Config, st: SpecbenchState, kind: str, marks_for: Any) -> list[Any]:
    """The sentinel items of bench function ``kind``: one per possible family (``possible``)
    whose baseline's first cell is of this kind (the same engine param, the sentinel's cell, the
    id ``<first cell>-sentinel``). ``marks_for(cell)``: the first cell's marks (skip, timeout)."""
    assert st.matrix is not None
    out = []
    for rid, f in candidates(config, st).items():
        if f.first.workload.kind != kind:
            continue
        cell = f.sentinel_cell()
        _state(config).by_id[rid] = f
        out.append(pytest.param(cell.group, cell, marks=marks_for(f.first), id=rid))
    return out


def sentinel_base(cell_of: Any, nodeid: str) -> Cell | None:
    """The cell a sentinel's or bracket's node id re-runs (``...[<cell id>-sentinel]``,
    ``...[<cell id>-after-<group>-sentinel]``), or None."""
    tail = SENTINEL_SUFFIX + "]"
    if not nodeid.endswith(tail):
        return None
    head = nodeid[: -len(tail)]
    return cell_of(head + "]") or next(
        (
            c
            for infix in (BRACKET_INFIX, OPENING_INFIX)
            if infix in head and (c := cell_of(head.rpartition(infix)[0] + "]"))
        ),
        None,
    )


def family_of_item(item: pytest.Item) -> Family | None:
    """The family whose sentinel ``item`` is, or None for any other item."""
    cs = getattr(item, "callspec", None)
    if cs is None or not cs.id.endswith(SENTINEL_SUFFIX):
        return None
    return _state(item.config).by_id.get(cs.id)


def order(config: pytest.Config, items: list[pytest.Item], cell_of: Any) -> None:
    """In place, stable: bench items by engine group (first appearance), each family's groups
    together (baseline first) and its sentinel after them. A sentinel whose family the selection
    left without a member, or without the baseline's first cell, is deselected."""
    st: SpecbenchState = config.stash[STATE]
    cells = [c for i in items if (c := cell_of(i)) is not None and family_of_item(i) is None]
    runs = [
        c
        for i in items
        if (c := cell_of(i)) is not None and family_of_item(i) is None and not i.get_closest_marker("skip")
    ]
    fams = {rid: f for f in families_of(config, st, runs) for rid, _ in f.runs()}  # with a cell to run
    after = {rid: g for f in fams.values() for rid, g in f.runs()}
    drop = [i for i in items if family_of_item(i) is not None and _item_id(i) not in fams]
    _state(config).by_id.update(fams)  # a kept sentinel's family: the selection's (or shard's) members
    _state(config).scope_of_run = {rid: f.scope for rid, f in fams.items()}
    _state(config).scope_of_group = {g: f.scope for f in fams.values() for g in f.groups}
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]
    groups = list(dict.fromkeys(c.group.id for c in cells))
    rank = {g: n for n, g in enumerate(group_order(groups, list({id(f): f for f in fams.values()}.values())))}
    keys: list[tuple[float, int]] = []
    for n, item in enumerate(items):
        f = family_of_item(item)
        cell = cell_of(item)
        if f is not None:  # after the group it follows (the family's last, or its member)
            g = after[_item_id(item)]  # a GPU set's opening bracket: before its first member
            keys.append((rank[g] + 0.5 if g is not None else rank[f.members[0]] - 0.5, n))
        elif cell is None:
            keys.append((-1, n))
        else:
            keys.append((rank[cell.group.id], n))
    items[:] = [items[n] for _, n in sorted(keys)]


# ------------------------------------------------------------------------------ the run


def scope_of_item(item: pytest.Item) -> str | None:
    """The family scope an item runs in (a spread family's: one per GPU set), None outside a
    family: its starts keep the GPU set the scope's first start got (plugin/state.py)."""
    sent = _state(item.config)
    if family_of_item(item) is not None:
        return sent.scope_of_run.get(_item_id(item))
    cs = getattr(item, "callspec", None)
    cell = cs.params.get("cell") if cs is not None else None
    return sent.scope_of_group.get(cell.group.id) if isinstance(cell, Cell) else None


def _item_id(item: pytest.Item) -> str:
    cs = getattr(item, "callspec", None)
    return cs.id if cs is not None else ""


def note_measured(config: pytest.Config, cell: Cell, result: dict[str, Any] | None = None) -> None:
    """A cell finished measuring (the sentinel says how long before it its baseline ran; a
    bracket's drift is measured against a family's first cell's ``result``)."""
    sent = _state(config)
    sent.measured_at[cell.id] = time.time()
    if result is not None and any(f.first.id == cell.id and f.bracketed for f in sent.by_id.values()):
        sent.first_results[cell.id] = result


def run(item: pytest.Item, engine: Any, cell: Cell) -> dict[str, Any]:
    """The sentinel: warm the freshly started baseline engine at its shape, run its warm-up and
    timed rounds (drift.sentinel_rounds), and record them for the family's drift."""
    from ..workloads import kinds as workloads
    from .cell_record import run_metrics, sentinel_record

    f = family_of_item(item)
    assert f is not None
    override = item.config.getoption("specbench_timeout", None)  # the cell's limit, as CellRunner's
    engine.deadline = time.monotonic() + (float(override) if override else cell.workload.timeout_s)
    from .disturbance import DisturbanceMeter

    st = item.config.stash[STATE]
    try:  # a GPU set's opening bracket may be the first engine on it: it warms the machine first
        machine = workloads.warm_machine(engine, [cell]) if st.cold_engine is engine else None
        warm = workloads.warm_engine(engine, [cell])
        if machine is not None:
            warm["machine"] = machine
            st.cold_engine = None
        run_ = workloads.run(engine, cell, DisturbanceMeter())  # other processes' CPU time meanwhile
    finally:
        engine.deadline = None
    m = run_metrics(run_, cell)
    rid = _item_id(item)
    after = dict(f.runs()).get(rid)
    result = sentinel_record(
        item,
        f,
        rid,
        run_,
        m,
        warm=warm,
        at=time.time(),
        baseline_at=_state(item.config).measured_at.get(f.first.id),
        after=after,
        worker=item.config.stash[STATE].worker,
    )
    if f.bracketed and after is not None and not m.get("errors"):
        _note_bracket(item.config, f, rid, after, result)
    elif f.bracketed and after is None and not m.get("errors"):  # a GPU set's opening bracket
        _note_bracket(item.config, f, rid, None, result)
    if m.get("errors"):
        pytest.fail(
            f"sentinel {rid}: {m['errors']} of {m['requests']} requests failed; first: "
            f"{m.get('first_error')}",
            pytrace=False,
        )
    item.user_properties.append((SENTINEL_PROP, result))
    return result


def _note_bracket(
    config: pytest.Config, f: Family, rid: str, member: str | None, record: dict[str, Any]
) -> None:
    """A bracket measured: its level against the family's first cell measured in this process,
    and, with the bracket before the member's, the range of each member it closes for the race
    (``member`` None: a GPU set's opening bracket, which closes none)."""
    from ..report import drift

    sent = _state(config)
    first = sent.first_results.get(f.first.id)
    if first is None:
        return
    ratio = drift.measure([first], [record])[0].get("ratio")
    if ratio is None:
        return
    sent.bracket_ratio[rid] = ratio
    st = config.stash[STATE]
    for m in f.span(member) if member is not None else ():
        before = f.before(m)
        if (before is None or before in sent.bracket_ratio) and st.race is not None:
            st.race.bracketed(m, sent.bracket_ratio.get(before or ""), ratio)


# ------------------------------------------------------------------------------ schedule and plan


def planned_rounds_s(
    config: pytest.Config, st: SpecbenchState, plan: Any, ran: list[dict[str, Any]]
) -> float:
    """The plan's time for the warm-up and round of the sentinels that ran (``ran``: their
    results), their engine restarts apart. Their families are read from the matrix (an xdist
    controller collects no sentinel items)."""
    if st.matrix is None or not ran:
        return 0.0
    by_id = candidates(config, st)
    return sum(rounds_s(f, plan) for r in ran if (f := by_id.get(r.get("cell_id", ""))) is not None)


def merge(
    config: pytest.Config, st: SpecbenchState, js: Any, cells: list[Cell], planned_seconds: Any
) -> FamilyJobs:
    """``js`` (planned.Jobs) with each family's jobs as one, its sentinel's planned time
    added (an engine start of the baseline and the sentinel cell's warm-up and one round);
    ``planned_seconds``: planned.py's reading of a group's planned start."""
    plan = st.get_plan()
    fj = merge_jobs(families_of(config, st, cells), js.jobs, plan, planned_seconds)
    js.jobs = fj.jobs
    plan.sentinels_s = fj.total_s()  # in the plan's ETA line
    plan.restarts = fj.restarts()  # beside its engine starts
    return fj
