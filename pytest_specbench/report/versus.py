"""Comparisons between any two methods of a shape, beside the comparisons with the baseline: the
pairs the matrix names (``compare: [[ddtree, dflash]]``, kept in the JSON's ``specbench.compare``)
and, with ``python -m pytest_specbench.report RUN.json --versus METHOD`` (``specbench.versus``,
set on read), every method of each shape against METHOD. Each line is decide.compare's paired
comparison (the same requests, rounds, margin and withholding rules as the speedup over the
baseline), A over B. A swept A of a ``compare`` pair is the one setting its pooled figure uses
(report/pooled.py) at every shape; a swept B, and a sweep --versus names, stands for its best
setting at the shape (the decision view's order); a forced family (``eagle3`` for ``eagle3-a1``
...) is compared with another forced family only, at each forced accept length both ran: which
verify step costs less, not which drafter is better. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from .decide import _natural, _shape_label, compare, fmt_speedup
from .sides import Entry, _shapes, pairs, side


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
    interval and verdict), the two cells, the shape's label and the forced length (None: real).
    A swept A of a ``compare`` pair is the setting its pooled figure uses (report/pooled.py), at
    every shape, and ``a`` names it: the lines multiply out to the pooled figure, and none is a
    best of K read as one comparison. A swept B is its best setting at the shape, as in the
    pooled figure (the reference being beaten)."""
    from .pooled import chosen

    out = []
    shapes = _shapes(doc)
    settings = chosen(doc)  # a swept A: the one setting its pooled figure uses, at every shape
    for key in sorted(shapes, key=lambda k: _natural(("-", *k))):
        cells = shapes[key]
        for a, b in pairs(doc):
            sa, sb = side(settings.get((a, b), a), cells), side(b, cells)
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
                name = settings.get((a, b), a)
                out.append({"a": name, "b": b, "cells": (ca, cb), "shape": key, "forced": length, **c})
    return out


def _across_runs(a: Entry, b: Entry) -> bool:
    """Measured in two runs: two JSONs read together, or one of them resumed from another run."""
    ea, eb = a["extra_info"], b["extra_info"]
    return a.get("_run") != b.get("_run") or ea.get("resumed_from") != eb.get("resumed_from")


def lines(doc: dict[str, Any]) -> list[str]:
    """ "dflash vs eagle3 throughput tp1 c8 in512 out128: x1.12 [1.05, 1.20] faster (dflash 812.4
    tok/s; eagle3 725.1 tok/s)"; a swept A is named by the setting of its pooled line, a swept B's
    best setting at the shape is in its figure, a forced pair says its length."""
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
    """The comparisons as Markdown (after the decision view), each ``compare`` pair's pooled line
    (report/pooled.py, the screen's first) before its shapes; empty without pairs."""
    from .pooled import screen_lines

    got = lines(doc)
    if not got:
        return []
    got = [f"pooled: {ln}" for ln in screen_lines(doc)] + got
    ref = (doc.get("specbench") or {}).get("versus")
    head = (
        "Comparisons between methods (A vs B: A over B over paired rounds, x with its 95% interval and "
        "the baseline comparison's verdict rules; a swept A: the setting of its pooled line at every "
        "shape; a swept B: its best setting at the shape"
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
