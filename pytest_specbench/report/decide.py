"""The decision view: which method to deploy at which TP size and concurrency, from a results
JSON. Pure functions over the document ``summary.build`` makes (its ``benchmarks`` entries);
the terminal summary and ``python -m pytest_specbench.report`` print them. No pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from .cell_warnings import NO_DRAFT_WARN, warnings  # noqa: F401
from .paired import CV_WARN  # noqa: F401
from .paired import compare as _compare
from .pareto import never_ranked


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
    drifts = [
        d
        for d in ((x.get("extra_info") or {}).get("speedup_drift") for x in (a, b))
        if isinstance(d, dict) and d.get("drift") is not None and d["drift"] > -1
    ]
    if not drifts:
        return c
    d = max(drifts, key=drift.record_band)
    if not drift.record_band(d):  # no family's drift established: nothing to withhold
        return c
    why = drift.not_clear(c, drift.record_band(d), v)
    if not why:
        return c
    said = f"no verdict: {why} of the drift its family {d['family']} measured ({d['drift']:+.1%})"
    return {**c, "speedup_verdict_before_drift": v, "speedup_verdict": said}


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


def fmt_interval(ci: Any, pairs: Any = None, verdict: Any = None) -> str:
    """ " [1.10, 1.27]"; from fewer than MIN_INTERVAL_PAIRS rounds (``pairs``) the count is said:
    " [1.41, 1.51] (2 rounds)" where the verdict stands (its interval cleared the margin even at
    t = 12.7), " (interval: 2 rounds, too few)" where none was drawn (two rounds' intervals like
    [0.00, 1492.05] say nothing)."""
    few = bool(ci) and isinstance(pairs, int) and 0 < pairs < MIN_INTERVAL_PAIRS
    if few and not stands(verdict):
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
    from .paired import round_p50s

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


def ranking(rows: list[dict[str, Any]]) -> str:
    """ranked_text.ranking: a shape's methods, each after the first as "next M xR vs P"."""
    from .ranked_text import ranking as _ranking

    return _ranking(rows)


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
    from .paired import _inverse

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


def _tied(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether a paired comparison of two methods of one shape fails to separate them."""
    return relation(a, b) == " ≈ "


def _baseline_row(r: dict[str, Any]) -> bool:
    return r.get("speedup_baseline") == r["method"]


_SHAPE_ORDER = ("workload", "tp", "concurrency", "context_tokens", "output_tokens")


def _natural(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Sort key of a shape key (baseline, (param, value), ...): workload, TP, concurrency,
    context, output, then the rest; numbers as numbers (c2 before c16)."""

    def num(v: str) -> tuple[int, float, str]:
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)

    pairs = dict(key[1:])
    names = [k for k in _SHAPE_ORDER if k in pairs] + sorted(k for k in pairs if k not in _SHAPE_ORDER)
    return (key[0], *((k, num(pairs[k])) for k in names))


def _all_interleaved(rows: list[dict[str, Any]]) -> bool:
    return all(_baseline_row(r) or r.get("speedup_pairing") == "interleaved" for r in rows)


def rank_closed_loop(rows: list[dict[str, Any]]) -> None:
    """Fastest first: by the speedup over the baseline's interleaved rounds when every row but
    the baseline has one (tok/s of groups run minutes apart carry the machine's drift; each row
    is then marked ``_ranked_by: "interleaved"`` so method_summary leads with that speedup), else
    by output tok/s."""
    if _all_interleaved(rows):
        rows.sort(
            key=lambda r: (
                bool(r.get("saturated")),
                -(1.0 if _baseline_row(r) else r.get("speedup_vs_ar") or 0.0),
            )
        )
        for r in rows:
            r["_ranked_by"] = "interleaved"
    else:
        rows.sort(key=lambda r: -r["output_tokens_per_s"])


def ranked_shapes(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """For each cell shape (workload, TP, concurrency, prompt and output tokens, other axes, and
    the target model, named by its AR baseline) measured with two or more methods: a label and
    the methods' extra_info (plus "method"), fastest output tok/s first."""
    shapes = _varying(doc, "method")
    several_models = len({k[0] for k in shapes}) > 1
    out = []
    for key, cells in sorted(shapes.items(), key=lambda kv: _natural(kv[0])):
        if len(cells) < 2:
            continue
        rows = [{"method": m, **b["extra_info"], "_entry": b} for m, b in cells]
        if any(r.get("offered_request_rate") for r in rows) and not _all_interleaved(rows):
            # open loop, its baseline run apart: unsaturated, lower latency first
            rows.sort(key=lambda r: (bool(r.get("saturated")), r.get("latency_s_p50") or float("inf")))
        else:  # closed loop, or an open loop whose baseline ran interleaved: by that speedup
            rank_closed_loop(rows)
        label = _shape_label(dict(key[1:]))
        if several_models:
            label += f" (model of {key[0]})"
        out.append((label, rows))
    return out


def _varying(doc: dict[str, Any], axis: str) -> dict[tuple[Any, ...], list[tuple[Any, dict[str, Any]]]]:
    """Cells with throughput grouped by everything but ``axis``: key (the cell's AR baseline,
    (param, str(value)) of every other param, sorted), value [(the cell's ``axis`` value, its
    JSON entry)] in the order of the axis. Cells of one key differ only in ``axis``. Cells with a
    forced accept length (a system-cost measurement, never ranked as a drafter: breakeven.py reads
    them) and cells a race dropped are left out (pareto.never_ranked)."""
    by: dict[tuple[Any, ...], list[tuple[Any, dict[str, Any]]]] = {}
    for b in doc.get("benchmarks", []):
        p, e = dict(b.get("params") or {}), b["extra_info"]
        if not e.get("output_tokens_per_s") or axis not in p or "method" not in p:
            continue
        if never_ranked(e):
            continue
        value = p.pop(axis)
        if axis == "request_rate":  # a trace's rate follows its speed
            p.pop("speed", None)
        key = (e.get("speedup_baseline") or "-", *sorted((k, str(v)) for k, v in p.items()))
        by.setdefault(key, []).append((value, b))
    return {k: sorted(v, key=lambda x: x[0]) for k, v in by.items()}


def _method_and_label(key: tuple[Any, ...]) -> str:
    """ "ar ttft tp1 in256 out64" from a _varying key whose params still hold the method."""
    params = dict(key[1:])
    return f"{params.pop('method')} {_shape_label(params)}"


def _shape_label(axes: dict[str, Any]) -> str:
    """ "throughput tp1 c32 in128 out256 category=code" from a cell's params (without method)."""
    axes = dict(axes)
    label = " ".join(
        f"{prefix}{axes.pop(k)}"
        for k, prefix in (
            ("workload", ""),
            ("tp", "tp"),
            ("concurrency", "c"),
            ("context_tokens", "in"),
            ("output_tokens", "out"),
        )
        if k in axes
    )
    return label + "".join(f" {k}={v}" for k, v in axes.items())


def tp_scaling(doc: dict[str, Any]) -> list[str]:
    """For each method and shape measured at two or more TP sizes: tok/s and tok/s per GPU at
    each (the "which TP" question: more GPUs per engine, or more engines of fewer GPUs)."""
    out = []
    for key, cells in _varying(doc, "tp").items():
        if len(cells) < 2:
            continue
        vals = [(tp, b["extra_info"]["output_tokens_per_s"]) for tp, b in cells]
        per = ", ".join(f"tp{tp} {v:.1f} ({v / int(tp):.1f}/GPU)" for tp, v in vals)
        out.append(f"{_method_and_label(key)}: {per}")
    return out


def sustained_rates(doc: dict[str, Any]) -> list[str]:
    """For each method and open-loop shape: the highest request rate it sustained without
    saturating (its p50 latency there), and the lowest at which it saturated (what it completed
    of what was offered), methods that sustain more first: the open loop's capacity ranking."""
    rows = []
    for key, cells in _varying(doc, "request_rate").items():
        vals = [(float(r), b["extra_info"]) for r, b in cells if b["extra_info"].get("offered_request_rate")]
        if not vals:
            continue
        ok = [(r, e) for r, e in vals if not e.get("saturated")]
        bad = [(r, e) for r, e in vals if e.get("saturated")]
        parts = []
        if ok:
            r, e = max(ok, key=lambda x: x[0])
            parts.append(f"sustains {r:g} req/s (p50 {e.get('latency_s_p50') or 0:.3f} s)")
        else:
            parts.append("sustains none of the rates run")
        if bad:
            r, e = min(bad, key=lambda x: x[0])
            parts.append(
                f"saturated at {r:g} req/s (completed {e.get('achieved_request_rate') or 0:.2f} of "
                f"{e.get('offered_request_rate') or 0:.2f} offered)"
            )
        best = max((r for r, _ in ok), default=0.0)
        rows.append((-best, _method_and_label(key), "; ".join(parts)))
    return [f"{label}: {text}" for _, label, text in sorted(rows)]


SLO_TARGET = 0.9  # a concurrency "holds" the SLO when at least this fraction of requests met it


PREFIX_HEADLINE = (
    "prefix cache (prompt tokens its hits served; a trace's own reuse: what a cache that never evicts "
    "could serve):"
)


def prefix_hits(doc: dict[str, Any]) -> list[str]:
    """One line per cell whose engine served prompt tokens from its prefix cache (agentic turns, a
    trace's shared blocks) and per trace cell: the hit rate, its tokens and, for a trace, its own
    reuse (the most a cache could serve)."""
    out = []
    for b in doc.get("benchmarks", []):
        e = b["extra_info"]
        rate, reuse = e.get("prefix_cache_hit_rate"), e.get("trace_prefix_reuse")
        if not rate and reuse is None:  # a trace is listed even at 0 hits: that is news
            continue
        tail = f" (the trace's own reuse {reuse:.1%})" if reuse is not None else ""
        said = f"{rate:.1%} of" if rate is not None else "no engine reported hits for its"
        out.append(f"{b['param']}: {said} {e.get('prompt_tokens') or 0:,} prompt tokens from the cache{tail}")
    return out


def slo_capacity(doc: dict[str, Any]) -> list[str]:
    """For each method and shape with SLO cells at two or more concurrencies: the highest
    concurrency whose requests met the SLO at least SLO_TARGET of the time, with its goodput
    (the "how many requests at once per engine" question)."""
    out = []
    for key, cells in _varying(doc, "concurrency").items():
        vals = [(c, b["extra_info"]) for c, b in cells if b["extra_info"].get("slo_attainment") is not None]
        if len(vals) < 2:
            continue
        held = [(c, e) for c, e in vals if e["slo_attainment"] >= SLO_TARGET]
        met = ", ".join(f"c{c} {e['slo_attainment']:.0%}" for c, e in vals)
        if held:
            c, e = held[-1]
            head = f"highest holding c{c} (goodput {e['goodput_tokens_per_s']:.1f} tok/s)"
        else:
            head = "no concurrency"
        out.append(f"{_method_and_label(key)}: {head}; met {met}")
    return out


def best_methods(doc: dict[str, Any]) -> list[str]:
    """The decision view as Markdown: per shape (ranked_shapes) the fastest method and every
    method ranked, then each method's tok/s by TP size (tp_scaling). Empty when neither applies."""
    out = []
    shapes = ranked_shapes(doc)
    from .ranked_text import fastest_cell

    rows = [f"| {label} | {fastest_cell(ranked)} | {ranking(ranked)} |" for label, ranked in shapes]
    if rows:
        out += [
            "",
            "Fastest method per cell shape, by the quantity each row leads with: closed loop output tok/s,",
            "or x over the baseline's rounds interleaved with each cell's where every method has it (with",
            "the cell's and those rounds' tok/s); open loop p50 E2E latency. x: vs the AR method of the same",
            "model [95% interval over paired rounds] (closed loop: output tok/s; open loop: the AR method's",
            "p50 latency ÷ the method's, > 1 faster); next M xR vs P: M over P, the method before it.",
            "Fastest in bold only where the paired rounds put it ahead of the next; else no verdict:",
            "",
            "| shape | fastest | all methods, fastest first |",
            "|---|---|---|",
            *rows,
        ]
        if any(r.get("_ranked_by") == "interleaved" for _, ranked in shapes for r in ranked):
            out += ["", INTERLEAVED_NOTE]
    from .pareto import crossover

    cross = crossover(doc)
    if cross:
        out += ["", "Crossover (per method, TP and shape: against its baseline, by concurrency):", ""]
        out += [f"- {ln}" for ln in cross]
    tps = tp_scaling(doc)
    if tps:
        out += ["", "Output tok/s by TP size (and per GPU):", "", *(f"- {ln}" for ln in tps)]
    held = sustained_rates(doc)
    if held:
        out += ["", "Open loop: the highest request rate each method sustained unsaturated:", ""]
        out += [f"- {ln}" for ln in held]
    cap = slo_capacity(doc)
    if cap:
        out += ["", f"Concurrency that holds the SLO for >= {SLO_TARGET:.0%} of requests:", ""]
        out += [f"- {ln}" for ln in cap]
    hits = prefix_hits(doc)
    if hits:
        out += ["", PREFIX_HEADLINE[0].upper() + PREFIX_HEADLINE[1:], "", *(f"- {ln}" for ln in hits)]
    from . import breakeven

    be = breakeven.lines(doc)
    if be:
        out += [
            "",
            "Forced acceptance (a verify step's cost, not a drafter; docs/break-even.md): the accept "
            "length where the speedup over AR crosses 1 [its interval]:",
            "",
        ]
        out += [f"- {ln}" for ln in be]
    warn = warnings(doc)
    if warn:
        out += ["", *(f"- {ln}" for ln in warn)]
    return out


INTERLEAVED_NOTE = (
    "Interleaved rows: x rests on the baseline's rounds run between the cell's own, on the same "
    "requests and beside the cell's engine (one process, the same cores), so those rounds' tok/s can "
    "differ from the baseline's own cell, which ran on its own minutes apart."
)
