"""Families of engine groups whose baseline is not interleaved (docs/metrics.md "Drift sentinel").

Where a cell's baseline cannot run as a second engine beside it (sglang; hf with
``--specbench-no-interleave``), the baseline is its own engine group and "vs ar" divides numbers
measured minutes or hours apart. A family is such a baseline's group plus the groups of the
methods compared with it, at one TP size: they run back to back (baseline first), and a short
re-run of the baseline's first shape (the sentinel) after the last of them measures how far the
machine drifted meanwhile. Pure: the rule the plugin orders, schedules and runs sentinels by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .cells import Cell
from .interleave import interleaves

SENTINEL_SUFFIX = "-sentinel"


@dataclass(frozen=True)
class Family:
    baseline: str  # the baseline's engine group, e.g. "ar-tp1"
    members: tuple[str, ...]  # the groups compared with it, in first-appearance order
    first: Cell  # the baseline's first cell (its first shape): what the sentinel re-runs

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

    def sentinel_cell(self) -> Cell:
        """The baseline's first shape with one timed round (its warm-up as configured): the
        round's requests are those of the baseline's first timed round."""
        w = dataclasses.replace(self.first.workload, rounds=1, max_rounds=None)
        return dataclasses.replace(self.first, workload=w)


def families(
    cells: Iterable[Cell],
    baselines: Mapping[str, str | None],
    sentinel_backends: frozenset[str] | set[str],
    interleaving: frozenset[str] | set[str],
) -> list[Family]:
    """The families of ``cells`` (in order; the selected ones): a baseline method on one of
    ``sentinel_backends``, at one TP, with every group one of whose cells compares with a cell of
    the baseline at the same shape and TP, and does not interleave its rounds with it (on
    ``interleaving``: the backends whose engines share a process, empty with
    --specbench-no-interleave). A baseline without such a group has no family."""
    cells = list(cells)
    by_name = {c.method.name: c.method for c in cells}
    shapes = {(c.request_key, c.tp, c.method.name) for c in cells}
    first: dict[str, Cell] = {}  # baseline group -> its first cell
    members: dict[str, dict[str, None]] = {}
    for c in cells:
        first.setdefault(c.group.id, c)
    for c in cells:
        name = baselines.get(c.method.name)
        base = by_name.get(name) if name else None
        if base is None or base.name == c.method.name or base.backend not in sentinel_backends:
            continue
        if interleaves(c, base, interleaving) or (c.request_key, c.tp, base.name) not in shapes:
            continue
        members.setdefault(f"{base.name}-tp{c.tp}", {})[c.group.id] = None
    return [Family(b, tuple(m), first[b]) for b, m in members.items()]


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
