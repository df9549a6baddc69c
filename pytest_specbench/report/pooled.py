"""The sentence a comparison is run for: "ddtree vs dflash: +12.3 % [+4.1 %, +21.2 %] over 4
shapes (per shape x1.05 to x1.21)". One line per ``compare`` pair of the matrix, the geometric
mean of its per-shape paired ratios (report/versus.py's comparisons) with one interval for it.

The interval: each shape's log ratio is an estimate with its own standard error (back from its
interval: half its width over the t multiplier it was read with, sequential looks included); the
mean of N of them has the standard error sqrt(sum se^2) / N, read with the most conservative of
the shapes' levels and their fewest degrees of freedom. The shapes are fixed, not sampled: the
figure is the mean speedup over these shapes on this machine, not a prediction for other shapes.
Shapes whose comparison has no verdict (disturbed, saturated, inside a drift) are left out and
counted.

A swept side (``ddtree`` over its budgets) is one setting, and picking the best of K on the same
data inflates it. So the setting is either chosen where the comparison does not look (a tuned
race: decided on its ``tune.at`` cells; the pooled shapes are the carried ones), or, when it is
chosen on the pooled shapes themselves, every setting's pooled interval is read at 5 % / K
(Bonferroni): the chosen one then covers its true value 95 % of the time whichever it is. The
line says which. Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from ..stats import paired, sequential
from .decide import as_result
from .versus import _shapes, pairs, side

ALPHA = sequential.ALPHA


def _sweep_size(doc: dict[str, Any], name: str, settings: list[str]) -> int:
    """How many settings the sweep had to choose from: those measured, out of the race or tuned
    out (the K of the best-of-K correction counts every one the choice could have fallen on)."""
    race = (doc.get("specbench") or {}).get("race") or {}
    more = {
        (d.get("params") or {}).get("method")
        for d in list(race.get("dropped_cells") or []) + list(race.get("tuned_out") or [])
        if str((d.get("params") or {}).get("method", "")).startswith(f"{name}-")
    }
    return len(set(settings) | {m for m in more if m})


def _out_of_race(doc: dict[str, Any], name: str, settings: list[str]) -> int:
    """Shapes where ``name`` (every one of its settings) was out of the race: not in the figure."""
    race = (doc.get("specbench") or {}).get("race") or {}
    names = set(settings) | {name}
    dropped = {
        tuple(sorted((k, str(v)) for k, v in (d.get("params") or {}).items() if k != "method"))
        for d in race.get("dropped_cells") or []
        if (d.get("params") or {}).get("method") in names
        or str((d.get("params") or {}).get("method", "")).startswith(f"{name}-")
    }
    measured = {key for key, cells in _shapes(doc).items() if any(side(name, cells).values())}
    return len(dropped - measured)


def _settings(doc: dict[str, Any], name: str) -> list[str]:
    names = {
        b["params"]["method"]
        for b in doc.get("benchmarks") or []
        if (b.get("extra_info") or {}).get("sweep") == name
    }
    return sorted(names)


def _shape_estimate(ca: dict[str, Any], cb: dict[str, Any]) -> dict[str, Any] | None:
    """One shape's log ratio A over B, its standard error, degrees of freedom and level."""
    from .decide import compare

    c = compare(ca, cb)
    ci = c.get("speedup_vs_ar_ci95")
    n = c.get("speedup_pairs") or 0
    v = str(c.get("speedup_verdict") or "")
    if c.get("speedup_vs_ar") is None or not ci or n < 2:
        return None
    if v.startswith(("no verdict", "unpaired")):
        return {"withheld": v}
    looks = paired.looks_of(as_result(ca), as_result(cb))
    if c.get("speedup_t"):  # the multiplier and degrees of freedom the interval was read with
        t, df = float(c["speedup_t"]), int(c.get("speedup_df") or n - 1)
        if c.get("speedup_pairing") in ("all rounds", "unverified", "digest"):  # measured apart
            looks = paired.apart_looks(as_result(ca), as_result(cb))
    else:  # a comparison read before the multiplier was recorded
        t, df = paired._t(n, looks), n - 1
    se = (math.log(ci[1]) - math.log(ci[0])) / (2 * t) if t else 0.0
    level = looks.level if looks is not None and not looks.one else ALPHA
    return {
        "log": math.log(c["speedup_vs_ar"]),
        "se": se,
        "df": df,
        "level": level,
        "x": c["speedup_vs_ar"],
    }


def _pool(est: list[dict[str, Any]], k: int) -> dict[str, Any]:
    level = min(e["level"] for e in est) / k
    ratio, lo, hi = paired.pooled_log_interval([(e["log"], e["se"] ** 2, e["df"]) for e in est], level)
    return {
        "ratio": ratio,
        "lo": lo,
        "hi": hi,
        "level": level,
        "shapes": len(est),
        "per_shape": [min(e["x"] for e in est), max(e["x"] for e in est)],
    }


def _estimates(doc: dict[str, Any], a: str, b: str, shapes: list[Any] | None = None) -> tuple[list[Any], int]:
    """Per shape (of ``shapes``, else every one where both sides ran): the estimate of ``a`` (one
    method or setting) over ``b``'s side; and how many shapes had no verdict."""
    out, withheld = [], 0
    by_shape = _shapes(doc)
    for key in shapes if shapes is not None else by_shape:
        cells = by_shape.get(key) or []
        sa, sb = side(a, cells), side(b, cells)
        if None not in sa or None not in sb:
            continue
        e = _shape_estimate(sa[None], sb[None])
        if e is None:
            continue
        if "withheld" in e:
            withheld += 1
            continue
        out.append(e)
    return out, withheld


def figures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ``compare`` pair (the matrix's, not --versus): the pooled figure, how A's setting was
    chosen, the shapes left out. JSON: ``specbench.compare_pooled``."""
    spec = doc.get("specbench") or {}
    out = []
    for a, b in pairs({**doc, "specbench": {**spec, "versus": None}}):
        settings = _settings(doc, a)
        tuning = ((spec.get("race") or {}).get("tuning") or {}).get(a)
        how = None
        out_of_race = _out_of_race(doc, a, settings)
        if not settings:
            est, withheld = _estimates(doc, a, b)
            chosen, k = a, 1
        else:
            by_shape = _shapes(doc)
            if tuning and tuning.get("kept"):
                kept = [s for s in tuning["kept"] if s in settings]
                decided_on = set(tuning.get("cells") or [])
                # the carried shapes: none of the cells the sweep was decided on
                carried = [
                    key
                    for key, cells in by_shape.items()
                    if {x["params"]["method"] for x in cells} & set(kept)
                    and not {x.get("param") for x in cells} & decided_on
                ]
                candidates, shapes = kept, carried
                how = f"chosen at {tuning.get('at')} (tuning shapes not reused)"
            else:
                candidates, shapes = settings, None
            best = None
            most_withheld = 0
            for s in candidates:
                est_s, wh = _estimates(doc, s, b, shapes)
                most_withheld = max(most_withheld, wh)
                if est_s and (best is None or _pool(est_s, 1)["ratio"] > best[1]):
                    best = (s, _pool(est_s, 1)["ratio"], est_s, wh)
            if best is None:
                if most_withheld:  # said, not dropped silently
                    out.append(
                        {"a": a, "b": b, "setting": None, "how": how, "withheld": most_withheld, "shapes": 0}
                    )
                continue
            chosen, _, est, withheld = best
            k = len(candidates) if tuning and tuning.get("kept") else _sweep_size(doc, a, settings)
            if k > 1:
                how = (how + "; " if how else "") + (
                    f"the best of {k} settings, its interval corrected for the choice (each at 5 %/{k})"
                )
            elif how is None:
                how = "the only setting"
        if not est:
            if withheld:  # said, not dropped silently
                out.append({"a": a, "b": b, "setting": None, "how": how, "withheld": withheld, "shapes": 0})
            continue
        f = _pool(est, k)
        out.append(
            {
                "a": a,
                "b": b,
                "setting": chosen if chosen != a else None,
                "how": how,
                "withheld": withheld,
                "out_of_race": out_of_race,
                **f,
            }
        )
    return out


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f} %"


def line(f: dict[str, Any]) -> str:
    """ "ddtree vs dflash: +12.3 % [+4.1 %, +21.2 %] over 4 shapes (per shape x1.05 to x1.21);
    ddtree-b32: the best of 6 settings, ..." """
    if not f["shapes"]:
        return f"{f['a']} vs {f['b']}: no pooled figure: {f['withheld']} shape(s) without a verdict"
    lo, hi = f["per_shape"]
    per = f"x{lo:.2f}" if f["shapes"] == 1 else f"per shape x{lo:.2f} to x{hi:.2f}"
    out = (
        f"{f['a']} vs {f['b']}: {_pct(f['ratio'])} [{_pct(f['lo'])}, {_pct(f['hi'])}] over "
        f"{f['shapes']} shape{'s' if f['shapes'] != 1 else ''} ({per})"
    )
    if f.get("setting"):
        out += f"; {f['setting']}: {f['how']}"
    if f.get("withheld"):
        out += f"; {f['withheld']} shape(s) without a verdict left out"
    if f.get("out_of_race"):
        out += f"; {f['a']} out of the race at {f['out_of_race']} shape(s), not in the figure"
    return out


def screen_lines(doc: dict[str, Any]) -> list[str]:
    """The pooled lines, first on the screen ("the sentence"), from the JSON or computed."""
    got = (doc.get("specbench") or {}).get("compare_pooled")
    if got is None:
        got = figures(doc)
    return [line(f) for f in got]
