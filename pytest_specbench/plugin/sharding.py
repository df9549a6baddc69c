"""``--specbench-shard I/N``: this machine runs one shard of the selected cells (matrix/shards.py),
the rest are deselected; the JSON says which shard, split and matrix, for ``report merge``.

Under xdist the controller collects nothing: each worker splits what it collected (after -k, -m
and the files given, the same on every worker) and sends the split to the controller, on its first
report (``SPLIT_PROP``) and in its ``workeroutput`` at the end (a shard with nothing to run has no
report), so the JSON's split is the one the workers ran, never a guess."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from ..engines import get_backend
from ..matrix import shards
from .state import SPLIT_PROP, SpecbenchState


def setup(config: pytest.Config, st: SpecbenchState) -> None:
    """Which shard this is: the option, else the scheduler's variables (checked before anything
    starts)."""
    text = config.getoption("specbench_shard", None)
    count = config.getoption("specbench_shards", None)
    try:
        shard = shards.parse(text) if text else shards.from_env(os.environ)
    except shards.ShardError as e:
        raise pytest.UsageError(f"{e}. {shards.ENV_HELP}") from None
    if count is not None and count < 1:
        raise pytest.UsageError(f"--specbench-shards {count}: give the number of shards, >= 1")
    if count is not None and shard is not None and count != shard.count:
        raise pytest.UsageError(
            f"--specbench-shards {count} and shard {shard} ({shard.source}) disagree on the number of shards"
        )
    st.shard = shard
    st.shard_count = shard.count if shard is not None else count


def _split(st: SpecbenchState, cells: list[Any]) -> shards.Split:
    from ..deciding import families
    from ..planning import schedule
    from . import sentinel
    from .gpu_pool import reserved_gpus
    from .planned import machine_warm_s, planned_seconds
    from .skip_reasons import skip_reason
    from .xdist_sched import workers

    plan = st.get_plan()
    groups = {c.group.id: c.group for c in cells}

    def cell_s(c: Any) -> float | None:
        cp = plan.cells.get(c.id)
        return cp.eta_s if cp is not None else None

    def start_s(g: str) -> float:  # as the packed schedule reads it, with its fallback by backend
        return planned_seconds(plan, groups[g], []).start_s

    def runs(c: Any) -> bool:  # a skipped cell costs nothing and starts no engine
        return not skip_reason(st.config, st, c)

    pool = tuple(st.gpus or ())
    k = st.plan_workers or workers(st.config)
    k = k if k > 1 else len(pool)
    fams = sentinel.families_of(st.config, st, cells)  # drift families: back to back, as the run packs them

    warm_of: dict[str, float] = {}

    def warm_s(g: str) -> float:  # the machine's warm-up pass, where it is its GPU set's first
        if g not in warm_of:
            warm_of[g] = machine_warm_s(plan, [c for c in cells if c.group.id == g and runs(c)])
        return warm_of[g]

    def host_s(load: dict[str, float]) -> float:
        """The makespan of these groups packed on one host with this machine's GPUs and workers,
        each drift family's groups back to back with its sentinel, as the run's schedule has them."""
        jobs = []
        for g, secs in load.items():
            grp = groups[g]
            p = planned_seconds(plan, grp, [])
            gpus = grp.tp if get_backend(grp.method.backend).gpu else 0
            warm = warm_s(g)
            jobs.append(
                schedule.Job(
                    g, gpus, p.start_s + secs, grp.tp, grp.method.backend, p.first_start_extra_s, warm_s=warm
                )
            )
        jobs = families.merge_jobs(fams, jobs, plan, planned_seconds).jobs
        if not jobs:
            return 0.0
        reserved = reserved_gpus(st)  # a hooked GPU's starts last, as the run's schedule has them
        return schedule.pack(
            schedule.hooked_last(schedule.longest_first(jobs), pool, reserved), pool, k, reserved
        ).makespan_s

    assert st.matrix is not None and st.shard_count
    baselines = st.matrix.baselines()
    split = shards.split(
        cells,
        baselines,
        int(st.shard_count),
        cell_s,
        start_s,
        runs,
        host_s if pool and k > 1 else None,
        len(pool),
    )
    # each shard's own drift sentinels: every shard holding a family's baseline and members
    parts: list[list[Any]] = [[] for _ in range(split.count)]
    for c in cells:
        if runs(c):
            parts[split.shard_of(c, baselines)].append(c)
    return dataclasses.replace(split, sentinels=sentinel.shard_sentinels(st.config, st, parts))


def deselect(config: pytest.Config, st: SpecbenchState, items: list[pytest.Item]) -> None:
    """Split what -k / -m selected (the items, as pytest matched them) and leave this shard's
    cells; the others are deselected (pytest counts them as such)."""
    if not st.shard_count or st.matrix is None:
        return
    cells = {id(i): st.cell_of(i.nodeid) for i in items}
    st.shard_split = _split(st, [c for c in cells.values() if c is not None])
    if st.shard is None:
        return
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # for the controller (it collects nothing under -n)
        workeroutput[SPLIT_PROP] = shards.as_dict(st.shard_split, st.shard, st.matrix.cells())
    baselines = st.matrix.baselines()
    here = st.shard.index
    drop = [
        i for i in items if (c := cells[id(i)]) is not None and st.shard_split.shard_of(c, baselines) != here
    ]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


def status_line(st: SpecbenchState, kept: int) -> str | None:
    """What the terminal says of this shard after collection."""
    if st.shard is None or st.shard_split is None:
        return None
    split = st.shard_split
    if split.by_shard:  # its cells, not its items (a drift sentinel is an item, not a cell)
        kept = len(split.by_shard[st.shard.index])
    line = (
        f"specbench: shard {st.shard} (from {st.shard.source}): {kept} of the {len(split.cells)} selected "
        f"cells, planned {split.load_s[st.shard.index] / 60:.1f} min; split {split.digest}"
    )
    if not kept:
        line += "; nothing to run here: the split gave every family of this selection to other shards"
    return line


def empty_shard(st: SpecbenchState) -> bool:
    """This shard has no cells of a selection that has some: a success, not 'no tests'."""
    if st.shard is None:
        return False
    if st.shard_split is not None:
        return bool(st.shard_split.cells) and not any(
            i == st.shard.index for i in st.shard_split.families.values()
        )
    split = (st.shard_doc or {}).get("split_cells")  # under -n, as the workers split it
    return bool(split) and any(split) and not split[st.shard.index]


def worker_props(st: SpecbenchState) -> list[tuple[str, Any]]:
    """On an xdist worker, once: its split, for the controller (on the report being made)."""
    if not hasattr(st.config, "workerinput") or st.shard_doc is not None:
        return []
    if st.shard is None or st.shard_split is None or st.matrix is None:
        return []
    st.shard_doc = shards.as_dict(st.shard_split, st.shard, st.matrix.cells())
    return [(SPLIT_PROP, st.shard_doc)]


def receive(st: SpecbenchState, split: dict[str, Any]) -> None:
    """The controller under -n: a worker's split (every worker collected the same items, so the
    first is the split)."""
    if st.shard_doc is None and isinstance(split, dict):
        st.shard_doc = split


def doc(st: SpecbenchState) -> dict[str, Any] | None:
    if st.shard is None or st.matrix is None:
        return None
    if st.shard_split is not None:
        return shards.as_dict(st.shard_split, st.shard, st.matrix.cells())
    if st.shard_doc is not None:  # xdist's controller collects nothing: the workers' split
        return dict(st.shard_doc)
    # under -n before any worker reported (or none did): the shard, and no split to check against
    return {
        "index": st.shard.index,
        "count": st.shard.count,
        "source": st.shard.source,
        "split_digest": None,
        "matrix_digest": shards.matrix_digest(st.matrix.cells()),
        "families": None,
        "planned_s": None,
        "split_cells": None,
    }


def matrix_digest(st: SpecbenchState) -> str | None:
    """Every cell id of the matrix with its definition, for ``report merge`` to tell two runs of
    different matrices apart (sharded or not)."""
    return shards.matrix_digest(st.matrix.cells()) if st.matrix is not None else None


def plan_lines(st: SpecbenchState) -> list[str]:
    if st.shard_split is None:
        return []
    lines = shards.describe(st.shard_split, st.shard)
    idle = [i for i, gs in enumerate(st.shard_split.groups) if not gs]
    if idle:
        lines.append(
            f"warning: {len(idle)} of {st.shard_split.count} shards get no cells (more shards than "
            "families of this selection); they run nothing and write an empty JSON"
        )
    return lines
