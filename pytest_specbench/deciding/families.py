"""Families of engine groups whose baseline is not interleaved (docs/metrics.md "Drift sentinel").

Where a cell's baseline cannot run as a second engine beside it (sglang; hf with
``--specbench-no-interleave``), the baseline is its own engine group and "vs ar" divides numbers
measured minutes or hours apart. A family is such a baseline's group plus the groups of the
methods compared with it, at one TP size: they run back to back (baseline first), and a short
re-run of the baseline's first shape (the sentinel) after the last of them measures how far the
machine drifted meanwhile. A bracketed family (a member of a resident backend whose baseline
does not fit beside it, planning/residency.py; every family with --specbench-brackets) re-runs
that shape after each member instead: each member sits between two brackets of its baseline on
the same GPUs (the first member's first bracket is the baseline's own cell), whose drift bounds
the member's (report/brackets.py). Pure: the rule the plugin orders, schedules and runs
sentinels by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..matrix.cells import Cell
from ..matrix.interleave import interleaves
from ..planning import schedule

SENTINEL_SUFFIX = "-sentinel"
BRACKET_INFIX = "-after-"


@dataclass(frozen=True)
class Family:
    baseline: str  # the baseline's engine group, e.g. "ar-tp1"
    members: tuple[str, ...]  # the groups compared with it, in first-appearance order
    first: Cell  # the baseline's first cell (its first shape): what the sentinel re-runs
    brackets: bool = False  # a bracket after each member, not one sentinel after all

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.baseline, *self.members)

    @property
    def scope(self) -> str:
        """The family's unit of work (one xdist worker, one slot of the packed schedule)."""
        return f"family {self.baseline}"

    @property
    def sentinel_id(self) -> str:
        return self.first.id + SENTINEL_SUFFIX

    def runs(self) -> list[tuple[str, str]]:
        """(item id, the group it runs after) of each re-run of the baseline's first shape: the
        sentinel after the last member, or a bracket after each member
        (``<first cell>-after-<member group>-sentinel``)."""
        if not self.brackets:
            return [(self.sentinel_id, self.members[-1])]
        return [(f"{self.first.id}{BRACKET_INFIX}{m}{SENTINEL_SUFFIX}", m) for m in self.members]

    def before(self, member: str) -> str | None:
        """A bracketed member's first bracket: the item id of the bracket after the member before
        it, None for the first member (the baseline's own cell is its first bracket)."""
        runs = self.runs()
        k = self.members.index(member)
        return runs[k - 1][0] if self.brackets and k > 0 else None

    def sentinel_cell(self) -> Cell:
        """The baseline's first shape with drift.sentinel_rounds timed rounds (its warm-up as
        configured): round i's requests are those of the baseline's timed round i."""
        from ..stats.drift import sentinel_rounds

        n = sentinel_rounds(self.first.workload.rounds)
        w = dataclasses.replace(self.first.workload, rounds=n, max_rounds=None)
        return dataclasses.replace(self.first, workload=w)


def families(
    cells: Iterable[Cell],
    baselines: Mapping[str, str | None],
    sentinel_backends: frozenset[str] | set[str],
    interleaving: frozenset[str] | set[str],
    bracketed: frozenset[str] | set[str] = frozenset(),
    brackets: bool = False,
) -> list[Family]:
    """The families of ``cells`` (in order; the selected ones): a baseline method on one of
    ``sentinel_backends``, at one TP, with every group one of whose cells compares with a cell of
    the baseline at the same shape and TP, and does not interleave its rounds with it (on
    ``interleaving``: the backends whose engines share a process, empty with
    --specbench-no-interleave). A baseline without such a group has no family. ``bracketed``:
    member groups whose baseline does not fit beside them (planning/residency.py): members of
    their baseline's family whatever its backend, and the family bracketed; ``brackets``: every
    family bracketed."""
    cells = list(cells)
    by_name = {c.method.name: c.method for c in cells}
    shapes = {(c.request_key, c.tp, c.method.name) for c in cells}
    first: dict[str, Cell] = {}  # baseline group -> its first cell
    members: dict[str, dict[str, None]] = {}
    bracketing: set[str] = set()
    for c in cells:
        first.setdefault(c.group.id, c)
    for c in cells:
        name = baselines.get(c.method.name)
        base = by_name.get(name) if name else None
        if base is None or base.name == c.method.name or (c.request_key, c.tp, base.name) not in shapes:
            continue
        apart = c.group.id in bracketed
        if not apart and (base.backend not in sentinel_backends or interleaves(c, base, interleaving)):
            continue
        members.setdefault(f"{base.name}-tp{c.tp}", {})[c.group.id] = None
        if apart:
            bracketing.add(f"{base.name}-tp{c.tp}")
    return [Family(b, tuple(m), first[b], brackets or b in bracketing) for b, m in members.items()]


def as_first(fams: Sequence[Family], cells: Iterable[Cell]) -> list[Family]:
    """Every family a part of ``cells`` can have, as ``families`` finds it on that part (a
    shard's cells: matrix/shards.py splits by shape, so a family's shapes may sit on several
    shards): each of ``fams`` with each of its baseline's cells as the first, in order, the cell
    it holds first included. A part's own family is one of these with its members narrowed to the
    part's, and its sentinel re-runs a shape the part measured."""
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        by_group.setdefault(c.group.id, []).append(c)
    return [dataclasses.replace(f, first=c) for f in fams for c in by_group.get(f.baseline, [f.first])]


def by_part(parts: Sequence[Sequence[Cell]], **kw: Any) -> list[list[Family]]:
    """The families of each part of a split (``kw``: ``families``' arguments but the cells): every
    part that holds a baseline's cells and a member's gets that family, with its own sentinel
    (its first baseline cell's shape), whichever part holds the family's first shape."""
    return [families(part, **kw) for part in parts]


def family_of(fams: Sequence[Family]) -> dict[str, Family]:
    """Group id -> its family."""
    return {g: f for f in fams for g in f.groups}


def group_order(groups: Sequence[str], fams: Sequence[Family]) -> list[str]:
    """``groups`` (first-appearance order) with each family's groups together, where its first
    group appeared: the baseline first, then its members in their order."""
    of = family_of(fams)
    out: list[str] = []
    for g in groups:
        f = of.get(g)
        for x in f.groups if f is not None else (g,):
            if x not in out and (x in groups or x == g):
                out.append(x)
    return out


# ------------------------------------------------------------------------------ schedule and plan


@dataclass
class FamilyJobs:
    """The run's jobs with each family's groups (and its sentinel) as one job on one worker."""

    jobs: list[schedule.Job]
    fams: list[Family]
    parts: dict[str, list[tuple[str, float]]]  # family scope -> (group or sentinel label, seconds)
    sentinel_s: dict[str, tuple[float, float]]  # family baseline -> (engine start, its rounds) planned
    cost_s: tuple[float, float] | None = None  # (makespan with families kept, without), packed
    runs: dict[str, int] = dataclasses.field(default_factory=dict)  # family baseline -> its re-runs

    def total_s(self) -> float:
        """Every sentinel's and bracket's planned seconds: restarts of the baselines and rounds."""
        return sum((a + b) * self.runs.get(f, 1) for f, (a, b) in self.sentinel_s.items())

    def restarts(self) -> dict[str, int]:
        """The baselines' engine restarts: {"brackets": N, "sentinels": M} (each a start of a
        baseline's engine beside the groups' own starts)."""
        out = {"brackets": 0, "sentinels": 0}
        for f in self.fams:
            if f.baseline in self.sentinel_s:
                out["brackets" if f.brackets else "sentinels"] += self.runs.get(f.baseline, 1)
        return out

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
        """The sentinels' and brackets' cost: one line per family, and their total."""
        if not self.sentinel_s:
            return []
        out = [
            f"drift sentinels ({len(self.sentinel_s)}; a family's groups run back to back, then its "
            "baseline restarts for the rounds of its first shape; a bracketed family's after each member):"
        ]
        for f in self.fams:
            if f.baseline in self.sentinel_s:
                start, rounds = self.sentinel_s[f.baseline]
                if f.brackets:
                    n = self.runs.get(f.baseline, len(f.members))
                    out.append(
                        f"  brackets of {f.baseline}: {n} x (engine start {start:.0f} s + warm-up and "
                        f"rounds {rounds:.0f} s) = {n * (start + rounds):.0f} s, one after each of "
                        f"{', '.join(f.members)} ({f.first.id}, on the same GPUs)"
                    )
                    continue
                out.append(
                    f"  {f.sentinel_id}: engine start {start:.0f} s + warm-up and rounds {rounds:.0f} s "
                    f"(family {', '.join(f.groups)})"
                )
        out.append(f"  sentinels in all: {self.total_s() / 60:.1f} min (in the schedule above)")
        if self.cost_s is not None:
            kept, free = self.cost_s
            out.append(
                f"  keeping each family back to back on one GPU set: makespan {kept / 60:.1f} min, "
                f"against {free / 60:.1f} min with every group packed on its own and no drift measured "
                "(--specbench-no-sentinel)"
            )
        return out


def rounds_s(f: Family, plan: Any) -> float:
    """The plan's time for a sentinel's warm-up and round: its baseline's first cell's round."""
    from ..planning.eta import cell_eta_s

    cp = plan.cells.get(f.first.id)
    return cell_eta_s(f.sentinel_cell(), cp.round_s) if cp is not None and cp.round_s else 0.0


def merge_jobs(fams: list[Family], jobs: list[schedule.Job], plan: Any, planned_seconds: Any) -> FamilyJobs:
    """``jobs`` with each family's jobs (its baseline's among them) as one job, back to back, its
    sentinel's planned time added; other jobs as they are. The packed schedule and a shard's
    one-host makespan both read families this way."""
    by = {j.group: j for j in jobs}  # groups with a cell to run
    # a member with no cell to run (every cell skipped: it cannot start) has no bracket, as in the run
    fams = [
        dataclasses.replace(f, members=tuple(g for g in f.members if g in by))
        for f in fams
        if f.baseline in by and any(g in by for g in f.members)
    ]
    of = {g: f for f in fams for g in f.groups}
    out: list[schedule.Job] = []
    parts: dict[str, list[tuple[str, float]]] = {}
    sent: dict[str, tuple[float, float]] = {}
    runs: dict[str, int] = {}
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
        rounds = rounds_s(f, plan)
        sent[f.baseline] = (start, rounds)
        if f.brackets:  # the baseline, then each member followed by its bracket
            part = [(members[0].group, members[0].duration_s)]
            for m in members[1:]:
                part += [(m.group, m.duration_s), (f"{f.baseline} (bracket after {m.group})", start + rounds)]
        else:
            part = [(m.group, m.duration_s) for m in members] + [(f"{f.baseline} (sentinel)", start + rounds)]
        runs[f.baseline] = len(part) - len(members)
        parts[f.scope] = part
        out.append(
            schedule.Job(
                f.scope,
                members[0].gpus,
                sum(d for _, d in part),
                f.first.tp,
                members[0].backend,
                members[0].first_extra_s,
            )
        )
    return FamilyJobs(out, fams, parts, sent, runs=runs)
