"""Comparisons between any two methods of a shape, beside the comparisons with the baseline: the
pairs the matrix names (``compare: [[ddtree, dflash]]``, kept in the JSON's ``specbench.compare``)
and, with ``python -m pytest_specbench.report RUN.json --versus METHOD`` (``specbench.versus``,
set on read), every method of each shape against METHOD. Each line is decide.compare's paired
comparison (the same requests, rounds, margin and withholding rules as the speedup over the
baseline), A over B. A swept method's YAML name stands for its best setting at the shape (the
decision view's order); a forced family (``eagle3`` for ``eagle3-a1`` ...) is compared with
another forced family only, at each forced accept length both ran: which verify step costs less,
not which drafter is better. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from .decide import _natural, _shape_label, compare, fmt_speedup, rank_closed_loop
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


def references(doc: dict[str, Any], name: str) -> list[str]:
    """What ``name`` is compared with: the other method of every ``compare`` pair naming it, and
    the ``--versus`` method (the tuning view puts a sweep's best setting against each)."""
    spec = doc.get("specbench") or {}
    out = [str(b if a == name else a) for a, b in spec.get("compare") or [] if name in (a, b)]
    ref = spec.get("versus")
    if ref and ref != name and ref not in out:
        out.append(str(ref))
    return out


def _figure(b: Entry) -> str:
    e = b["extra_info"]
    if e.get("offered_request_rate"):
        return f"{b['params']['method']} p50 {e.get('latency_s_p50') or 0:.3f} s"
    return f"{b['params']['method']} {e['output_tokens_per_s']:.1f} tok/s"


def comparisons(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape (natural order) and pair: the comparison fields (speedup_vs_ar: A over B, its
    interval and verdict), the two cells, the shape's label and the forced length (None: real)."""
    out = []
    shapes = _shapes(doc)
    for key in sorted(shapes, key=lambda k: _natural(("-", *k))):
        cells = shapes[key]
        for a, b in pairs(doc):
            sa, sb = side(a, cells), side(b, cells)
            both = [x for x in sa if x in sb] if None not in sa and None not in sb else [None]
            for length in sorted(both, key=lambda x: -1.0 if x is None else x):
                ca, cb = sa.get(length), sb.get(length)
                if ca is None or cb is None or ca is cb:
                    continue
                if ca["extra_info"].get("speedup_baseline") != cb["extra_info"].get("speedup_baseline"):
                    continue  # two target models: no comparison, as none with another model's AR
                c = compare(ca, cb)
                if (
                    _across_runs(ca, cb)
                    and "speedup_verdict" in c
                    and c.get("speedup_pairing") != "interleaved"
                ):
                    c["speedup_verdict"] += " (across runs)"
                out.append({"a": a, "b": b, "cells": (ca, cb), "shape": key, "forced": length, **c})
    return out


def _across_runs(a: Entry, b: Entry) -> bool:
    """Measured in two runs: two JSONs read together, or one of them resumed from another run."""
    ea, eb = a["extra_info"], b["extra_info"]
    return a.get("_run") != b.get("_run") or ea.get("resumed_from") != eb.get("resumed_from")


def lines(doc: dict[str, Any]) -> list[str]:
    """ "dflash vs eagle3 throughput tp1 c8 in512 out128: x1.12 [1.05, 1.20] faster (dflash 812.4
    tok/s; eagle3 725.1 tok/s)"; a swept side names its best setting, a forced pair its length."""
    out = []
    for c in comparisons(doc):
        ca, cb = c["cells"]
        label = _shape_label(dict(c["shape"]))
        if c["forced"] is not None:
            label += f" at forced accept {c['forced']:g} (a verify step's cost)"
        if c.get("speedup_vs_ar") is None:
            ratio = c.get("speedup_verdict") or "no comparison (no paired rounds)"
        else:
            ratio = fmt_speedup(c)
        out.append(f"{c['a']} vs {c['b']} {label}: {ratio} ({_figure(ca)}; {_figure(cb)})")
    return out


def section(doc: dict[str, Any]) -> list[str]:
    """The comparisons as Markdown (after the decision view); empty without pairs."""
    got = lines(doc)
    if not got:
        return []
    ref = (doc.get("specbench") or {}).get("versus")
    head = (
        "Comparisons between methods (A vs B: A over B over paired rounds, x with its 95% interval and "
        "the baseline comparison's verdict rules; a swept method: its best setting at the shape"
        + (f"; --versus {ref}: every method against it" if ref else "")
        + "):"
    )
    return ["", head, "", *(f"- {ln}" for ln in got)]


def plot_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``comparisons`` as plots.py rows: a panel per pair and shape without its concurrency, a line
    per forced length (or "measured"), x the concurrency, y A over B with its interval."""
    rows = []
    for c in comparisons(doc):
        if c.get("speedup_vs_ar") is None:
            continue
        d = dict(c["shape"])
        conc = d.pop("concurrency", "1")
        ci = c.get("speedup_vs_ar_ci95") or [None, None]
        rows.append(
            {
                "panel": f"{c['a']} vs {c['b']} {_shape_label(d)}",
                "series": "measured" if c["forced"] is None else f"forced a{c['forced']:g}",
                "x": int(float(conc)),
                "y": c["speedup_vs_ar"],
                "lo": ci[0],
                "hi": ci[1],
                "status": "ok",
            }
        )
    return rows
