"""Which cells run their baseline interleaved with them (docs/metrics.md "Interleaved baseline"):
the rule the plugin starts baseline instances by and the planner counts their rounds by."""

from __future__ import annotations

from .cells import Cell, Method


def interleaves(cell: Cell, base: Method | None, backends: frozenset[str] | set[str]) -> bool:
    """Whether ``base`` (the cell's baseline method) runs interleaved with ``cell``: another
    method, that runs this workload, both on ``backends`` (those whose engines share a process)."""
    w = cell.workload
    return (
        base is not None
        and base.name != cell.method.name
        and not (w.methods and base.name not in w.methods)
        and cell.method.backend in backends
        and base.backend in backends
    )


def interleaved_baselines(
    cells: list[Cell], baselines: dict[str, str | None], backends: frozenset[str] | set[str]
) -> dict[str, str]:
    """Cell id -> the id of its baseline's cell of the same shape and TP, for the cells whose
    baseline runs interleaved with them (``interleaves``)."""
    ids = {(c.request_key, c.tp, c.method.name): c.id for c in cells}
    by_name = {c.method.name: c.method for c in cells}
    out = {}
    for c in cells:
        name = baselines.get(c.method.name)
        base = by_name.get(name) if name else None
        if base is not None and interleaves(c, base, backends) and (c.request_key, c.tp, base.name) in ids:
            out[c.id] = ids[(c.request_key, c.tp, base.name)]
    return out
