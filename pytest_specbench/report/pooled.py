"""The sentence a comparison is run for: "ddtree vs dflash: +12.3 % [+4.1 %, +21.2 %] over 4
shapes (per shape x1.05 to x1.21)". One line per ``compare`` pair of the matrix, the geometric
mean of its per-shape paired ratios (report/versus.py's comparisons) with one interval for it.

Every shape where both sides have an interval is in it, verdict or not. Each shape's log ratio is
an estimate with its own standard error (back from its interval: half its width over the t
multiplier it was read with, sequential looks included); the mean of N of them has the standard
error sqrt(sum se^2) / N, read with the most conservative of the shapes' levels and the sum's
Welch-Satterthwaite degrees of freedom (paired.satterthwaite_df). A shape whose ratio may carry a
bias its rounds' spread does not hold enters widened by the bound on that bias, the bound the
shape's own verdict reads: compared under load (interleaved pairs, other processes' CPU:
``paired.LOAD_BIAS``, x0.78..x1.28), or measured apart inside a family's established drift (its
band). A bias is not noise: the same load or drift can push every such shape the same way, so the
bounds add in full, (sum of bands) / N on the log scale, beside the standard error rather than
inside it (in quadrature, k shapes biased alike would be covered by sqrt(k) bounds out of k;
scripts/pooled_power.py reads both). Shapes without an interval (one round, different requests),
saturated or with failed baseline rounds, and disturbed shapes with no bound on what the
disturbance did (measured apart, or a process on their GPUs) stay out and are named: none of these
is left out for its ratio, so leaving them out does not keep the large effects. The shapes are
fixed, not sampled: the figure is the mean speedup over these shapes on this machine, not a
prediction for other shapes.

A swept side (``ddtree`` over its budgets) is one setting, and picking the best of K on the same
data inflates it. So the setting is either chosen where the comparison does not look (a tuned
race: decided on its ``tune.at`` cells; the pooled shapes are the carried ones), or, when it is
chosen on the pooled shapes themselves, every setting's pooled interval is read at 5 % / K
(Bonferroni): the chosen one then covers its true value 95 % of the time whichever it is. The
line says which; the per-shape ``compare`` lines use the same setting (``chosen``). Pure: no
pytest, no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from ..stats import paired, sequential
from .decide import _shape_label, as_result
from .drift import record_band
from .pairwise import established_drift
from .screen_text import counted
from .sides import _shapes, pairs, side

ALPHA = sequential.ALPHA
LOAD_BAND = math.log(1 / paired.LOAD_BIAS)  # |log| of what load alone was seen to shift a ratio


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


def _halves(ca: dict[str, Any], cb: dict[str, Any], interleaved: bool) -> list[dict[str, Any]]:
    """The cells whose rounds a comparison read: both measured apart; interleaved, each one with
    the baseline's rounds beside its own (a baseline's own cell is not read against them)."""
    if not interleaved:
        return [ca, cb]
    return [x for x in (ca, cb) if (x.get("extra_info") or {}).get("reference")]


def _left_out(ca: dict[str, Any], cb: dict[str, Any], interleaved: bool) -> str | None:
    """Why a shape stays out of the figure whatever its interval: a side saturated, a baseline's
    interleaved rounds failed or saturated, or a disturbance nothing bounds (measured apart: no
    pair shares the load; or a process on the engine's GPUs)."""
    for cell in _halves(ca, cb, interleaved):
        m = cell.get("extra_info") or {}
        ref = (m.get("reference") or {}) if interleaved else {}
        if m.get("saturated") or ref.get("saturated"):
            return "saturated"
        if ref.get("errors"):
            return "failed requests in a baseline's interleaved rounds"
        if m.get("disturbed") and not (interleaved and paired._cpu_load_only(m)):
            if "GPU" in str(m["disturbed"]):
                return "disturbed on its GPUs"
            return "disturbed, measured apart (no pair shares the load)"
    return None


def _shape_estimate(ca: dict[str, Any], cb: dict[str, Any]) -> dict[str, Any]:
    """One shape's log ratio A over B, its standard error, degrees of freedom and level, and the
    bound on a bias its interval is widened by (``band``, |log|; ``by``: load or a family's drift);
    or why it stays out of the figure (``out``)."""
    from .decide import compare

    c = compare(ca, cb)
    ci = c.get("speedup_vs_ar_ci95")
    n = c.get("speedup_pairs") or 0
    if str(c.get("speedup_verdict") or "").startswith("unpaired"):
        return {"out": "different requests (unpaired)"}
    interleaved = c.get("speedup_pairing") == "interleaved"
    why = _left_out(ca, cb, interleaved)
    if why:
        return {"out": why}
    if c.get("speedup_vs_ar") is None or not ci or n < 2:
        return {"out": "one paired round: no interval" if n == 1 else "no paired rounds"}
    looks = paired.looks_of(as_result(ca), as_result(cb))
    if c.get("speedup_t"):  # the multiplier and degrees of freedom the interval was read with
        t, df = float(c["speedup_t"]), int(c.get("speedup_df") or n - 1)
        if c.get("speedup_pairing") in ("all rounds", "unverified", "digest"):  # measured apart
            looks = paired.apart_looks(as_result(ca), as_result(cb))
    else:  # a comparison read before the multiplier was recorded
        t, df = paired._t(n, looks), n - 1
    se = paired.log_se(ci[0], ci[1], t) if t else 0.0
    level = looks.level if looks is not None and not looks.one else ALPHA
    band, by = 0.0, None
    if interleaved and any((x.get("extra_info") or {}).get("disturbed") for x in _halves(ca, cb, True)):
        if not c.get("speedup_under_load"):  # the load unalike in a pair's halves: no bound holds
            return {"out": "disturbed, the load unalike in a pair's halves (no bound on its bias)"}
        band, by = LOAD_BAND, "load"  # other processes' CPU, alike in every pair's halves
    elif not interleaved:
        d = established_drift(ca, cb)
        if d is not None:
            band, by = record_band(d), f"drift {d.get('family')}"
    return {
        "log": math.log(c["speedup_vs_ar"]),
        "se": se,
        "df": df,
        "level": level,
        "x": c["speedup_vs_ar"],
        "n": n,
        "t": t,
        "band": band,
        "by": by,
    }


def best_of(ca: dict[str, Any], cb: dict[str, Any], k: int) -> dict[str, Any] | None:
    """One shape's best of ``k`` settings (``ca``, chosen at this shape) against ``cb``: x with its
    interval read at the shape's level / k (Bonferroni: whichever setting was the best, its
    interval covers its true ratio at the shape's level) and widened by the shape's bias bound,
    the verdict read on that interval (``speedup_vs_ar``, ``speedup_vs_ar_ci95``,
    ``speedup_verdict``); None where the shape has no interval or stays out of a pooled figure
    (its plain comparison says why)."""
    e = _shape_estimate(ca, cb)
    if "out" in e:
        return None
    half = sequential.t_quantile(e["level"] / k, max(1, e["df"])) * e["se"] + e["band"]
    iv = paired.Interval(e["x"], math.exp(e["log"] - half), math.exp(e["log"] + half), e["n"])
    return {"speedup_vs_ar": iv.point, "speedup_vs_ar_ci95": [iv.lo, iv.hi], "speedup_verdict": iv.verdict()}


def _pool(est: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """The pooled interval at the strictest shape's level / k, with the Welch-Satterthwaite degrees
    of freedom of the shapes' variances, widened by the mean of the shapes' bias bounds (each in
    full: a bias is not noise)."""
    level = min(e["level"] for e in est) / k
    parts = [(e["log"], e["se"] ** 2, e["df"]) for e in est]
    df = paired.satterthwaite_df(parts)  # not the fewest: one shape of 3 rounds would set t for all
    ratio, lo, hi = paired.pooled_log_interval(parts, level, df)
    starts = max((e.get("starts_var", 0.0) for e in est), default=0.0)
    if starts > 0:  # the two sides' engine starts: one offset for every shape, added once
        from ..stats.instances import satterthwaite

        se2 = (math.fsum(e["se"] ** 2 for e in est)) / len(est) ** 2
        k = min(int(e.get("starts_df") or 1) for e in est if e.get("starts_var"))
        var, df = satterthwaite([(se2, df), (starts, k)])
        half = sequential.t_quantile(level, max(1, df)) * math.sqrt(var)
        lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
    bias = sum(e.get("band", 0.0) for e in est) / len(est)
    return {
        "ratio": ratio,
        "lo": lo * math.exp(-bias),
        "hi": hi * math.exp(bias),
        "level": level,
        "df": df,
        "shapes": len(est),
        "bias": bias,
        "per_shape": [min(e["x"] for e in est), max(e["x"] for e in est)],
        "widened": [{"shape": e["shape"], "by": e["by"], "band": e["band"]} for e in est if e.get("band")],
        **({"instance_sd": round(math.sqrt(starts / 2), 6)} if starts > 0 else {}),
    }


def _estimates(
    doc: dict[str, Any], a: str, b: str, shapes: list[Any] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Per shape (of ``shapes``, else every one where both sides ran, both against one baseline):
    the estimate of ``a`` (one method or setting) over ``b``'s side; and the shapes left out, each
    with why."""
    out, left = [], []
    by_shape = _shapes(doc)
    for key in shapes if shapes is not None else by_shape:
        cells = by_shape.get(key) or []
        sa, sb = side(a, cells), side(b, cells)
        if None not in sa or None not in sb:
            continue
        ca, cb = sa[None], sb[None]
        if ca["extra_info"].get("speedup_baseline") != cb["extra_info"].get("speedup_baseline"):
            continue  # two target models: not a shape of the pair (report/versus.py's rule)
        e = {**_shape_estimate(ca, cb), "shape": _shape_label(dict(key)), **_starts(doc, ca, cb)}
        if "out" in e:
            left.append({"shape": e["shape"], "why": e["out"]})
        else:
            out.append(e)
    return out, left


def _starts(doc: dict[str, Any], ca: dict[str, Any], cb: dict[str, Any]) -> dict[str, Any]:
    """The variance two cells' engine starts add to their ratio (2 tau², report/instances.py) where
    both methods' engines are instances of their own and the run measured tau; its degrees of
    freedom (the pairs of starts)."""
    spec = doc.get("specbench") or {}
    rec = spec.get("instances") or {}
    sep = set(spec.get("separate_instances") or ())
    methods = {(c.get("params") or {}).get("method") for c in (ca, cb)}
    if not rec.get("tau") or not methods <= sep:
        return {}
    return {"starts_var": 2 * float(rec["tau"]) ** 2, "starts_df": int(rec.get("df") or 1)}


def figures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ``compare`` pair (the matrix's, not --versus): the pooled figure over every shape with
    an interval (``widened``: the shapes whose bias bound widened it), how A's setting was chosen,
    the shapes left out and why (``left_out``). JSON: ``specbench.compare_pooled``."""
    spec = doc.get("specbench") or {}
    out = []
    for a, b in pairs({**doc, "specbench": {**spec, "versus": None}}):
        settings = _settings(doc, a)
        tuning = ((spec.get("race") or {}).get("tuning") or {}).get(a)
        how = None
        out_of_race = _out_of_race(doc, a, settings)
        if not settings:
            est, left = _estimates(doc, a, b)
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
            k = len(candidates) if tuning and tuning.get("kept") else _sweep_size(doc, a, settings)
            best = None
            most_left: list[dict[str, str]] = []
            for s in candidates:
                est_s, left_s = _estimates(doc, s, b, shapes)
                most_left = max(most_left, left_s, key=len)
                if est_s and (best is None or _pool(est_s, 1)["ratio"] > best[1]):
                    best = (s, _pool(est_s, 1)["ratio"], est_s, left_s)
            if best is None:
                if most_left:  # said, not dropped silently
                    said = f"no setting chosen of {k}: every shape left out"
                    out.append(_none(a, b, (how + "; " if how else "") + said, most_left, out_of_race))
                continue
            chosen, _, est, left = best
            if k > 1:
                how = (how + "; " if how else "") + (
                    f"the best of {k} settings, its interval corrected for the choice (each at 5 %/{k})"
                )
            elif how is None:
                how = "the only setting"
        if not est:
            if left:  # said, not dropped silently
                out.append(_none(a, b, how, left, out_of_race, chosen if chosen != a else None))
            continue
        f = _pool(est, k)
        out.append(
            {
                "a": a,
                "b": b,
                "setting": chosen if chosen != a else None,
                "how": how,
                "left_out": left,
                "out_of_race": out_of_race,
                **f,
            }
        )
    return out


def _none(
    a: str, b: str, how: str | None, left: list[dict[str, str]], out_of_race: int, setting: str | None = None
) -> dict[str, Any]:
    """A pair with no pooled figure: every shape it ran left out (named, with why)."""
    return {
        "a": a,
        "b": b,
        "setting": setting,
        "how": how,
        "left_out": left,
        "out_of_race": out_of_race,
        "shapes": 0,
    }


def chosen(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(A, B) -> the setting of a swept A its pooled figure uses (the JSON's, else computed): the
    one the per-shape ``compare`` lines use too, so that they multiply out to the pooled figure."""
    got = (doc.get("specbench") or {}).get("compare_pooled")
    if got is None:
        got = figures(doc)
    return {(str(f["a"]), str(f["b"])): str(f["setting"]) for f in got if f.get("setting")}


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f} %"


def _said_left_out(left: list[dict[str, str]]) -> str:
    """ "left out: saturated at 2 shapes (poisson tp1 c8, ...); ..." (three shapes named per reason)."""
    why: dict[str, list[str]] = {}
    for x in left:
        why.setdefault(x["why"], []).append(x["shape"])
    parts = []
    for reason, shapes in why.items():
        named = ", ".join(shapes[:3]) + (f" and {len(shapes) - 3} more" if len(shapes) > 3 else "")
        parts.append(f"{reason} at {counted(len(shapes), 'shape')} ({named})")
    return "left out: " + "; ".join(parts)


def _said_widened(f: dict[str, Any]) -> str:
    """ "2 widened by a bias bound (1 under load x0.78..x1.28, 1 inside drift ar-tp1 ±3.1 %)"."""
    w = f.get("widened") or []
    load = [x for x in w if x["by"] == "load"]
    parts = [f"{len(load)} under load x{paired.LOAD_BIAS:.2f}..x{1 / paired.LOAD_BIAS:.2f}"] if load else []
    drifts: dict[str, list[float]] = {}
    for x in w:
        if x["by"] != "load":
            drifts.setdefault(str(x["by"]), []).append(x["band"])
    for by, bands in drifts.items():
        parts.append(f"{len(bands)} inside {by} ±{(math.exp(max(bands)) - 1) * 100:.1f} %")
    return f"{len(w)} widened by a bias bound ({', '.join(parts)})"


def line(f: dict[str, Any]) -> str:
    """ "ddtree vs dflash: +12.3 % [+4.1 %, +21.2 %] over 4 shapes (per shape x1.05 to x1.21; 1
    widened by a bias bound (1 under load x0.78..x1.28)); ddtree-b32: the best of 6 settings, ...;
    left out: saturated at 1 shape (...)" """
    setting = f"; {f['setting'] or f['a']}: {f['how']}" if f.get("how") else ""
    left = f.get("left_out") or []
    if not f["shapes"]:
        if "withheld" in f:  # a JSON written before every shape was pooled
            n = counted(f["withheld"], "shape")
            return f"{f['a']} vs {f['b']}: no pooled figure: {n} without a verdict"
        return f"{f['a']} vs {f['b']}: no pooled figure{setting}; " + _said_left_out(left)
    lo, hi = f["per_shape"]
    per = f"x{lo:.2f}" if f["shapes"] == 1 else f"per shape x{lo:.2f} to x{hi:.2f}"
    if f.get("widened"):
        per += "; " + _said_widened(f)
    out = (
        f"{f['a']} vs {f['b']}: {_pct(f['ratio'])} [{_pct(f['lo'])}, {_pct(f['hi'])}] over "
        f"{counted(f['shapes'], 'shape')} ({per}){setting}"
    )
    if f.get("withheld"):  # a JSON written before every shape was pooled
        out += f"; {counted(f['withheld'], 'shape')} without a verdict left out"
    if left:
        out += "; " + _said_left_out(left)
    if f.get("out_of_race"):
        out += f"; {f['a']} out of the race at {counted(f['out_of_race'], 'shape')}, not in the figure"
    return out


def screen_lines(doc: dict[str, Any]) -> list[str]:
    """The pooled lines, first on the screen ("the sentence"), from the JSON or computed."""
    got = (doc.get("specbench") or {}).get("compare_pooled")
    if got is None:
        got = figures(doc)
    return [line(f) for f in got]
