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
OPENING_INFIX = "-before-"  # a GPU set's first bracket, where the baseline's group did not run


@dataclass(frozen=True)
class Family:
    baseline: str  # the baseline's engine group, e.g. "ar-tp1"
    members: tuple[str, ...]  # the groups compared with it, in first-appearance order
    first: Cell  # the baseline's first cell (its first shape): what the sentinel re-runs
    brackets: bool = False  # a bracket after each member, not one sentinel after all
    # a family spread over GPU sets (deciding/spread.py) is one Family per set, ``gpu_set`` of
    # ``gpu_sets``: set 0 runs the baseline's own group, set k > 0 opens with a bracket
    gpu_set: int = 0
    gpu_sets: int = 1

    @property
    def spread(self) -> bool:
        return self.gpu_sets > 1

    @property
    def bracketed(self) -> bool:
        """Its members read the levels their brackets bound (report/brackets.py), not a
        sentinel's band: a bracketed family, and every GPU set of a spread one."""
        return self.brackets or self.spread

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.baseline, *self.members) if self.gpu_set == 0 else self.members

    @property
    def scope(self) -> str:
        """The family's unit of work (one xdist worker, one slot of the packed schedule); a
        spread family's GPU set is one of its own."""
        own = f" (GPU set {self.gpu_set + 1} of {self.gpu_sets})" if self.spread else ""
        return f"family {self.baseline}{own}"

    @property
    def sentinel_id(self) -> str:
        return self.first.id + SENTINEL_SUFFIX

    def opening_id(self) -> str | None:
        """GPU set k > 0's first bracket (``<first cell>-before-<its first member>-sentinel``),
        None on set 0 (the baseline's own cell opens it)."""
        if self.gpu_set == 0 or not self.members:
            return None
        return f"{self.first.id}{OPENING_INFIX}{self.members[0]}{SENTINEL_SUFFIX}"

    def runs(self) -> list[tuple[str, str | None]]:
        """(item id, the group it runs after; None: before the first member) of each re-run of
        the baseline's first shape: the sentinel after the last member, or a bracket after each
        member (``<first cell>-after-<member group>-sentinel``); a spread family's GPU set: its
        opening bracket (set k > 0), then a bracket after each member (bracketed) or one after
        its last."""
        opening = self.opening_id()
        out: list[tuple[str, str | None]] = [(opening, None)] if opening else []
        if not self.members:
            return out
        if self.brackets:
            return out + [(f"{self.first.id}{BRACKET_INFIX}{m}{SENTINEL_SUFFIX}", m) for m in self.members]
        if self.spread:
            last = self.members[-1]
            return out + [(f"{self.first.id}{BRACKET_INFIX}{last}{SENTINEL_SUFFIX}", last)]
        return [(self.sentinel_id, self.members[-1])]

    def before(self, member: str) -> str | None:
        """A bracketed member's first bracket: the item id of the bracket after the member before
        it, its GPU set's opening bracket for the first member on a set k > 0 (every member
        of a set bracketed only at its end), None on set 0 (the baseline's own cell)."""
        k = self.members.index(member)
        if self.brackets and k > 0:
            return f"{self.first.id}{BRACKET_INFIX}{self.members[k - 1]}{SENTINEL_SUFFIX}"
        return self.opening_id()

    def span(self, after: str) -> tuple[str, ...]:
        """The members whose level a bracket after ``after`` closes: that member (bracketed), or
        every member of the GPU set (a spread family's set bracketed at its end)."""
        return (after,) if self.brackets or not self.spread else self.members

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
    """The run's jobs with each family's groups (and its sentinel) as one job on one worker; a
    family spread over GPU sets (deciding/spread.py), one job per set."""

    jobs: list[schedule.Job]
    fams: list[Family]
    parts: dict[str, list[tuple[str, float]]]  # family scope -> (group or sentinel label, seconds)
    sentinel_s: dict[str, tuple[float, float]]  # family baseline -> (engine start, its rounds) planned
    cost_s: tuple[float, float] | None = None  # (makespan with families kept, without), packed
    runs: dict[str, int] = dataclasses.field(default_factory=dict)  # family scope -> its re-runs
    _run_scopes: dict[str, str] | None = None

    def _baseline_of(self) -> dict[str, str]:
        return {f.scope: f.baseline for f in self.fams}

    def total_s(self) -> float:
        """Every sentinel's and bracket's planned seconds: restarts of the baselines and rounds."""
        of = self._baseline_of()
        return sum(sum(self.sentinel_s.get(of.get(s, ""), (0.0, 0.0))) * n for s, n in self.runs.items())

    def gpu_s(self) -> float:
        """The same in GPU-seconds (each re-run holds its family's TP size of GPUs)."""
        tp = {f.scope: f.first.tp for f in self.fams}
        of = self._baseline_of()
        return sum(
            sum(self.sentinel_s.get(of.get(s, ""), (0.0, 0.0))) * n * tp.get(s, 1)
            for s, n in self.runs.items()
        )

    def restarts(self) -> dict[str, int]:
        """The baselines' engine restarts: {"brackets": N, "sentinels": M} (each a start of a
        baseline's engine beside the groups' own starts)."""
        out = {"brackets": 0, "sentinels": 0}
        for f in self.fams:
            if f.scope in self.runs:
                out["brackets" if f.bracketed else "sentinels"] += self.runs[f.scope]
        return out

    def scope_of(self, group: str) -> str:
        for f in self.fams:
            if group in f.groups:
                return f.scope
        return group

    def scope_of_run(self, rid: str) -> str | None:
        """The scope of a sentinel's or bracket's item id (the GPU set it runs on), or None."""
        if self._run_scopes is None:
            self._run_scopes = {r: f.scope for f in self.fams for r, _ in f.runs()}
        return self._run_scopes.get(rid)

    def lease_order(self, order: list[str]) -> list[str]:
        """Scopes -> the engine groups they start, in order (the lease pool ranks groups)."""
        by = {f.scope: f.groups for f in self.fams}
        return [g for s in order for g in by.get(s, (s,))]

    def lease_expected(self, needs: dict[str, int]) -> dict[str, int]:
        """A family scope about to start asks for its baseline's GPUs (its own group, or the
        opening bracket of a spread family's GPU set)."""
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
                        label,
                        s.gpus_needed,
                        s.gpus,
                        s.worker,
                        s.ready_s if k == 0 else t,
                        t,
                        t + d,
                        s.extra_s if k == 0 else 0.0,
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
            "baseline restarts for the rounds of its first shape; a bracketed family's after each member"
            + ("; a spread family's on each of its GPU sets" if any(f.spread for f in self.fams) else "")
            + "):"
        ]
        said: set[str] = set()
        for f in self.fams:
            if f.baseline in said or f.baseline not in self.sentinel_s:
                continue
            said.add(f.baseline)
            start, rounds = self.sentinel_s[f.baseline]
            sets = [x for x in self.fams if x.baseline == f.baseline]
            if f.spread:
                n = sum(self.runs.get(x.scope, 0) for x in sets)
                # the baseline's set without a member runs its group alone (not a family's job)
                alone = [] if any(x.gpu_set == 0 for x in sets) else [f"set 1: {f.baseline}'s own group"]
                out.append(
                    f"  brackets of {f.baseline}: {n} x (engine start {start:.0f} s + warm-up and rounds "
                    f"{rounds:.0f} s) = {n * (start + rounds):.0f} s, the family spread over "
                    f"{f.gpu_sets} GPU sets of TP{f.first.tp}, each member between two measurements of "
                    f"the baseline on its own ({f.first.id}): "
                    + "; ".join(alone + [_set_said(x) for x in sets])
                )
                continue
            if f.brackets:
                n = self.runs.get(f.scope, len(f.members))
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
            how = (
                "the families spread over their GPU sets, each set with its baseline or brackets"
                if any(f.spread for f in self.fams)
                else "keeping each family back to back on one GPU set"
            )
            out.append(
                f"  {how}: makespan {kept / 60:.1f} min, "
                f"against {free / 60:.1f} min with every group packed on its own and no drift measured "
                "(--specbench-no-sentinel)"
            )
        return out


def _set_said(f: Family) -> str:
    """A spread family's GPU set as the plan says it: "set 2: bracket, ngram-tp1, bracket"."""
    head = [f"{f.baseline}'s own group"] if f.gpu_set == 0 else ["bracket"]
    body = [x for m in f.members for x in ([m, "bracket"] if f.brackets else [m])]
    tail = [] if f.brackets or not f.members else ["bracket"]
    return f"set {f.gpu_set + 1}: " + ", ".join(head + body + tail)


def rounds_s(f: Family, plan: Any) -> float:
    """The plan's time for a sentinel's warm-up and round: its baseline's first cell's round."""
    from ..planning.eta import cell_eta_s

    cp = plan.cells.get(f.first.id)
    return cell_eta_s(f.sentinel_cell(), cp.round_s) if cp is not None and cp.round_s else 0.0


def wave_s(cell: Cell, plan: Any) -> float:
    """The plan's time for one wave of ``cell``'s round (its concurrency's requests at once):
    what the machine's warm-up pass sends at its shape (workloads/kinds.py warm_machine)."""
    cp = plan.cells.get(cell.id)
    if cp is None or not cp.round_s:
        return 0.0
    c = max(1, cell.concurrency)
    waves = max(1, -(-cell.workload.requests_per_round(c) // c))
    return float(cp.round_s) / waves


def merge_jobs(fams: list[Family], jobs: list[schedule.Job], plan: Any, planned_seconds: Any) -> FamilyJobs:
    """``jobs`` with each family's jobs (its baseline's among them) as one job, back to back, its
    sentinel's planned time added; other jobs as they are; a spread family's GPU set as a job of
    its own, opened by its bracket where the baseline's group is not on it. The packed schedule
    and a shard's one-host makespan both read families this way."""
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
        start = planned_seconds(plan, f.first.group, []).start_s
        rounds = rounds_s(f, plan)
        sent[f.baseline] = (start, rounds)
        bracket = start + rounds
        members = [by[g] for g in f.members]
        part: list[tuple[str, float]] = (
            [(f.baseline, by[f.baseline].duration_s)]
            if f.gpu_set == 0
            else [(f"{f.baseline} (bracket before {f.members[0]})", bracket)]
        )
        for m in members:
            part.append((m.group, m.duration_s))
            if f.brackets:
                part.append((f"{f.baseline} (bracket after {m.group})", bracket))
        if not f.brackets:
            label = "sentinel" if not f.spread else f"bracket after {members[-1].group}"
            part.append((f"{f.baseline} ({label})", bracket))
        runs[f.scope] = len(part) - len(members) - (1 if f.gpu_set == 0 else 0)
        parts[f.scope] = part
        lead = by[f.baseline] if f.gpu_set == 0 else members[0]
        out.append(
            schedule.Job(
                f.scope,
                lead.gpus,
                sum(d for _, d in part),
                f.first.tp,
                lead.backend,
                lead.first_extra_s,
                warm_s=lead.warm_s if f.gpu_set == 0 else (wave_s(f.first, plan) if lead.gpus else 0.0),
            )
        )
    return FamilyJobs(out, fams, parts, sent, runs=runs)
