"""Drift sentinels (docs/metrics.md "Drift sentinel"): where a baseline is not interleaved, its
family (matrix/families.py) runs back to back, baseline first, on one worker, and an extra item
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

from ..engines import BACKENDS
from ..matrix.cells import Cell
from ..matrix.families import SENTINEL_SUFFIX, Family, families, group_order
from ..planning import schedule
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


@dataclass
class FamilyJobs:
    """The run's jobs with each family's groups (and its sentinel) as one job on one worker."""

    jobs: list[schedule.Job]
    fams: list[Family]
    parts: dict[str, list[tuple[str, float]]]  # family scope -> (group or sentinel label, seconds)
    sentinel_s: dict[str, tuple[float, float]]  # family baseline -> (engine start, its rounds) planned
    cost_s: tuple[float, float] | None = None  # (makespan with families kept, without), packed

    def scope_of(self, group: str) -> str:
        for f in self.fams:
            if group in f.groups:
                return f.scope
        return group

    def lease_order(self, order: list[str]) -> list[str]:
        """Scopes -> the engine groups they start, in order (the lease pool ranks groups)."""
        by = {f.scope: f.groups for f in self.fams}
        return [g for s in order for g in by.get(s, (s,))]

    def lease_expected(self, needs: dict[str, int]) -> dict[str, int]:
        """A family scope about to start asks for its baseline's GPUs."""
        by = {f.scope: f.baseline for f in self.fams}
        return {by.get(s, s): n for s, n in needs.items()}

    def expand(self, sched: schedule.Schedule) -> schedule.Schedule:
        """A family's slot as its groups back to back on its GPUs, then its sentinel."""
        slots = []
        for s in sched.slots:
            parts = self.parts.get(s.group)
            if parts is None:
                slots.append(s)
                continue
            t = s.start_s
            extra = (s.end_s - s.start_s) - sum(d for _, d in parts)  # a first start's extra
            for k, (label, d) in enumerate(parts):
                d += extra if k == 0 else 0.0
                slots.append(
                    schedule.Slot(
                        label, s.gpus_needed, s.gpus, s.worker, s.ready_s if k == 0 else t, t, t + d
                    )
                )
                t += d
        sched.slots = slots
        return sched

    def lines(self) -> list[str]:
        """The sentinels' cost: one line per family, and their total."""
        if not self.sentinel_s:
            return []
        out = [
            f"drift sentinels ({len(self.sentinel_s)}; a family's groups run back to back, then its "
            "baseline restarts for one round of its first shape):"
        ]
        for f in self.fams:
            if f.baseline in self.sentinel_s:
                start, rounds = self.sentinel_s[f.baseline]
                out.append(
                    f"  {f.sentinel_id}: engine start {start:.0f} s + warm-up and 1 round {rounds:.0f} s "
                    f"(family {', '.join(f.groups)})"
                )
        total = sum(a + b for a, b in self.sentinel_s.values())
        out.append(f"  sentinels in all: {total / 60:.1f} min (in the schedule above)")
        if self.cost_s is not None:
            kept, free = self.cost_s
            out.append(
                f"  keeping each family back to back on one GPU set: makespan {kept / 60:.1f} min, "
                f"against {free / 60:.1f} min with every group packed on its own and no drift measured "
                "(--specbench-no-sentinel)"
            )
        return out


def planned_rounds_s(
    config: pytest.Config, st: SpecbenchState, plan: Any, ran: list[dict[str, Any]]
) -> float:
    """The plan's time for the warm-up and round of the sentinels that ran (``ran``: their
    results), their engine restarts apart. Their families are read from the matrix (an xdist
    controller collects no sentinel items)."""
    if st.matrix is None or not ran:
        return 0.0
    by_id = {f.sentinel_id: f for f in families_of(config, st, st.matrix.cells())}
    return sum(_rounds_s(f, plan) for r in ran if (f := by_id.get(r.get("cell_id", ""))) is not None)


def _rounds_s(f: Family, plan: Any) -> float:
    """The plan's time for a sentinel's warm-up and round: its baseline's first cell's round."""
    from ..planning.eta import cell_eta_s

    cp = plan.cells.get(f.first.id)
    return cell_eta_s(f.sentinel_cell(), cp.round_s) if cp is not None and cp.round_s else 0.0


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


def merge_jobs(fams: list[Family], jobs: list[schedule.Job], plan: Any, planned_seconds: Any) -> FamilyJobs:
    """``jobs`` with each family's jobs (its baseline's among them) as one job, back to back, its
    sentinel's planned time added; other jobs as they are. The packed schedule and a shard's
    one-host makespan both read families this way."""
    by = {j.group: j for j in jobs}  # groups with a cell to run
    fams = [f for f in fams if f.baseline in by and any(g in by for g in f.members)]
    of = {g: f for f in fams for g in f.groups}
    out: list[schedule.Job] = []
    parts: dict[str, list[tuple[str, float]]] = {}
    sent: dict[str, tuple[float, float]] = {}
    done: set[str] = set()
    for j in jobs:
        f = of.get(j.group)
        if f is None:
            out.append(j)
            continue
        if f.scope in done:
            continue
        done.add(f.scope)
        members = [by[g] for g in f.groups if g in by]
        start = planned_seconds(plan, f.first.group, []).start_s
        rounds = _rounds_s(f, plan)
        sent[f.baseline] = (start, rounds)
        parts[f.scope] = [(m.group, m.duration_s) for m in members] + [
            (f"{f.baseline} (sentinel)", start + rounds)
        ]
        out.append(
            schedule.Job(
                f.scope,
                members[0].gpus,
                sum(m.duration_s for m in members) + start + rounds,
                f.first.tp,
                members[0].backend,
                members[0].first_extra_s,
            )
        )
    return FamilyJobs(out, fams, parts, sent)
