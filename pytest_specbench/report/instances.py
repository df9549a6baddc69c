"""The start-to-start level over a results JSON (stats/instances.py; docs/metrics.md "Two levels:
rounds and engine starts"). Pure: no pytest, no I/O.

Pairs of starts of one configuration are read where the run has them: each A/A control's cell
against the baseline beside it (``specbench["controls"]``), and each member twin's cell against its
first start's at the same shape (``specbench["twins"]``). From them one tau² for the run; every
verdict between engines started apart (``specbench["separate_instances"]``: the methods whose engines
are instances of their own) is then read on its interval widened by 2 tau², and a verdict the
widening no longer supports becomes "not separated" (``speedup_verdict_before_instances`` keeps the
old one). A twin whose starts differ by more than the other pairs and its rounds allow sits off the
others: both starts' verdicts at its TP size are withheld, the difference named. Otherwise a
method's starts are read together at each shape (``_combine``): its verdict rests on the mean of
its starts, where tau² counts 1/s, so another start narrows it where rounds cannot. Where members were
compared with separate instances and no pair of starts was measured, the run says so: its verdicts
assume two starts of one engine run alike. A control or twin covers the worker it ran in; workers
whose members no pair of starts checked are named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..stats import instances as lvl
from ..stats.paired import Interval, axes, log_se
from ..stats.sequential import t_quantile, t_two_sided_p
from .drift import VERDICTS


def _se2(f: Mapping[str, Any]) -> float | None:
    """The comparison's variance of its mean log ratio, from its interval and multiplier."""
    ci, t = f.get("speedup_vs_ar_ci95"), f.get("speedup_t")
    if not ci or not t or not ci[0] or not ci[1] or ci[0] <= 0:
        return None
    return log_se(ci[0], ci[1], t) ** 2


def pairs(
    results: Sequence[Mapping[str, Any]],
    comparisons: Mapping[int, Mapping[str, Any]],
    specbench: Mapping[str, Any],
) -> list[lvl.Pair]:
    """The run's pairs of starts: each control against its baseline, each twin against its first
    start (both compared with their baseline at the same shape, same worker), one pair per two
    starts (their shapes' differences averaged: one start serves every shape of its group)."""
    controls = specbench.get("controls") or {}
    twins = specbench.get("twins") or {}
    at: dict[tuple[Any, ...], tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
    out: list[tuple[tuple[Any, ...], lvl.Pair]] = []  # (which two starts, the pair at one shape)
    for i, r in enumerate(results):
        f = comparisons.get(i) or {}
        method = r["params"].get("method")
        v = _se2(f)
        if v is None or not f.get("speedup_vs_ar"):
            continue
        worker, tp = str(r.get("worker") or ""), r["params"].get("tp")
        if method in controls:
            key = (method, controls[method], worker, tp)
            out.append((key, lvl.Pair(r["cell_id"], controls[method], math.log(f["speedup_vs_ar"]), v)))
        at[(axes(r["params"]), worker, method)] = (r, f)
    for (shape, worker, method), (r, f) in at.items():
        first = twins.get(method)
        got = at.get((shape, worker, first)) if first else None
        if got is None:
            continue
        fr, ff = got
        d = math.log(f["speedup_vs_ar"]) - math.log(ff["speedup_vs_ar"])
        key = (method, first, worker, r["params"].get("tp"))
        out.append((key, lvl.Pair(r["cell_id"], fr["cell_id"], d, (_se2(f) or 0.0) + (_se2(ff) or 0.0))))
    return lvl.per_start(out)


def apply(
    results: Sequence[Mapping[str, Any]], comparisons: Mapping[int, dict[str, Any]], specbench: dict[str, Any]
) -> None:
    """In place: ``specbench["instances"]`` (tau, the pairs, the twins that sat off the others, the
    workers no pair checked) and each verdict of a method with separate instances read on its
    interval widened by the start effects."""
    separate = set(specbench.get("separate_instances") or ())
    controls = specbench.get("controls") or {}
    twins = specbench.get("twins") or {}
    members = [
        i
        for i, r in enumerate(results)
        if r["params"].get("method") in separate
        and r["params"].get("method") not in controls
        and (comparisons.get(i) or {}).get("speedup_vs_ar_ci95")
    ]
    if not members:
        return
    got = pairs(results, comparisons, specbench)
    starts = lvl.estimate(got)
    by_id = {r["cell_id"]: r for r in results}
    off: dict[tuple[str, Any], str] = {}  # (method, tp) -> why its verdicts are withheld
    for p in got:
        ra, rb = by_id.get(p.a), by_id.get(p.b)
        if ra is None or rb is None or ra["params"].get("method") not in twins:
            continue
        if lvl.disagree(p, lvl.estimate(got, leave_out=p.a)):
            why = (
                f"its two engine starts differ by x{math.exp(p.d):.3f} at {p.a} vs {p.b}, more than the "
                "run's other starts and its rounds allow (an instance effect)"
            )
            for r in (ra, rb):
                off[(r["params"]["method"], r["params"].get("tp"))] = why
    workers = {str(r.get("worker") or "") for i, r in enumerate(results) if i in members}
    checked = {str(by_id[p.a].get("worker") or "") for p in got if p.a in by_id}
    record: dict[str, Any] = {
        "pairs": [{"a": p.a, "b": p.b, "ratio": round(math.exp(p.d), 6), "var": p.v} for p in got],
        "tau": round(starts.sd, 6) if starts else None,
        "df": starts.k if starts else 0,
        "sat_off": sorted({why for why in off.values()}),
        "unchecked_workers": sorted(w for w in workers - checked if w),
        "widened": [],
    }
    rounds_se = {
        i: (_se2(comparisons[i]), comparisons[i].get("speedup_t"), comparisons[i].get("speedup_df"))
        for i in members
    }
    for i in members:
        r, f = results[i], comparisons[i]
        method = r["params"]["method"]
        why = off.get((method, r["params"].get("tp")))
        v = f.get("speedup_verdict")
        if why and v in VERDICTS:
            f["speedup_verdict_before_instances"] = v
            f["speedup_verdict"] = f"no verdict: {why}"
            continue
        if starts is None or starts.tau2 <= 0 or not f.get("speedup_t") or not f.get("speedup_df"):
            continue
        lo, hi = f["speedup_vs_ar_ci95"]
        nlo, nhi, nt, ndf = lvl.widen(
            f["speedup_vs_ar"], lo, hi, f["speedup_t"], int(f["speedup_df"]), starts
        )
        f["speedup_ci_rounds"] = [lo, hi]
        f.update(speedup_vs_ar_ci95=[nlo, nhi], speedup_t=round(nt, 6), speedup_df=ndf)
        f["speedup_instance_sd"] = round(starts.sd, 6)
        record["widened"].append(r["cell_id"])
        if v in VERDICTS:
            nv = Interval(f["speedup_vs_ar"], nlo, nhi, int(f.get("speedup_pairs") or 2)).verdict()
            if nv != v:
                f["speedup_verdict_before_instances"] = v
                f["speedup_verdict"] = nv
    record["combined"] = _combine(results, comparisons, members, rounds_se, twins, starts, off)
    specbench["instances"] = record


def _combine(
    results: Sequence[Mapping[str, Any]],
    comparisons: Mapping[int, dict[str, Any]],
    members: Sequence[int],
    rounds_se: Mapping[int, tuple[Any, Any, Any]],
    twins: Mapping[str, str],
    starts: lvl.Starts | None,
    off: Mapping[tuple[str, Any], str],
) -> list[str]:
    """A method's starts read together at each shape: on its first start's comparison, the mean of
    the starts' log ratios, its variance the rounds' (each start's, over s²) plus tau² (1/s + 1:
    s starts against one of the baseline), Satterthwaite's degrees of freedom, at the first
    start's level; the other starts' comparisons point to it. Not where a start's verdict was
    withheld (disturbed, off the others). Returns the first starts' cells so read."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i in members:
        r = results[i]
        m = r["params"]["method"]
        first = twins.get(m, m)
        groups.setdefault((axes(r["params"]), str(r.get("worker") or ""), first), []).append(i)
    tau2 = starts.tau2 if starts else 0.0
    k = starts.k if starts else 1
    out = []
    for (_, _, first), idx in groups.items():
        lead = [i for i in idx if results[i]["params"]["method"] == first]
        if len(idx) < 2 or not lead:
            continue
        fs = [comparisons[i] for i in idx]
        se = [rounds_se[i] for i in idx]
        if any(str(f.get("speedup_verdict", "")).startswith("no verdict") for f in fs) or any(
            x[0] is None or not x[1] or not x[2] for x in se
        ):
            continue
        if any((results[i]["params"]["method"], results[i]["params"].get("tp")) in off for i in idx):
            continue
        s = len(idx)
        c = math.fsum(math.log(f["speedup_vs_ar"]) for f in fs) / s
        rounds = (math.fsum(x[0] for x in se) / s**2, min(int(x[2]) for x in se))
        var, df = lvl.satterthwaite([rounds, (tau2 * (1 / s + 1), k)] if tau2 > 0 else [rounds])
        i0 = lead[0]
        level = t_two_sided_p(float(se[idx.index(i0)][1]), int(se[idx.index(i0)][2]))
        t = t_quantile(level, df)
        lo, hi = math.exp(c - t * math.sqrt(var)), math.exp(c + t * math.sqrt(var))
        f0 = comparisons[i0]
        before = f0.get("speedup_verdict")
        f0.update(
            speedup_per_start=[round(f["speedup_vs_ar"], 6) for f in fs],
            speedup_starts=s,
            speedup_vs_ar=math.exp(c),
            speedup_vs_ar_ci95=[lo, hi],
            speedup_t=round(t, 6),
            speedup_df=df,
            speedup_verdict=Interval(math.exp(c), lo, hi, 2).verdict(),
        )
        if before != f0["speedup_verdict"]:
            f0["speedup_verdict_before_instances"] = before
        for i in idx:
            if i != i0:
                f = comparisons[i]
                f["speedup_verdict_before_instances"] = f.get("speedup_verdict")
                f["speedup_verdict"] = (
                    f"no verdict: another start of {first}, whose verdict reads its {s} starts together"
                )
        out.append(results[i0]["cell_id"])
    return out


def lines(doc: Mapping[str, Any]) -> list[str]:
    """The screen's account of the start-to-start level: the run's tau from its pairs, the twins
    that sat off the others, the workers no pair checked; or that nothing measured it."""
    rec = (doc.get("specbench") or {}).get("instances")
    if not rec:
        return []
    out = []
    if rec.get("tau") is None:
        out.append(
            "engine starts: no pair of starts measured (no A/A control or twin with an interval): "
            "verdicts between engines started apart assume two starts of one engine run alike "
            '(docs/metrics.md "Two levels: rounds and engine starts")'
        )
    else:
        n = len(rec.get("widened") or ())
        out.append(
            f"engine starts: start-to-start sd {rec['tau']:.2%} from {rec['df']} pair(s) of starts; "
            + (f"{n} verdict interval(s) widened by it" if n and rec["tau"] else "nothing to widen")
        )
    out += [f"engine starts: withheld: {why}" for why in rec.get("sat_off") or ()]
    if rec.get("unchecked_workers"):
        out.append(
            "engine starts: no control or twin ran in worker(s) "
            + ", ".join(rec["unchecked_workers"])
            + ": their baseline instances are checked only through the run's tau"
        )
    return out
