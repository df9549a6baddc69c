"""Drift sentinels (docs/metrics.md "Drift sentinel"): where a baseline is not interleaved, its
family (deciding/families.py) runs back to back, baseline first, on one worker, and an extra item
``<baseline's first cell>-sentinel`` after the family's last group re-runs that shape for one
timed round on a fresh start of the baseline's engine. Its tok/s against the baseline's own
measurement is the family's drift (report/drift.py). A bracketed family (a member whose baseline
does not fit beside it, planning/residency.py; every family with --specbench-brackets) gets
such an item after each member instead, ``<first cell>-after-<member group>-sentinel``: the
member's brackets, whose drift widens its intervals (report/brackets.py) and, once measured,
its race (deciding/race.py ``brackets``). This module owns the sentinel items (collection,
order, run), the family's place in the packed schedule and the plan's lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..deciding.families import (
    BRACKET_INFIX,
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


def families_of(config: pytest.Config, st: SpecbenchState, cells: list[Cell]) -> list[Family]:
    """The families of ``cells`` under this run's options."""
    rule = _rule(config, st)
    return families(cells, **rule) if rule is not None else []


def shard_sentinels(
    config: pytest.Config, st: SpecbenchState, parts: list[list[Cell]]
) -> tuple[tuple[str, ...], ...]:
    """Per shard (``parts``: each shard's cells that run), the ids of its drift sentinels: one
    per family whose baseline and members it holds (deciding/families.py ``by_part``)."""
    rule = _rule(config, st)
    if rule is None:
        return tuple(() for _ in parts)
    return tuple(tuple(rid for f in fams for rid, _ in f.runs()) for fams in by_part(parts, **rule))


# ------------------------------------------------------------------------------ collection


def possible(config: pytest.Config, st: SpecbenchState) -> list[Family]:
    """The families whose sentinels a process may run: each family of the whole matrix; on a
    shard (--specbench-shard), each with every baseline cell as its first, since the split
    (matrix/shards.py, by shape) may leave any of them the first on a shard that holds members
    (deciding/families.py ``as_first``). ``order`` keeps the ones the selection's families have."""
    assert st.matrix is not None
    fams = families_of(config, st, st.matrix.cells())
    return as_first(fams, st.matrix.cells()) if st.shard is not None else fams


def params(config: pytest.Config, st: SpecbenchState, kind: str, marks_for: Any) -> list[Any]:
    """The sentinel items of bench function ``kind``: one per possible family (``possible``)
    whose baseline's first cell is of this kind (the same engine param, the sentinel's cell, the
    id ``<first cell>-sentinel``). ``marks_for(cell)``: the first cell's marks (skip, timeout)."""
    assert st.matrix is not None
    out = []
    for f in possible(config, st):
        if f.first.workload.kind != kind:
            continue
        cell = f.sentinel_cell()
        for rid, _ in f.runs():
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
    return cell_of(head + "]") or (
        cell_of(head.rpartition(BRACKET_INFIX)[0] + "]") if BRACKET_INFIX in head else None
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
            keys.append((rank[after[_item_id(item)]] + 0.5, n))
        elif cell is None:
            keys.append((-1, n))
        else:
            keys.append((rank[cell.group.id], n))
    items[:] = [items[n] for _, n in sorted(keys)]


# ------------------------------------------------------------------------------ the run


def _item_id(item: pytest.Item) -> str:
    cs = getattr(item, "callspec", None)
    return cs.id if cs is not None else ""


def note_measured(config: pytest.Config, cell: Cell, result: dict[str, Any] | None = None) -> None:
    """A cell finished measuring (the sentinel says how long before it its baseline ran; a
    bracket's drift is measured against a family's first cell's ``result``)."""
    sent = _state(config)
    sent.measured_at[cell.id] = time.time()
    if result is not None and any(f.first.id == cell.id and f.brackets for f in sent.by_id.values()):
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

    try:
        warm = workloads.warm_engine(engine, [cell])
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
    if f.brackets and after is not None and not m.get("errors"):
        _note_bracket(item.config, f, rid, after, result)
    if m.get("errors"):
        pytest.fail(
            f"sentinel {rid}: {m['errors']} of {m['requests']} requests failed; first: "
            f"{m.get('first_error')}",
            pytrace=False,
        )
    item.user_properties.append((SENTINEL_PROP, result))
    return result


def _note_bracket(config: pytest.Config, f: Family, rid: str, member: str, record: dict[str, Any]) -> None:
    """A bracket measured: its level against the family's first cell measured in this process,
    and, with the bracket before the member's, the member's range for the race."""
    from ..report import drift

    sent = _state(config)
    first = sent.first_results.get(f.first.id)
    if first is None:
        return
    ratio = drift.measure([first], [record])[0].get("ratio")
    if ratio is None:
        return
    sent.bracket_ratio[rid] = ratio
    before = f.before(member)
    if before is not None and before not in sent.bracket_ratio:
        return
    st = config.stash[STATE]
    if st.race is not None:
        st.race.bracketed(member, sent.bracket_ratio.get(before or ""), ratio)


# ------------------------------------------------------------------------------ schedule and plan


def planned_rounds_s(
    config: pytest.Config, st: SpecbenchState, plan: Any, ran: list[dict[str, Any]]
) -> float:
    """The plan's time for the warm-up and round of the sentinels that ran (``ran``: their
    results), their engine restarts apart. Their families are read from the matrix (an xdist
    controller collects no sentinel items)."""
    if st.matrix is None or not ran:
        return 0.0
    by_id = {rid: f for f in possible(config, st) for rid, _ in f.runs()}
    return sum(rounds_s(f, plan) for r in ran if (f := by_id.get(r.get("cell_id", ""))) is not None)


def merge(
    config: pytest.Config, st: SpecbenchState, js: Any, cells: list[Cell], planned_seconds: Any
) -> FamilyJobs:
    """``js`` (packed_schedule.Jobs) with each family's jobs as one, its sentinel's planned time
    added (an engine start of the baseline and the sentinel cell's warm-up and one round);
    ``planned_seconds``: packed_schedule's reading of a group's planned start."""
    plan = st.get_plan()
    fj = merge_jobs(families_of(config, st, cells), js.jobs, plan, planned_seconds)
    js.jobs = fj.jobs
    plan.sentinels_s = fj.total_s()  # in the plan's ETA line
    plan.restarts = fj.restarts()  # beside its engine starts
    return fj
