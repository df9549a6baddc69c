"""What a method's name stands for among one shape's cells (its own cell, a sweep's best setting,
a forced family's lengths) and the pairs a run compares (the matrix's ``compare``, ``--versus``):
what report/versus.py prints and report/pooled.py pools, read from a results JSON. Pure: no
pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from .decide import rank_closed_loop
from .pareto import never_ranked

Entry = dict[str, Any]


def _shape(b: Entry) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in (b.get("params") or {}).items() if k != "method"))


def _shapes(doc: dict[str, Any]) -> dict[tuple[tuple[str, str], ...], list[Entry]]:
    out: dict[tuple[tuple[str, str], ...], list[Entry]] = {}
    for b in doc.get("benchmarks") or []:
        if (b.get("extra_info") or {}).get("output_tokens_per_s") and "method" in (b.get("params") or {}):
            out.setdefault(_shape(b), []).append(b)
    return out


def _best(entries: list[Entry]) -> Entry:
    """The fastest of a sweep's settings at one shape, as the decision view orders them."""
    rows = [{"method": b["params"]["method"], **b["extra_info"], "_entry": b} for b in entries]
    if any(r.get("offered_request_rate") for r in rows):
        rows.sort(key=lambda r: (bool(r.get("saturated")), r.get("latency_s_p50") or float("inf")))
    else:
        rank_closed_loop(rows)
    return rows[0]["_entry"]


def side(name: str, cells: list[Entry]) -> dict[float | None, Entry]:
    """What ``name`` stands for among one shape's cells: {None: cell} for a method (its own cell,
    or a sweep's best setting), {forced length: cell} for a forced family; {} when absent.
    Cells a race dropped are never a side."""
    real = [b for b in cells if not never_ranked(b["extra_info"])]
    own = [b for b in real if b["params"]["method"] == name]
    if own:
        return {None: own[0]}
    settings = [b for b in real if b["extra_info"].get("sweep") == name]
    if settings:
        return {None: _best(settings)}
    return {
        float(b["extra_info"]["accept_forced"]): b
        for b in cells
        if b["extra_info"].get("accept_forced") is not None
        and b["extra_info"].get("forced_family") == name
        and (b["extra_info"].get("race") or {}).get("status") != "dropped"
    }


def pairs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The matrix's ``compare`` pairs, then with ``versus`` every other method (and forced
    family) of the run against it."""
    spec = doc.get("specbench") or {}
    out = [(str(a), str(b)) for a, b in spec.get("compare") or []]
    ref = spec.get("versus")
    if ref:
        names: list[str] = []
        for b in doc.get("benchmarks") or []:
            e = b.get("extra_info") or {}
            n = e.get("forced_family") if e.get("accept_forced") is not None else b["params"].get("method")
            if n and n != ref and n not in names:
                names.append(str(n))
        out += [(n, str(ref)) for n in names if (n, ref) not in out]
    return out
