"""Break-even accept length: from cells with a forced accept length (``accept_forced``), the
accept length at which a speculative method's speedup over its baseline crosses 1, per shape.

A forced cell measures what a verify step costs at that shape (batch, context, TP, output
length), whatever a real drafter would accept. Along the forced points of one method family and
shape, sorted by accept length, the break-even is where the speedup rises through 1, linearly
interpolated between the two points around the crossing (their x spacing included). A curve that
falls through 1, or crosses it more than once, has no single break-even ("mixed"). The interval
holds every accept length the speedups' intervals do not rule out: from where the upper bounds
first reach 1 (open below the forced range when the first one already does) to where the lower
bounds reach 1 for good (open above it when the last one is still below 1). A family whose every
point is above 1 breaks even "below the forced range", one whose every point is below 1 "above
the forced range". A real (unforced) cell of the same method family and shape is then read
against it: its measured accept length against the interval; no gain/no-gain verdict when a
forced point got no verdict (disturbed, saturated) or has no interval (one round), or the curve
is mixed.
In a raced run (``--specbench-race``) a forced length can be out of the race: one that lost to its
shape's baseline there is a point below 1 with the interval it lost by (the sequential one); one
that lost elsewhere (to another length, or at a cheaper shape and so never run here) is missing at
this shape, and the view names it: "pays at every forced length" then reads "at every forced
length measured here", never a claim about lengths it did not measure.
Pure: no pytest, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .screen_text import counted


def crossing(points: Sequence[tuple[float, float]]) -> tuple[str, float | None]:
    """Where y crosses 1 along (x, y) points sorted by x: ("at", x*) interpolated between the
    one pair with y < 1 <= y' when y rises through 1 once and never falls back; ("below", None)
    when every y >= 1, ("above", None) when every y < 1; ("mixed", None) when y falls through 1
    or crosses it more than once (no single break-even); ("none", None) without points."""
    pts = sorted(points)
    if not pts:
        return "none", None
    pairs = list(zip(pts, pts[1:], strict=False))
    ups = [(p, q) for p, q in pairs if p[1] < 1 <= q[1]]
    downs = [(p, q) for p, q in pairs if p[1] >= 1 > q[1]]
    if not ups and not downs:
        return ("below" if pts[0][1] >= 1 else "above"), None
    if len(ups) == 1 and not downs:
        (x0, y0), (x1, y1) = ups[0]
        return "at", x0 + (1 - y0) * (x1 - x0) / (y1 - y0)
    return "mixed", None


def _first_reach(pts: Sequence[tuple[float, float]]) -> tuple[str, float | None]:
    """Where y first reaches 1 along sorted points: ("open", None) when the first point already
    does, ("at", x) interpolated, ("never", None) when no point does."""
    if pts[0][1] >= 1:
        return "open", None
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if y0 < 1 <= y1:
            return "at", x0 + (1 - y0) * (x1 - x0) / (y1 - y0)
    return "never", None


def _last_reach(pts: Sequence[tuple[float, float]]) -> tuple[str, float | None]:
    """Where y reaches 1 for good along sorted points (after its last point below 1): ("open",
    None) when the last point is below 1, ("at", x) interpolated, ("always", None) when no point
    is below 1."""
    if pts[-1][1] < 1:
        return "open", None
    below = [i for i, (_, y) in enumerate(pts) if y < 1]
    if not below:
        return "always", None
    (x0, y0), (x1, y1) = pts[below[-1]], pts[below[-1] + 1]
    return "at", x0 + (1 - y0) * (x1 - x0) / (y1 - y0)


def _shape(b: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    p = b.get("params") or {}
    return tuple((k, str(p[k])) for k in sorted(p) if k != "method")


def curves(doc: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[dict[str, Any]]]:
    """(forced family, shape) -> its forced points, by accept length: accept_forced, the measured
    accept length, speedup and its interval. A raced run's forced cell that lost to its shape's
    baseline there is a point too (``dropped``); one out of the race otherwise is a point with
    ``missing`` set and no speedup (break_even leaves it out of the curve and names it)."""
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
    for key, pt in _raced_out(doc):
        out.setdefault(key, []).append(pt)
    return {k: sorted(v, key=lambda p: p["accept_forced"]) for k, v in out.items()}


def _raced_out(doc: dict[str, Any]) -> list[tuple[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]]]:
    """The forced cells a race dropped, as (family, shape) points: with the speedup they lost by
    where they lost to their shape's own baseline cell, else ``missing`` (why, in words)."""
    dropped = ((doc.get("specbench") or {}).get("race") or {}).get("dropped_cells") or []
    if not dropped:
        return []
    forced: dict[str, tuple[str, float]] = {}  # method -> (family, accept_forced)
    for c in [*doc.get("benchmarks", []), *dropped]:
        e = c.get("extra_info") or {}
        if e.get("accept_forced") is not None:
            m = c["params"]["method"]
            forced[m] = (e.get("forced_family") or m, float(e["accept_forced"]))
    baselines = {
        b.get("param"): _shape(b)
        for b in doc.get("benchmarks", [])
        if (b.get("extra_info") or {}).get("speedup_verdict") == "baseline"
    }
    out = []
    for c in dropped:
        m = c.get("params", {}).get("method")
        if m not in forced:
            continue
        family, x = forced[m]
        race = (c.get("extra_info") or {}).get("race") or {}
        shape = _shape(c)
        pt: dict[str, Any] = {
            "accept_forced": x,
            "accept_length": None,
            "cell": c.get("cell_id"),
            "withheld": False,
        }
        lost_here = not race.get("skipped") and baselines.get(race.get("lost_to")) == shape
        if lost_here and race.get("hi") is not None:
            metrics = c.get("metrics") or {}
            pt.update(
                accept_length=metrics.get("accept_length"),
                speedup=float(race["ratio"]),
                lo=race.get("lo"),
                hi=race.get("hi"),
                dropped=True,
            )
        else:
            where = "not run here" if race.get("skipped") else f"lost to {race.get('lost_to')}"
            pt["missing"] = f"out of the race at shape {race.get('shape')}, {where}"
        out.append(((family, shape), pt))
    return out


def break_even(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A family's break-even at one shape: "where" ("at", "below", "above", "mixed", "none"), "at"
    (the point), and with every point's interval: "lo" / "hi", the interval's ends (None where it
    runs past the forced range: "lo_open" / "hi_open"), "lo_bound" / "hi_bound" (the ends as
    numbers a measured accept length is read against: -inf / +inf when open; the range's end
    where every upper bound stays below 1 or every lower bound above it). ``withheld``: points
    whose speedup got no verdict (disturbed, saturated); ``no_verdict``: why a real cell is not
    read against it (None when it is)."""
    missing = sorted({p["accept_forced"] for p in points if p.get("missing")})
    points = [p for p in points if not p.get("missing")]
    x = [p["accept_forced"] for p in points]
    where, at = crossing([(p["accept_forced"], p["speedup"]) for p in points])
    out: dict[str, Any] = {
        "where": where,
        "at": at,
        "forced_range": [min(x), max(x)] if x else None,
        "withheld": [p["cell"] for p in points if p.get("withheld")],
        "missing": missing,
        "no_verdict": None,
    }
    pts = sorted(points, key=lambda p: p["accept_forced"])
    if pts and all(p["lo"] is not None and p["hi"] is not None for p in pts):
        w_lo, x_lo = _first_reach([(p["accept_forced"], p["hi"]) for p in pts])
        w_hi, x_hi = _last_reach([(p["accept_forced"], p["lo"]) for p in pts])
        out.update(lo=x_lo, lo_open=w_lo == "open", hi=x_hi, hi_open=w_hi == "open")
        out["lo_bound"] = -math.inf if w_lo == "open" else x_lo if w_lo == "at" else max(x)
        out["hi_bound"] = math.inf if w_hi == "open" else x_hi if w_hi == "at" else min(x)
    if where == "none":
        out["no_verdict"] = "no forced points"
    elif where == "mixed":
        out["no_verdict"] = "the speedup does not rise through 1 once along the forced lengths"
    elif out["withheld"]:
        out["no_verdict"] = (
            f"{counted(len(out['withheld']), 'forced point')} without a verdict "
            "(disturbed, saturated or inside its family's drift)"
        )
    elif "lo_bound" not in out:
        out["no_verdict"] = "forced point(s) without an interval (one round)"
    return out


def describe(be: dict[str, Any]) -> str:
    lo_x, hi_x = be["forced_range"] or (None, None)
    note = (
        f" (from {counted(len(be['withheld']), 'cell')} without a verdict: "
        "disturbed, saturated or inside its family's drift)"
        if be.get("withheld")
        else ""
    )
    if be.get("missing"):
        out = ", ".join(f"{x:g}" for x in be["missing"])
        which = "forced lengths" if len(be["missing"]) > 1 else "forced length"
        note += f" ({which} {out} out of the race, not measured here)"
    if be["where"] == "at":
        lo, hi = be.get("lo"), be.get("hi")
        if "lo_open" in be:
            lo_t = f"< {lo_x:g}" if be["lo_open"] else f"{lo:.2f}"
            hi_t = f"> {hi_x:g}" if be["hi_open"] else f"{hi:.2f}"
            iv = f" [{lo_t}, {hi_t}]"
        else:
            iv = ""
        return f"break-even accept length {be['at']:.2f}{iv}{note}"
    here, rng = (" measured here", "the range measured") if be.get("missing") else ("", "the forced range")
    if be["where"] == "below":
        return f"pays at every forced length{here}: break-even below {rng} (<= {lo_x:g}){note}"
    if be["where"] == "above":
        return f"pays at no forced length{here}: break-even above {rng} (> {hi_x:g}){note}"
    if be["where"] == "mixed":
        return (
            "no single break-even: the speedup falls through 1 or crosses it more than once along the "
            f"forced lengths (noise, or a disturbed run){note}"
        )
    return f"no forced points{note}"


def verdict(measured: float, be: dict[str, Any]) -> str:
    """A real drafter's measured accept length against the break-even at its shape: "gain
    expected" above the interval, "no gain expected" below it, "at break-even" inside it, or
    "no verdict: WHY" (be["no_verdict"])."""
    if be.get("no_verdict"):
        return f"no verdict: {be['no_verdict']}"
    if measured > be["hi_bound"]:
        every = "every forced length measured" if be.get("missing") else "every forced length"
        return "gain expected" + (f" (pays at {every})" if be["where"] == "below" else "")
    if measured < be["lo_bound"]:
        return "no gain expected" + (" (above the forced range)" if be["where"] == "above" else "")
    if be["where"] in ("above", "below"):
        return (
            f"no verdict: the break-even lies {be['where']} the forced range, and so may this accept length"
        )
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
        forced = ", ".join(_point_text(p) for p in pts)
        out.append(f"{family} {_label(shape)}: {describe(be)}; {forced}")
    for b in doc.get("benchmarks", []):
        e = b["extra_info"]
        if e.get("accept_forced") is not None or not e.get("accept_length"):
            continue
        family = b["params"]["method"]  # a real method is read against its own family's curve only
        be = by_shape.get(_shape(b), {}).get(family)
        if be is None or be["where"] == "none":
            continue
        ref = f"break-even {be['at']:.2f}" if be["where"] == "at" else describe(be)
        out.append(
            f"{family} {_label(_shape(b))}: measured accept {e['accept_length']:.2f}, "
            f"{ref} for {family} here: {verdict(float(e['accept_length']), be)}"
        )
    return out


def _point_text(p: dict[str, Any]) -> str:
    if p.get("missing"):
        return f"a{p['accept_forced']:g} {p['missing']}"
    return (
        f"a{p['accept_forced']:g} x{p['speedup']:.2f}"
        + (f" (measured {p['accept_length']:.3f})" if p.get("accept_length") else "")
        + (" (out of the race here)" if p.get("dropped") else "")
    )


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
            if pt.get("missing"):
                continue
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
