"""Drift sentinels (docs/metrics.md "Drift sentinel"): where a baseline is not interleaved, its
family (deciding/families.py) runs back to back, baseline first, on one worker, and an extra item
``<baseline's first cell>-sentinel`` after the family's last group re-runs that shape for one
timed round on a fresh start of the baseline's engine. Its tok/s against the baseline's own
measurement is the family's drift (report/drift.py). This module owns the sentinel items
(collection, order, run), the family's place in the packed schedule and the plan's lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..deciding.families import (
    SENTINEL_SUFFIX,
    Family,
    FamilyJobs,
    families,
    group_order,
    merge_jobs,
    rounds_s,
)
from ..engines import BACKENDS
from ..matrix.cells import Cell
from .state import STATE, SpecbenchState, interleaving_backends, jsonable

SENTINEL_PROP = "specbench_sentinel"


@dataclass
class Sentinels:
    by_id: dict[str, Family] = field(default_factory=dict)  # sentinel id -> its family (all cells)
    measured_at: dict[str, float] = field(default_factory=dict)  # cell id -> when it finished (time.time)


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


def families_of(config: pytest.Config, st: SpecbenchState, cells: list[Cell]) -> list[Family]:
    """The families of ``cells`` under this run's options."""
    if st.matrix is None:
        return []
    backends = sentinel_backends(config)
    if not backends:
        return []
    return families(cells, st.matrix.baselines(), backends, interleaving(config))


# ------------------------------------------------------------------------------ collection


def params(config: pytest.Config, st: SpecbenchState, kind: str, marks_for: Any) -> list[Any]:
    """The sentinel items of bench function ``kind``: one per family of the whole matrix whose
    baseline's first cell is of this kind (the same engine param, the sentinel's cell, the id
    ``<first cell>-sentinel``). ``marks_for(cell)``: the first cell's marks (skip, timeout)."""
    assert st.matrix is not None
    out = []
    for f in families_of(config, st, st.matrix.cells()):
        if f.first.workload.kind != kind:
            continue
        _state(config).by_id[f.sentinel_id] = f
        cell = f.sentinel_cell()
        out.append(pytest.param(cell.group, cell, marks=marks_for(f.first), id=f.sentinel_id))
    return out


def sentinel_base(cell_of: Any, nodeid: str) -> Cell | None:
    """The cell a sentinel's node id re-runs (``...[<cell id>-sentinel]``), or None."""
    tail = SENTINEL_SUFFIX + "]"
    return cell_of(nodeid[: -len(tail)] + "]") if nodeid.endswith(tail) else None


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
    fams = {f.sentinel_id: f for f in families_of(config, st, runs)}  # with a cell to run
    drop = [i for i in items if (f := family_of_item(i)) is not None and f.sentinel_id not in fams]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]
    groups = list(dict.fromkeys(c.group.id for c in cells))
    rank = {g: n for n, g in enumerate(group_order(groups, list(fams.values())))}
    last = {f.sentinel_id: max(rank[g] for g in f.groups) for f in fams.values()}
    keys: list[tuple[float, int]] = []
    for n, item in enumerate(items):
        f = family_of_item(item)
        cell = cell_of(item)
        if f is not None:
            keys.append((last[f.sentinel_id] + 0.5, n))
        elif cell is None:
            keys.append((-1, n))
        else:
            keys.append((rank[cell.group.id], n))
    items[:] = [items[n] for _, n in sorted(keys)]


# ------------------------------------------------------------------------------ the run


def note_measured(config: pytest.Config, cell: Cell) -> None:
    """A cell finished measuring (the sentinel says how long before it its baseline ran)."""
    _state(config).measured_at[cell.id] = time.time()


def run(item: pytest.Item, engine: Any, cell: Cell) -> dict[str, Any]:
    """The sentinel: warm the freshly started baseline engine at its shape, run its warm-up and
    one timed round, and record that round for the family's drift."""
    from ..report import metrics
    from ..report.paired import round_p50s
    from ..workloads import kinds as workloads

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
    m = metrics.cell_metrics(
        run_.records,
        run_.round_times,
        run_.round_output_tokens,
        request_digests=run_.round_digests,
        request_rate=cell.request_rate,
        round_windows=run_.round_windows,
        one_wave=run_.one_wave,
    )
    now = time.time()
    base_at = _state(item.config).measured_at.get(f.first.id)
    result = {
        "family": f.baseline,
        "groups": list(f.groups),
        "cell_id": f.sentinel_id,
        "baseline_cell": f.first.id,
        "nodeid": item.nodeid,
        "round_tokens_per_s": m.get("round_tokens_per_s"),
        "round_latency_s_p50": round_p50s(m),
        "request_digests": m.get("request_digests"),
        "errors": m.get("errors", 0),
        "disturbed": run_.extra.get("disturbed"),
        "at": now,
        "baseline_at": base_at,
        "engine_warm": warm,
        "worker": item.config.stash[STATE].worker,
    }
    result = jsonable(result)
    if m.get("errors"):
        pytest.fail(
            f"sentinel {f.sentinel_id}: {m['errors']} of {m['requests']} requests failed; first: "
            f"{m.get('first_error')}",
            pytrace=False,
        )
    item.user_properties.append((SENTINEL_PROP, result))
    return result


# ------------------------------------------------------------------------------ schedule and plan


def planned_rounds_s(
    config: pytest.Config, st: SpecbenchState, plan: Any, ran: list[dict[str, Any]]
) -> float:
    """The plan's time for the warm-up and round of the sentinels that ran (``ran``: their
    results), their engine restarts apart. Their families are read from the matrix (an xdist
    controller collects no sentinel items)."""
    if st.matrix is None or not ran:
        return 0.0
    by_id = {f.sentinel_id: f for f in families_of(config, st, st.matrix.cells())}
    return sum(rounds_s(f, plan) for r in ran if (f := by_id.get(r.get("cell_id", ""))) is not None)


def merge(
    config: pytest.Config, st: SpecbenchState, js: Any, cells: list[Cell], planned_seconds: Any
) -> FamilyJobs:
    """``js`` (xdist_sched.Jobs) with each family's jobs as one, its sentinel's planned time
    added (an engine start of the baseline and the sentinel cell's warm-up and one round);
    ``planned_seconds``: xdist_sched's reading of a group's planned start."""
    plan = st.get_plan()
    fj = merge_jobs(families_of(config, st, cells), js.jobs, plan, planned_seconds)
    js.jobs = fj.jobs
    plan.sentinels_s = sum(a + b for a, b in fj.sentinel_s.values())  # in the plan's ETA line
    return fj
