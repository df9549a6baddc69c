"""Splitting a matrix's selected cells over N machines (``--specbench-shard I/N``).

The unit is a *family*: one cell shape (workload, concurrency, context, output, rate...) of a
baseline method at one TP size, with the same shape of every method compared with it there
(``Matrix.baselines``), so a speedup's two sides are always measured on one host. Families go to
shards longest first, each to the shard where it adds the least planned time (its cells, plus the
start of each engine group not yet on that shard), so the shapes of a group gather on one shard
unless balance needs them apart; ties go to the lower index and the order is fixed by the family's
key, so every machine that plans the same cells with the same weights computes the same split, and
``split_digest`` lets a merge check that they did. Pure: no pytest, no engines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .cells import Cell

ENV_HELP = (
    "A shard comes from --specbench-shard I/N (0 <= I < N), or from the scheduler's variables: "
    "Kubernetes' JOB_COMPLETION_INDEX with SPECBENCH_SHARDS=N, SLURM's SLURM_ARRAY_TASK_ID with "
    "SLURM_ARRAY_TASK_COUNT (and _MIN, _MAX: the task's position among the array's ids)"
)


class ShardError(ValueError):
    pass


@dataclass(frozen=True)
class Shard:
    index: int  # 0-based
    count: int
    source: str  # where it came from: the option, or the scheduler's variables

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str, source: str = "--specbench-shard") -> Shard:
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ShardError(f"{source} {text!r}: expected I/N, e.g. 0/3 (0 <= I < N)") from None
    if n < 1 or not 0 <= i < n:
        hint = f"; the last of {n} is {n - 1}/{n}" if n >= 1 and i == n else ""
        raise ShardError(
            f"{source} {text!r}: I must be in 0..N-1 and N >= 1 (shards are numbered from 0{hint})"
        )
    return Shard(i, n, source)


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(str(env[key]).strip())
    except ValueError:
        raise ShardError(f"{key}={env[key]!r}: expected a whole number") from None


def slurm_index(env: Mapping[str, str]) -> Shard:
    """The shard of a SLURM array task: its position among the array's task ids. SLURM gives
    SLURM_ARRAY_TASK_ID and the array's SLURM_ARRAY_TASK_MIN, _MAX and _COUNT (its _STEP is the
    number after ':' in --array, which a list such as 1,5,9 does not have), so the ids are known
    when they are evenly spaced: MIN, MIN + s, ..., MAX with s = (MAX - MIN) / (COUNT - 1). That
    covers --array=0-2, 1-3, 0-4:2 and 1,5,9; other lists are refused (give --specbench-shard)."""
    task, count = _int(env, "SLURM_ARRAY_TASK_ID"), _int(env, "SLURM_ARRAY_TASK_COUNT")
    low = _int(env, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in env else 0
    if "SLURM_ARRAY_TASK_MAX" in env:
        high = _int(env, "SLURM_ARRAY_TASK_MAX")
    else:
        step = _int(env, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in env else 1
        high = low + step * (count - 1)
    where = f"SLURM array task {task} (ids {low}..{high}, {count} tasks)"
    if count < 1 or not low <= task <= high:
        raise ShardError(f"{where}: the task id is not in the array")
    if count == 1:
        return Shard(0, 1, "SLURM_ARRAY_TASK_ID")
    stride, rest = divmod(high - low, count - 1)
    if stride < 1 or rest or (task - low) % stride:
        raise ShardError(
            f"{where}: the array's ids are not evenly spaced, so this task's shard is not known from "
            "SLURM's variables; use --array=0-N-1 (or a range with a step), or give --specbench-shard I/N"
        )
    return Shard((task - low) // stride, count, "SLURM_ARRAY_TASK_ID")


def from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard a scheduler's task is: Kubernetes Indexed Jobs set JOB_COMPLETION_INDEX (the count
    comes from SPECBENCH_SHARDS, set in the manifest); SLURM arrays set SLURM_ARRAY_TASK_ID and
    SLURM_ARRAY_TASK_COUNT (the task's position among the array's ids: ``slurm_index``)."""
    if "JOB_COMPLETION_INDEX" in env:
        if "SPECBENCH_SHARDS" not in env:
            raise ShardError(
                "JOB_COMPLETION_INDEX is set but SPECBENCH_SHARDS (the Job's completions) is not: set it "
                "in the manifest's env, or give --specbench-shard I/N"
            )
        return parse(f"{env['JOB_COMPLETION_INDEX']}/{env['SPECBENCH_SHARDS']}", "JOB_COMPLETION_INDEX")
    if "SLURM_ARRAY_TASK_ID" in env:
        if "SLURM_ARRAY_TASK_COUNT" not in env:
            raise ShardError(
                "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT (the array's number of tasks) "
                "is not: give --specbench-shard I/N"
            )
        return slurm_index(env)
    return None


def family_of(cell: Cell, baselines: Mapping[str, str | None]) -> str:
    """The family a cell belongs to: its baseline method (or its own, without one) at its TP, at
    its cell shape."""
    shape = "-".join(str(x) for x in cell.request_key[:4]) + "".join(
        f"-{k}={v}" for k, v in cell.request_key[4]
    )
    return f"{baselines.get(cell.method.name) or cell.method.name}-tp{cell.tp}/{shape}"


@dataclass(frozen=True)
class Split:
    count: int
    families: dict[str, int]  # family -> shard index
    load_s: tuple[float, ...]  # planned seconds per shard
    groups: tuple[tuple[str, ...], ...]  # engine groups per shard, in first-appearance order
    widest_tp: tuple[int, ...] = ()  # GPUs a shard's host needs: its widest TP (0: no cells)
    one_host_s: float = 0.0  # the same cells on one host: every engine group started once
    cells: tuple[str, ...] = ()  # the ids of the cells split (what -k / -m selected), sorted
    by_shard: tuple[tuple[str, ...], ...] = ()  # per shard, the ids of its cells, sorted

    def shard_of(self, cell: Cell, baselines: Mapping[str, str | None]) -> int:
        return self.families[family_of(cell, baselines)]

    @property
    def digest(self) -> str:
        """The same on every machine that split the same cells (the same -k) the same way."""
        doc = json.dumps(
            {"count": self.count, "families": sorted(self.families.items()), "cells": self.cells}
        )
        return hashlib.sha256(doc.encode()).hexdigest()[:16]

    @property
    def makespan_s(self) -> float:
        return max(self.load_s) if self.load_s else 0.0


def split(
    cells: list[Cell],
    baselines: Mapping[str, str | None],
    count: int,
    cell_s: Callable[[Cell], float | None],
    start_s: Callable[[str], float],
) -> Split:
    """Families of ``cells`` over ``count`` shards, balanced by planned seconds: each cell's
    ``cell_s`` (None: the mean of the known ones, else 1) plus, on each shard, the ``start_s`` of
    every engine group the shard's cells need."""
    eta = {c.id: cell_s(c) for c in cells}
    known = [s for s in eta.values() if s is not None]
    fill = sum(known) / len(known) if known else 1.0
    fam: dict[str, list[Cell]] = {}
    for c in cells:
        fam.setdefault(family_of(c, baselines), []).append(c)
    work = {k: sum(s if (s := eta[c.id]) is not None else fill for c in cs) for k, cs in fam.items()}
    needs = {k: list(dict.fromkeys(c.group.id for c in cs)) for k, cs in fam.items()}
    starts = {g: start_s(g) for gs in needs.values() for g in gs}
    load = [0.0] * count
    started: list[set[str]] = [set() for _ in range(count)]
    where: dict[str, int] = {}
    order = sorted(fam, key=lambda k: (-round(work[k] + sum(starts[g] for g in needs[k]), 6), k))
    for k in order:  # longest first, each where it ends earliest (new starts counted)

        def after(j: int, k: str = k) -> float:
            return load[j] + work[k] + sum(starts[g] for g in needs[k] if g not in started[j])

        i = min(range(count), key=lambda j: (round(after(j), 6), j))
        load[i] = after(i)
        started[i].update(needs[k])
        where[k] = i
    groups: list[list[str]] = [[] for _ in range(count)]
    widest = [0] * count
    for k, cs in fam.items():
        i = where[k]
        widest[i] = max([widest[i], *(c.tp for c in cs)])
        groups[i] += [g for g in needs[k] if g not in groups[i]]
    one_host = sum(work.values()) + sum(starts.values())
    by_shard: list[list[str]] = [[] for _ in range(count)]
    for c in cells:
        by_shard[where[family_of(c, baselines)]].append(c.id)
    return Split(
        count,
        where,
        tuple(load),
        tuple(tuple(g) for g in groups),
        tuple(widest),
        one_host,
        tuple(sorted(c.id for c in cells)),
        tuple(tuple(sorted(ids)) for ids in by_shard),
    )


def matrix_digest(cells: list[Cell]) -> str:
    """The matrix as shards must share it: every cell's id and definition (fingerprint)."""
    doc = json.dumps(sorted((c.id, c.fingerprint()) for c in cells))
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def describe(split_: Split, shard: Shard | None = None) -> list[str]:
    """The plan's lines for a split: each shard's engine groups and planned time, and the makespan."""
    lines = []
    for i, (gs, s) in enumerate(zip(split_.groups, split_.load_s, strict=True)):
        mark = "  <- this shard" if shard is not None and shard.index == i else ""
        lines.append(
            f"shard {i}/{split_.count}: {s / 60:.1f} min, widest TP {split_.widest_tp[i]} (its host's GPUs), "
            f"{len(gs)} engine groups ({', '.join(gs)}){mark}"
        )
    total = split_.one_host_s or sum(split_.load_s)
    lines.append(
        f"shards: makespan {split_.makespan_s / 60:.1f} min on {split_.count} hosts (one host: "
        f"{total / 60:.1f} min); each family (one cell shape of a baseline and of the methods compared "
        f"with it, at one TP) stays on one host; split {split_.digest}"
    )
    return lines


def as_dict(split_: Split, shard: Shard, cells: list[Cell]) -> dict[str, Any]:
    return {
        "index": shard.index,
        "count": shard.count,
        "source": shard.source,
        "split_digest": split_.digest,
        "matrix_digest": matrix_digest(cells),
        "families": sorted(k for k, i in split_.families.items() if i == shard.index),
        "planned_s": round(split_.load_s[shard.index], 1),
        # the whole split, so that a merge can name every cell of a shard that never arrived
        "split_cells": [list(ids) for ids in split_.by_shard],
    }
