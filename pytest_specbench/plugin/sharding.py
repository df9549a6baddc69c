"""``--specbench-shard I/N``: this machine runs one shard of the selected cells (matrix/shards.py),
the rest are deselected; the JSON says which shard, split and matrix, for ``report merge``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..matrix import shards
from .state import SpecbenchState


def setup(config: pytest.Config, st: SpecbenchState) -> None:
    """Which shard this is (option, else the scheduler's variables) and the split, computed the
    same way in every process (xdist's controller collects nothing itself)."""
    text = config.getoption("specbench_shard", None)
    count = config.getoption("specbench_shards", None)
    try:
        shard = shards.parse(text) if text else shards.from_env(os.environ)
    except shards.ShardError as e:
        raise pytest.UsageError(f"{e}; give {shards.ENV_HELP}") from None
    if count is not None and count < 1:
        raise pytest.UsageError(f"--specbench-shards {count}: give the number of shards, >= 1")
    if count is not None and shard is not None and count != shard.count:
        raise pytest.UsageError(
            f"--specbench-shards {count} and shard {shard} ({shard.source}) disagree on the number of shards"
        )
    if st.matrix is None or (shard is None and count is None):
        return
    from .selection import k_filter

    cells = k_filter(config.getoption("keyword") or "", st.matrix.cells())
    plan = st.get_plan()

    def cell_s(c: Any) -> float | None:
        cp = plan.cells.get(c.id)
        return cp.eta_s if cp is not None else None

    def start_s(g: str) -> float:
        gp = plan.groups.get(g)
        s = getattr(gp, "start_s", None)
        return float(s) if isinstance(s, (int, float)) else 60.0

    st.shard = shard
    st.shard_split = shards.split(
        cells, st.matrix.baselines(), shard.count if shard else int(count or 1), cell_s, start_s
    )


def deselect(config: pytest.Config, st: SpecbenchState, items: list[pytest.Item]) -> None:
    """Leave this shard's cells; the others are deselected (pytest counts them as such)."""
    if st.shard is None or st.shard_split is None or st.matrix is None:
        return
    baselines = st.matrix.baselines()
    drop = []
    for item in items:
        cell = st.cell_of(item.nodeid)
        fam = shards.family_of(cell, baselines) if cell is not None else None
        if fam is not None and st.shard_split.families.get(fam) != st.shard.index:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


def doc(st: SpecbenchState) -> dict[str, Any] | None:
    if st.shard is None or st.shard_split is None or st.matrix is None:
        return None
    return shards.as_dict(st.shard_split, st.shard, st.matrix.cells())


def plan_lines(st: SpecbenchState) -> list[str]:
    return shards.describe(st.shard_split, st.shard) if st.shard_split is not None else []
