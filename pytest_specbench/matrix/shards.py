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
    packed_on: int = 0  # GPUs per host the loads are packed on (0: each shard's groups serial)
    # per shard, its drift sentinels' item ids: every shard that holds a family's baseline and
    # members re-runs one of its own shapes (deciding/families.py by_part); not in the digest
    sentinels: tuple[tuple[str, ...], ...] = ()

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
    runs: Callable[[Cell], bool] | None = None,
    host_s: Callable[[dict[str, float]], float] | None = None,
    host_gpus: int = 0,
) -> Split:
    """Families of ``cells`` over ``count`` shards, balanced by planned seconds: each cell's
    ``cell_s`` (None: the mean of the known ones, else 1) plus, on each shard, the ``start_s`` of
    every engine group the shard's cells need. A cell that does not run (``runs`` False: skipped)
    costs nothing and needs no engine. With ``host_s`` (a shard's engine groups -> their seconds
    of cells, to the makespan of those groups packed on one host's GPUs, starts included) a
    shard's load is that makespan, and a split slower than one host packed is not taken: every
    family then goes to shard 0."""
    live = runs or (lambda c: True)
    eta = {c.id: cell_s(c) if live(c) else 0.0 for c in cells}
    known = [s for c in cells if live(c) and (s := eta[c.id]) is not None]
    fill = sum(known) / len(known) if known else 1.0
    fam: dict[str, list[Cell]] = {}
    for c in cells:
        fam.setdefault(family_of(c, baselines), []).append(c)
    work = {k: sum(s if (s := eta[c.id]) is not None else fill for c in cs) for k, cs in fam.items()}
    needs = {k: list(dict.fromkeys(c.group.id for c in cs if live(c))) for k, cs in fam.items()}
    starts = {g: start_s(g) for gs in needs.values() for g in gs}
    per_group = {
        k: {
            g: sum(s if (s := eta[c.id]) is not None else fill for c in cs if c.group.id == g)
            for g in needs[k]
        }
        for k, cs in fam.items()
    }
    load = [0.0] * count
    serial = [0.0] * count
    started: list[set[str]] = [set() for _ in range(count)]
    on: list[dict[str, float]] = [{} for _ in range(count)]
    where: dict[str, int] = {}
    order = sorted(fam, key=lambda k: (-round(work[k] + sum(starts[g] for g in needs[k]), 6), k))

    def merged(j: int, k: str) -> dict[str, float]:
        out = dict(on[j])
        for g, s in per_group[k].items():
            out[g] = out.get(g, 0.0) + s
        return out

    for k in order:  # longest first, each where it ends earliest (new starts counted)

        def after(j: int, k: str = k) -> float:
            return serial[j] + work[k] + sum(starts[g] for g in needs[k] if g not in started[j])

        if host_s is not None:
            packed = {j: host_s(merged(j, k)) for j in range(count)}
            i = min(range(count), key=lambda j: (round(packed[j], 6), round(after(j), 6), j))
            load[i] = packed[i]
        else:
            i = min(range(count), key=lambda j: (round(after(j), 6), j))
            load[i] = after(i)
        serial[i] = after(i)
        on[i] = merged(i, k)
        started[i].update(needs[k])
        where[k] = i
    if host_s is not None:
        one_host = host_s({g: sum(d.get(g, 0.0) for d in per_group.values()) for g in starts})
        if max(load, default=0.0) > one_host:  # the split would be slower than one packed host
            where = dict.fromkeys(fam, 0)
            load = [one_host] + [0.0] * (count - 1)
    else:
        one_host = sum(work.values()) + sum(starts.values())
    groups: list[list[str]] = [[] for _ in range(count)]
    widest = [0] * count
    for k, cs in fam.items():
        i = where[k]
        widest[i] = max([widest[i], *(c.tp for c in cs if live(c))])
        groups[i] += [g for g in needs[k] if g not in groups[i]]
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
        host_gpus if host_s is not None else 0,
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
        sent = split_.sentinels[i] if split_.sentinels else ()
        said = f", drift sentinels {', '.join(sent)}" if sent else ""
        lines.append(
            f"shard {i}/{split_.count}: {s / 60:.1f} min, widest TP {split_.widest_tp[i]} (its host's GPUs), "
            f"{len(gs)} engine groups ({', '.join(gs)}){said}{mark}"
        )
    total = split_.one_host_s or sum(split_.load_s)
    how = (
        f"packed on {split_.packed_on} GPUs each"
        if split_.packed_on
        else "each shard's groups one after another"
    )
    lines.append(
        f"shards: makespan {split_.makespan_s / 60:.1f} min on {split_.count} hosts, {how} (one host: "
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
        # this shard's drift sentinels, so that a merge can name one that never arrived
        "sentinels": list(split_.sentinels[shard.index]) if split_.sentinels else [],
    }
