"""``--specbench-shard I/N``: this machine runs one shard of the selected cells (matrix/shards.py),
the rest are deselected; the JSON says which shard, split and matrix, for ``report merge``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..matrix import shards
from .state import SpecbenchState


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
    from .xdist_sched import planned_seconds

    plan = st.get_plan()
    groups = {c.group.id: c.group for c in cells}

    def cell_s(c: Any) -> float | None:
        cp = plan.cells.get(c.id)
        return cp.eta_s if cp is not None else None

    def start_s(g: str) -> float:  # as the packed schedule reads it, with its fallback by backend
        return planned_seconds(plan, groups[g], []).start_s

    assert st.matrix is not None and st.shard_count
    return shards.split(cells, st.matrix.baselines(), int(st.shard_count), cell_s, start_s)


def deselect(config: pytest.Config, st: SpecbenchState, items: list[pytest.Item]) -> None:
    """Split what -k / -m selected (the items, as pytest matched them) and leave this shard's
    cells; the others are deselected (pytest counts them as such)."""
    if not st.shard_count or st.matrix is None:
        return
    cells = {id(i): st.cell_of(i.nodeid) for i in items}
    st.shard_split = _split(st, [c for c in cells.values() if c is not None])
    if st.shard is None:
        return
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
    line = (
        f"specbench: shard {st.shard} (from {st.shard.source}): {kept} of the {len(split.cells)} selected "
        f"cells, planned {split.load_s[st.shard.index] / 60:.1f} min; split {split.digest}"
    )
    if not kept:
        line += "; nothing to run here: the split gave every family of this selection to other shards"
    return line


def empty_shard(st: SpecbenchState) -> bool:
    """This shard has no cells of a selection that has some: a success, not 'no tests'."""
    return (
        st.shard is not None
        and st.shard_split is not None
        and bool(st.shard_split.cells)
        and not any(i == st.shard.index for i in st.shard_split.families.values())
    )


def doc(st: SpecbenchState) -> dict[str, Any] | None:
    if st.shard is None or st.matrix is None:
        return None
    if st.shard_split is None:  # xdist's controller collects nothing: the split from -k as matched here
        from .selection import k_filter

        st.shard_split = _split(st, k_filter(st.config.getoption("keyword") or "", st.matrix.cells()))
    return shards.as_dict(st.shard_split, st.shard, st.matrix.cells())


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
