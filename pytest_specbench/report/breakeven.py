"""Break-even accept length: from cells with a forced accept length (``accept_forced``), the
accept length at which a speculative method's speedup over its baseline crosses 1, per shape.

A forced cell measures what a verify step costs at that shape (batch, context, TP, output
length), whatever a real drafter would accept. Along the forced points of one method family and
shape, sorted by accept length, the break-even is where the speedup crosses 1, linearly
interpolated between the two points around the crossing; its interval is where the speedup
intervals' upper and lower bounds cross 1 (the upper bound crosses first: the lowest break-even
the run supports). A family whose every point is above 1 breaks even "below the forced range",
one whose every point is below 1 "above the forced range". A real (unforced) speculative cell of
the same shape is then read against it: its measured accept length against the break-even.
Pure: no pytest, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def crossing(points: Sequence[tuple[float, float]]) -> tuple[str, float | None]:
    """Where y crosses 1 along (x, y) points sorted by x: ("at", x*) interpolated between the
    first pair with y < 1 <= y', ("below", None) when every y >= 1, ("above", None) when every
    y < 1, ("none", None) without points."""
    pts = sorted(points)
    if not pts:
        return "none", None
    if all(y >= 1 for _, y in pts):
        return "below", None
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if y0 < 1 <= y1:
            return "at", x0 + (1 - y0) * (x1 - x0) / (y1 - y0)
    if pts[0][1] >= 1:  # y falls below 1 later (a noisy point): the first crossing counts
        return "below", None
    return "above", None


def _shape(b: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    p = b.get("params") or {}
    return tuple((k, str(p[k])) for k in sorted(p) if k != "method")


def curves(doc: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[dict[str, Any]]]:
    """(forced family, shape) -> its forced points, by accept length: accept_forced, the measured
    accept length, speedup and its interval."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
    for b in doc.get("benchmarks", []):
        e = b["extra_info"]
        if e.get("accept_forced") is None or not e.get("speedup_vs_ar"):
            continue
        ci = e.get("speedup_vs_ar_ci95") or [None, None]
        out.setdefault((e.get("forced_family") or b["params"]["method"], _shape(b)), []).append(
            {
                "accept_forced": float(e["accept_forced"]),
                "accept_length": e.get("accept_length"),
                "speedup": float(e["speedup_vs_ar"]),
                "lo": ci[0],
                "hi": ci[1],
                "cell": b.get("param"),
                "withheld": str(e.get("speedup_verdict", "")).startswith("no verdict"),
            }
        )
    return {k: sorted(v, key=lambda p: p["accept_forced"]) for k, v in out.items()}


def break_even(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A family's break-even at one shape: "at" with the point and its interval ("lo", "hi"
    where the speedup's upper and lower bounds cross 1; None where a bound does not cross within
    the forced range: the interval runs past that end, "lo_open" / "hi_open" say so), or "below"
    / "above" the forced range. ``withheld``: points whose speedup got no verdict (a disturbed
    or saturated cell)."""
    x = [p["accept_forced"] for p in points]
    where, at = crossing([(p["accept_forced"], p["speedup"]) for p in points])
    out: dict[str, Any] = {
        "where": where,
        "at": at,
        "forced_range": [min(x), max(x)] if x else None,
        "withheld": [p["cell"] for p in points if p.get("withheld")],
    }
    if where == "at" and all(p["lo"] is not None and p["hi"] is not None for p in points):
        w_hi, x_hi = crossing([(p["accept_forced"], p["hi"]) for p in points])
        w_lo, x_lo = crossing([(p["accept_forced"], p["lo"]) for p in points])
        out["lo"] = x_hi if w_hi == "at" else None
        out["lo_open"] = w_hi != "at"  # the upper bounds pay already at the lowest forced length
        out["hi"] = x_lo if w_lo == "at" else None
        out["hi_open"] = w_lo != "at"  # the lower bounds never reach 1 in the forced range
    return out


def describe(be: dict[str, Any]) -> str:
    if be["where"] == "at":
        lo, hi = be.get("lo"), be.get("hi")
        lo_x, hi_x = be["forced_range"]
        if "lo_open" in be:
            lo_t = f"< {lo_x:g}" if lo is None else f"{lo:.2f}"
            hi_t = f"> {hi_x:g}" if hi is None else f"{hi:.2f}"
            iv = f" [{lo_t}, {hi_t}]"
        else:
            iv = ""
        note = (
            f" (from {len(be['withheld'])} cell(s) without a verdict: disturbed or saturated)"
            if be.get("withheld")
            else ""
        )
        return f"break-even accept length {be['at']:.2f}{iv}{note}"
    lo_x, hi_x = be["forced_range"] or (None, None)
    if be["where"] == "below":
        return f"pays at every forced length: break-even below the forced range (<= {lo_x:g})"
    if be["where"] == "above":
        return f"pays at no forced length: break-even above the forced range (> {hi_x:g})"
    return "no forced points"


def verdict(measured: float, be: dict[str, Any]) -> str:
    """A real drafter's measured accept length against the break-even at its shape."""
    if be["where"] == "below":
        return "gain expected (pays at every forced length)"
    if be["where"] == "above":
        return "no gain expected (above the forced range)"
    at = float(be["at"])
    lo = float(be["lo"]) if be.get("lo") is not None else (-math.inf if be.get("lo_open") else at)
    hi = float(be["hi"]) if be.get("hi") is not None else (math.inf if be.get("hi_open") else at)
    if measured > hi:
        return "gain expected"
    if measured < lo:
        return "no gain expected"
    return "at break-even (within its interval)"


def lines(doc: dict[str, Any]) -> list[str]:
    """The break-even view: one line per (family, shape), then each real speculative cell of a
    shape that has a break-even, its measured accept length against it."""
    cs = curves(doc)
    if not cs:
        return []
    out = []
    by_shape: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for (family, shape), pts in sorted(cs.items(), key=lambda kv: (kv[0][0], _natural_shape(kv[0][1]))):
        be = break_even(pts)
        by_shape.setdefault(shape, {})[family] = be
        forced = ", ".join(
            f"a{p['accept_forced']:g} x{p['speedup']:.2f}"
            + (f" (measured {p['accept_length']:.3f})" if p.get("accept_length") else "")
            for p in pts
        )
        out.append(f"{family} {_label(shape)}: {describe(be)}; {forced}")
    for b in doc.get("benchmarks", []):
        e = b["extra_info"]
        if e.get("accept_forced") is not None or not e.get("accept_length"):
            continue
        fams = by_shape.get(_shape(b))
        if not fams:
            continue
        for family, be in sorted(fams.items()):
            if be["where"] == "none":
                continue
            ref = f"break-even {be['at']:.2f}" if be["where"] == "at" else describe(be)
            out.append(
                f"{b['params']['method']} {_label(_shape(b))}: measured accept {e['accept_length']:.2f}, "
                f"{ref} for {family} here: {verdict(float(e['accept_length']), be)}"
            )
    return out


def _natural_shape(shape: tuple[tuple[str, str], ...]) -> tuple[Any, ...]:
    """Numbers as numbers (c8 before c32)."""
    return tuple((k, (0, float(v), "") if v.replace(".", "", 1).isdigit() else (1, 0.0, v)) for k, v in shape)


def _label(shape: tuple[tuple[str, str], ...]) -> str:
    d = dict(shape)
    parts = [d.pop("workload", "")]
    for k, prefix in (
        ("tp", "tp"),
        ("concurrency", "c"),
        ("context_tokens", "in"),
        ("output_tokens", "out"),
    ):
        if k in d:
            parts.append(f"{prefix}{d.pop(k)}")
    d.pop("prompt_tokens", None)
    parts += [f"{k}={v}" for k, v in sorted(d.items())]
    return " ".join(p for p in parts if p)


def plot_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``curves`` as plots.py rows: a panel per (method family, workload, TP, context, output), a
    line per concurrency, x the forced accept length, y the speedup with its interval."""
    rows = []
    for (family, shape), pts in curves(doc).items():
        d = dict(shape)
        conc = d.pop("concurrency", "?")
        for pt in pts:
            rows.append(
                {
                    "panel": f"{family} {_label(tuple(d.items()))}",
                    "series": f"c{conc}",
                    "x": pt["accept_forced"],
                    "y": pt["speedup"],
                    "lo": pt["lo"],
                    "hi": pt["hi"],
                    "status": "ok",
                }
            )
    return rows
