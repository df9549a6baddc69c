"""A family's drift, from its sentinel, and the verdicts it withholds (docs/metrics.md "Drift
sentinel"). Pure: no pytest, no I/O.

A family (deciding/families.py) is a baseline that is not interleaved plus the groups compared with
it, run back to back; its sentinel re-runs the baseline's first shape after them, for as many
timed rounds as the baseline's cell ran (older runs: one). The drift is the sentinel's rounds'
speed over the baseline's own rounds of the shape (ratio of their geometric means; closed loop
tok/s, open loop p50 latency inverted), so -3 % means the machine ran 3 % slower by the end of
the family. Its 95 % interval is a t-interval on the difference of the two sets' mean logs, their
variance pooled (one engine, one shape: n + m - 2 degrees of freedom; with one sentinel round
this is the prediction interval for one more round of the baseline).

The drift withholds only what its interval could overturn, and only when it is established (its
interval excludes 0): without it, a sentinel's noise alone would withhold correct verdicts. An
established drift's band is its interval's far end from 0 (|log|): "faster" / "slower" need
|log speedup| >= the band and the whole interval beyond it; "within ±2%" needs the band within
the ±2 % margin. Otherwise the verdict is withheld, with the drift as the reason.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..stats.drift import SENTINEL_MAX_ROUNDS, SENTINEL_MIN_ROUNDS, band_of, drift_interval, sentinel_rounds  # noqa: F401
from ..stats.paired import EQUIVALENCE, round_p50s, round_rates
from .screen_text import counted

VERDICTS = ("faster", "slower", f"within ±{EQUIVALENCE:.0%}")


def measure(
    results: Sequence[Mapping[str, Any]], sentinels: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One record per sentinel: the family, its groups, the drift (ratio - 1, None when it could
    not be measured, with ``why``), its interval, the minutes between the baseline's cell and
    the sentinel, and whether the sentinel's round got the requests of the baseline's first."""
    by_id = {r["cell_id"]: r for r in results}
    out = []
    for s in sentinels:
        rec: dict[str, Any] = {
            "family": s["family"],
            "groups": list(s.get("groups") or []),
            "sentinel_cell": s["cell_id"],
            "baseline_cell": s["baseline_cell"],
            "drift": None,
        }
        base = by_id.get(s["baseline_cell"])
        if base is None:
            rec["why"] = f"the baseline's cell {s['baseline_cell']} has no result in this run"
            out.append(rec)
            continue
        open_loop = bool(base["params"].get("request_rate"))
        if open_loop:  # speed: the inverse of p50 latency
            own = [1 / x for x in round_p50s(base["metrics"]) if x]
            then = [1 / x for x in s.get("round_latency_s_p50") or [] if x]
        else:
            own = [x for x in round_rates(base["metrics"], base.get("round_times") or []) if x > 0]
            then = [x for x in s.get("round_tokens_per_s") or [] if x and x > 0]
        if not own or not then:
            rec["why"] = "no round to compare (the sentinel or the baseline measured nothing)"
            out.append(rec)
            continue
        logs, later = [math.log(x) for x in own], [math.log(x) for x in then]
        d = statistics.fmean(later) - statistics.fmean(logs)
        rec.update(
            metric="p50 latency (open loop; inverted)" if open_loop else "output tok/s",
            baseline=math.exp(statistics.fmean(logs)),
            sentinel=math.exp(statistics.fmean(later)),
            rounds=len(own),
            sentinel_rounds=len(then),
            ratio=math.exp(d),
            drift=math.exp(d) - 1,
            drift_ci95=None,
        )
        iv = drift_interval(logs, later)
        if iv is not None:
            rec["drift_ci95"] = [math.exp(iv[0]) - 1, math.exp(iv[1]) - 1]
        rec["established"], rec["band"] = band_of(d, iv)
        if s.get("at") is not None and s.get("baseline_at") is not None:
            rec["minutes"] = (s["at"] - s["baseline_at"]) / 60
        if s.get("disturbed"):  # still withholds: a slower sentinel only widens the band
            rec["sentinel_disturbed"] = s["disturbed"]
        digests = base["metrics"].get("request_digests") or []
        mine = s.get("request_digests") or []
        if digests and mine:
            rec["same_requests"] = digests[0] == mine[0]
        out.append(rec)
    return out


def record_band(rec: Mapping[str, Any]) -> float:
    """The band a drift record (or a cell's ``speedup_drift``) withholds within; older records
    without one: |log(1 + drift)|."""
    if rec.get("band") is not None:
        return float(rec["band"])
    return abs(math.log(1 + rec["drift"]))


def _says(rec: Mapping[str, Any]) -> str:
    over = f" over {rec['minutes']:.1f} min" if rec.get("minutes") is not None else ""
    ci = rec.get("drift_ci95")
    return f"{rec['drift']:+.1%}" + (f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else "") + over


def withhold(
    results: Sequence[Mapping[str, Any]],
    comparisons: Mapping[int, dict[str, Any]],
    drifts: list[dict[str, Any]],
) -> None:
    """In place: each family member's comparison gets ``speedup_drift`` (its family's drift), and
    a verdict not clear of an established drift's band becomes "no verdict: ..."
    (``speedup_verdict_before_drift`` keeps the one withheld); the family's record lists the cells
    withheld. A drift whose interval reaches 0 withholds nothing."""
    fam = {g: rec for rec in drifts if rec.get("drift") is not None for g in rec["groups"][1:]}
    for rec in drifts:
        rec.setdefault("withheld", [])
    for i, r in enumerate(results):
        rec = fam.get(r.get("group", ""))
        f = comparisons.get(i)
        if rec is None or f is None or f.get("speedup_pairing") == "interleaved":
            continue
        if f.get("speedup_verdict") is None:
            continue
        f["speedup_drift"] = {
            "family": rec["family"],
            "sentinel_cell": rec.get("sentinel_cell"),  # the sentinel it was read from
            "drift": rec["drift"],
            "drift_ci95": rec.get("drift_ci95"),
            "band": record_band(rec),
            "minutes": rec.get("minutes"),
        }
        v = f["speedup_verdict"]
        if v not in VERDICTS or not record_band(rec):
            continue
        why = not_clear(f, record_band(rec), v)
        if why:
            f["speedup_verdict_before_drift"] = v
            f["speedup_verdict"] = (
                f"no verdict: {why} of the drift its family {rec['family']} measured ({_says(rec)})"
            )
            rec["withheld"].append(r["cell_id"])


def not_clear(f: Mapping[str, Any], band: float, verdict: str) -> str | None:
    """Why a verdict is not clear of a drift of ``band`` (|log ratio|), or None."""
    if verdict.startswith("within"):
        if band > math.log(1 + EQUIVALENCE):
            return f"a tie within ±{EQUIVALENCE:.0%} says nothing in the presence"
        return None
    point = f.get("speedup_vs_ar")
    ci = f.get("speedup_vs_ar_ci95")
    if not point or not ci:
        return "no interval to hold against it in the presence"
    if abs(math.log(point)) < band:
        return f"x{point:.3f} is smaller than the band x{math.exp(-band):.3f}..x{math.exp(band):.3f}"
    lo, hi = ci
    if not (math.log(lo) > band or math.log(hi) < -band):
        return (
            f"x{point:.3f} [{lo:.3f}, {hi:.3f}] reaches into the band "
            f"x{math.exp(-band):.3f}..x{math.exp(band):.3f}"
        )
    return None


def apply(
    results: Sequence[Mapping[str, Any]], comparisons: Mapping[int, dict[str, Any]], specbench: dict[str, Any]
) -> None:
    """``specbench["drift"]`` from ``specbench["sentinels"]`` (the families' sentinels of this
    run), and the verdicts it withholds; nothing without sentinels."""
    sentinels = specbench.get("sentinels") or []
    if not sentinels:
        return
    drifts = measure(results, sentinels)
    withhold(results, comparisons, drifts)
    specbench["drift"] = drifts


def lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per family, e.g. "drift ar-tp1: -3.1 % [-5.0 %, -1.2 %] over 42 min (...)"; in a
    merged sharded run one per family and shard ("drift ar-tp1 (shard 1/2): ...")."""
    out = []
    for rec in (doc.get("specbench") or {}).get("drift") or []:
        name = family_label(rec)
        if rec.get("drift") is None:
            out.append(f"drift {name}: not measured: {rec.get('why')}")
            continue
        ci = rec.get("drift_ci95")
        iv = f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
        unit = "tok/s" if rec.get("metric") == "output tok/s" else "/s (1 / p50 latency)"
        withheld = rec.get("withheld") or []
        said = f"; {counted(len(withheld), 'verdict')} withheld ({', '.join(withheld)})" if withheld else ""
        if rec.get("established") is False:
            said += "; its interval reaches 0, within the rounds' spread: no verdict withheld"
        if rec.get("sentinel_disturbed"):
            said += f"; the sentinel was disturbed: {rec['sentinel_disturbed']}"
        over = f" over {rec['minutes']:.1f} min" if rec.get("minutes") is not None else ""
        out.append(
            f"drift {name}: {rec['drift']:+.1%}{iv}{over} ({rec['sentinel_cell']}: "
            f"{rec['sentinel']:.4g} {unit} over {counted(rec.get('sentinel_rounds', 1), 'round')} against "
            f"{rec['baseline']:.4g} over the baseline's {rec['rounds']}; "
            f"family {', '.join(rec['groups'])}{said})"
        )
    return out


def family_label(rec: Mapping[str, Any]) -> str:
    """A drift record's family as the views name it: with its shard where a merge of a sharded
    run holds one record per shard of the family ("ar-tp1 (shard 1/2)")."""
    return f"{rec.get('family')}" + (f" (shard {rec['shard']})" if rec.get("shard") else "")
