"""A comparison of two cells of one shape as the views print it: decide.compare (paired.compare
with the run's drift withholding), ``pair`` (the JSON's own fields where one side is the
baseline), an interval with its rounds' count, a verdict said as printed, and the figures an
interleaved ratio divides. Shared by decide.py, ranked_text.py and the screen. Pure: no pytest."""

from __future__ import annotations

from typing import Any

from ..stats.paired import compare as _compare


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Paired comparison of two JSON entries of one shape (paired.compare): a over b, its
    interval read at the looks either cell's rounds were chosen at, and its verdict withheld as
    the run's own are where the two were measured apart inside a family's drift (drift.py)."""
    return drift_withheld(_compare(as_result(a), as_result(b)), a, b)


def drift_withheld(c: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """``c`` with its verdict withheld when the two cells were measured apart (not interleaved)
    and either sits in a family whose sentinel read a drift the verdict is not clear of: the
    rule the run applies to each cell's verdict against its baseline (drift.apply)."""
    from . import drift

    v = c.get("speedup_verdict")
    if c.get("speedup_pairing") == "interleaved" or v not in drift.VERDICTS:
        return c
    d = established_drift(a, b)
    if d is None:  # no family's drift established: nothing to withhold
        return c
    why = drift.not_clear(c, drift.record_band(d), v)
    if not why:
        return c
    said = f"no verdict: {why} of the drift its family {d['family']} measured ({d['drift']:+.1%})"
    return {**c, "speedup_verdict_before_drift": v, "speedup_verdict": said}


def established_drift(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """The drift (a cell's ``speedup_drift``) of the family either cell sits in whose band is the
    larger, where that band is established (drift.record_band > 0); None otherwise. What a
    comparison of the two measured apart is not clear of (``drift_withheld``), and the bias bound
    a pooled figure widens that shape by (report/pooled.py)."""
    from . import drift

    drifts = [
        d
        for d in ((x.get("extra_info") or {}).get("speedup_drift") for x in (a, b))
        if isinstance(d, dict) and d.get("drift") is not None and d["drift"] > -1
    ]
    if not drifts:
        return None
    d = max(drifts, key=drift.record_band)
    return d if drift.record_band(d) else None


def as_result(b: dict[str, Any]) -> dict[str, Any]:
    """A JSON entry in the shape paired.compare reads (params, metrics, round times)."""
    return {
        "params": b["params"],
        "metrics": b["extra_info"],
        # the looks its rounds were chosen at (extra_info.sequential): the same interval as the run's
        "extra_info": b["extra_info"],
        "round_times": (b.get("stats") or {}).get("data") or [],
    }


MIN_INTERVAL_PAIRS = 3  # fewer paired rounds (t with 1 degree of freedom): an interval said with its count


def stands(verdict: Any) -> bool:
    """Whether a comparison's verdict was drawn: faster, slower or within the margin (paired.py's
    rule, which draws one from 2 paired rounds on when their interval clears the margin)."""
    v = str(verdict or "").split(" (", 1)[0]
    return v in ("faster", "slower") or v.startswith("within")


def too_few(ci: Any, pairs: Any, verdict: Any) -> bool:
    """Whether an interval rests on fewer than MIN_INTERVAL_PAIRS pairs and that count is what
    held its comparison: no verdict stands and the interval reaches into 1 ± 2 % (one clear of it,
    held by the bar a verdict kept under load must clear or withheld for another reason, was not
    held by the count)."""
    from ..stats.paired import EQUIVALENCE

    if not ci or not isinstance(pairs, int) or not 0 < pairs < MIN_INTERVAL_PAIRS or stands(verdict):
        return False
    return ci[0] <= 1 + EQUIVALENCE and ci[1] >= 1 - EQUIVALENCE


def fmt_interval(ci: Any, pairs: Any = None, verdict: Any = None) -> str:
    """ " [1.10, 1.27]"; from fewer than MIN_INTERVAL_PAIRS rounds (``pairs``) the count is said:
    " [1.41, 1.51] (2 rounds)" where the verdict stands (its interval cleared the margin even at
    t = 12.7) or what held it was not the count (``too_few``: kept under load, [0.75, 0.97] is
    inside x0.78..x1.28), " (interval: 2 rounds, too few)" where the count held it (two rounds'
    intervals like [0.00, 1492.05] say nothing)."""
    few = bool(ci) and isinstance(pairs, int) and 0 < pairs < MIN_INTERVAL_PAIRS
    if too_few(ci, pairs, verdict):
        return f" (interval: {pairs} rounds, too few)"
    return (f" [{ci[0]:.2f}, {ci[1]:.2f}]" + (f" ({pairs} rounds)" if few else "")) if ci else ""


def verdict_text(c: dict[str, Any]) -> str:
    """A comparison's verdict as printed: without an interval (one paired round, or a pooled p50
    of an older JSON) "no interval (1 round)", never a sign that reads as a tie."""
    v = str(c.get("speedup_verdict") or "")
    if v.startswith("one pair"):
        pairs = c.get("speedup_pairs")
        return f"no interval ({pairs} round)" if pairs == 1 else "no interval (no paired rounds)"
    return v


def open_loop_ratio(c: dict[str, Any]) -> bool:
    """Whether a comparison's x is a p50-latency ratio (open loop: the baseline's p50 ÷ the
    method's), not a tok/s speedup."""
    return str(c.get("speedup_metric") or "").startswith("latency")


def fmt_speedup(c: dict[str, Any]) -> str:
    """ "x1.18 [1.10, 1.27] faster" from a cell's (or a comparison's) speedup fields."""
    ci = fmt_interval(c.get("speedup_vs_ar_ci95"), c.get("speedup_pairs"), c.get("speedup_verdict"))
    return f"x{c['speedup_vs_ar']:.2f}{ci} {verdict_text(c)}".strip()


def _gmean(xs: Any) -> float | None:
    """The geometric mean of the positive values: a cell's tok/s is that of its rounds, and x of
    paired rounds is then the ratio of two such means."""
    import math

    vals = [float(x) for x in xs or () if x and x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def interleaved_figures(r: dict[str, Any]) -> tuple[float, float] | None:
    """(the cell's figure, its interleaved baseline rounds') computed alike, so x is their ratio:
    closed loop the geometric means of the rounds' tok/s (the cell's is its tok/s); open loop of
    the rounds' p50 latency (the cell's round_latency_s_p50, the rounds paired.py divides)."""
    from ..stats.paired import round_p50s

    ref = r.get("reference") or {}
    if r.get("offered_request_rate") or open_loop_ratio(r):
        own = _gmean(r.get("round_latency_s_p50") or round_p50s(r))  # an older JSON: from per_request
        theirs = _gmean(ref.get("round_latency_s_p50"))
    else:
        own, theirs = r.get("output_tokens_per_s"), _gmean(ref.get("round_tokens_per_s"))
    return (own, theirs) if own and theirs else None


def _interleaved_tok_s(r: dict[str, Any]) -> str:
    """The two figures an interleaved speedup rests on: the cell's own tok/s and the geometric mean
    of the baseline's rounds interleaved with it (open loop: the geometric means of the cell's
    rounds' p50 latency and of the baseline rounds', beside its pooled p50); for the baseline row,
    its own cell's (run apart from the others: the interleaved rounds of a slower neighbour, e.g.
    two engines in one process, may run slower)."""
    open_loop = bool(r.get("offered_request_rate"))
    own = f"p50 {r['latency_s_p50']:.3f} s" if open_loop else f"{r['output_tokens_per_s']:.1f} tok/s"
    if _baseline_row(r):
        return f"its own cell {own}"
    ref = r.get("reference") or {}
    got = interleaved_figures(r)
    if got is None:
        return own
    if open_loop:
        return (
            f"{own}; its rounds' p50 {got[0]:.3f} s, its interleaved {ref.get('method')} rounds' "
            f"p50 {got[1]:.3f} s"
        )
    return f"{own}; its interleaved {ref.get('method')} rounds {got[1]:.1f} tok/s"


SPEEDUP_FIELDS = (
    "speedup_vs_ar",
    "speedup_vs_ar_ci95",
    "speedup_pairs",
    "speedup_verdict",
    "speedup_metric",
    "speedup_pairing",
)


def pair(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The comparison of row a over row b of one shape: where one of them is the shape's baseline
    and the other has its verdict against it, the other's own fields (the JSON's; inverted when a is
    the baseline), else compare() of the two cells."""
    from ..stats.paired import _inverse

    if _baseline_row(b) and not _baseline_row(a) and a.get("speedup_verdict"):
        return {k: a.get(k) for k in SPEEDUP_FIELDS}
    if _baseline_row(a) and not _baseline_row(b) and b.get("speedup_verdict"):
        return _inverse({k: b.get(k) for k in SPEEDUP_FIELDS})
    return compare(a["_entry"], b["_entry"])


def relation(a: dict[str, Any], b: dict[str, Any]) -> str:
    """ " > " / " < " / " ≈ ": the verdict of a over b (``pair``), as a sign (which shapes have a
    verdict, who is fastest; never printed between methods)."""
    v = pair(a, b).get("speedup_verdict")
    return {"faster": " > ", "slower": " < "}.get(str(v), " ≈ ")


def _baseline_row(r: dict[str, Any]) -> bool:
    return r.get("speedup_baseline") == r["method"]
