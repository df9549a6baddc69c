"""The decision view: which method to deploy at which TP size and concurrency, from a results
JSON. Pure functions over the document ``summary.build`` makes (its ``benchmarks`` entries);
the terminal summary and ``python -m pytest_specbench.report`` print them. No pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from ..stats.paired import CV_WARN  # noqa: F401
from .cell_warnings import NO_DRAFT_WARN, warnings  # noqa: F401
from .pairwise import (  # noqa: F401  (what the views and tests read from decide)
    MIN_INTERVAL_PAIRS,
    SPEEDUP_FIELDS,
    _baseline_row,
    _gmean,
    _interleaved_tok_s,
    as_result,
    compare,
    drift_withheld,
    fmt_interval,
    fmt_speedup,
    interleaved_figures,
    open_loop_ratio,
    pair,
    relation,
    stands,
    too_few,
    verdict_text,
)
from .pareto import never_ranked


def unseparated(c: dict[str, Any]) -> str | None:
    """Why a comparison with an interval is "not separated", the reason that held (stats/paired.py's
    rule): "spans 1" (its interval contains 1), "margin" (clear of 1 but reaching into 1 ± 2 %),
    "bar" (kept under load, ``speedup_under_load``: clear of 1 ± 2 %, where a quiet verdict would
    stand, but not beyond x0.78..x1.28, and its point inside that bar: more rounds narrow the
    interval toward a point the bar holds, so they do not lift it) or "bar, point beyond" (the
    same, its point beyond the bar: more rounds narrow it and may lift it); None where its verdict
    is not "not separated" or it has no interval."""
    from ..stats.paired import EQUIVALENCE, LOAD_BIAS

    ci = c.get("speedup_vs_ar_ci95")
    if str(c.get("speedup_verdict") or "") != "not separated" or not ci:
        return None
    lo, hi = ci
    if c.get("speedup_under_load"):  # kept under load: the bar first (its point inside it, no
        point = c.get("speedup_vs_ar") or (lo * hi) ** 0.5  # count of rounds separates it)
        return "bar" if LOAD_BIAS <= point <= 1 / LOAD_BIAS else "bar, point beyond"
    if lo <= 1 <= hi:
        return "spans 1"
    if lo <= 1 + EQUIVALENCE and hi >= 1 - EQUIVALENCE:
        return "margin"
    return None  # not separated by another rule than these (none today)


def ranking(rows: list[dict[str, Any]]) -> str:
    """ranked_text.ranking: a shape's methods, each after the first as "next M xR vs P"."""
    from .ranked_text import ranking as _ranking

    return _ranking(rows)


def _tied(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether a paired comparison of two methods of one shape fails to separate them."""
    return relation(a, b) == " ≈ "


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
