"""The per-cell table of the terminal summary and the Markdown report: its columns, their
formats, the legend under it, and what a cell of it says where a bare number would mislead (an
open loop's p50-latency ratio, the interleaved baseline figure a ratio divides by, an interval from
too few rounds). Pure."""

from __future__ import annotations

from typing import Any

from . import decide
from .ranked_text import open_loop_cell
from .screen_text import counted


def _fmt(v: Any, spec: str) -> str:
    """``v`` formatted, or "-" (right-aligned to the spec's width) when it is None."""
    if v is None:
        width = spec[: len(spec) - len(spec.lstrip("0123456789"))]
        return format("-", f">{width}") if width else "-"
    if spec == "ci":  # a [lo, hi] interval
        return f"[{v[0]:.2f}, {v[1]:.2f}]"
    return format(v, spec)


# per-cell columns of the terminal table and the Markdown report: (header, extra_info key,
# format, terminal width; None: Markdown only)
COLUMNS = (
    ("tok/s", "output_tokens_per_s", ".1f", 10),
    ("accept", "accept_length", ".3f", 7),
    ("vs ar", "speedup_vs_ar", ".2f", 6),
    ("vs ar 95% CI", "speedup_vs_ar_ci95", "ci", None),
    ("rounds CV", "rounds_cv", ".1%", None),
    ("ttft p50 ms", "ttft_ms_p50", ".1f", 12),
    ("tpot p50 ms", "tpot_ms_p50", ".2f", None),
    ("lat p50 s", "latency_s_p50", ".3f", 10),
)


# shown only when a cell of the run has service-level objectives (workload key slo)
SLO_COLUMNS = (
    ("slo met", "slo_attainment", ".0%", 8),
    ("goodput tok/s", "goodput_tokens_per_s", ".1f", 14),
)


# shown only when a cell of the run has GPU energy (NVML counters)
ENERGY_COLUMNS = (("J/token", "joules_per_output_token", ".4f", 9), ("power W", "power_w_avg", ".0f", 8))


def _columns(doc: dict[str, Any], terminal: bool) -> list[tuple[str, str, str, int | None]]:
    cols = list(COLUMNS)
    for key, more in (("slo_attainment", SLO_COLUMNS), ("joules_per_output_token", ENERGY_COLUMNS)):
        if any(key in b["extra_info"] for b in doc.get("benchmarks", [])):
            cols += more
    return [c for c in cols if c[3] is not None or not terminal]


def table(doc: dict[str, Any]) -> list[str]:
    """Rows for the terminal summary: one per cell, grouped by workload."""
    cols = _columns(doc, terminal=True)
    head = f"{'cell':<48} " + " ".join(f"{h:>{w}}" for h, _, _, w in cols) + f" {'err':>4}"
    lines = [head, "-" * len(head)]
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        vals = " ".join(_fmt(e.get(k), f"{w}{f}") for _, k, f, w in cols)
        lines.append(f"{b['param']:<48} {vals} {e.get('errors', 0):>4}")
    return lines + legend(doc)


def legend(doc: dict[str, Any]) -> list[str]:
    """What tok/s and "vs ar" are, and the tok/s estimators the run's cells used."""
    from ..stats.metrics import ESTIMATORS

    used: dict[str, int] = {}
    for b in doc.get("benchmarks", []):
        est = b["extra_info"].get("tok_s_estimator")
        if est:
            used[est] = used.get(est, 0) + 1
    if not used:
        return []
    out = [
        "tok/s: the geometric mean of a cell's timed rounds' tok/s; vs ar: the geometric mean of its "
        "paired rounds' ratios to AR's (the ratio of the two tok/s shown, where every round pairs and "
        "AR's rounds were not interleaved with the cell's: see below); "
        "open loop: AR's p50 latency ÷ the cell's, per paired round (its tok/s follows the offered load); "
        "rounds CV: the coefficient of variation of a cell's rounds' tok/s, open loop of their p50 latency "
        "(marked)"
    ]
    out += [f"  {counted(n, 'cell')}, {est}: {ESTIMATORS.get(est, est)}" for est, n in sorted(used.items())]
    benches = doc.get("benchmarks", [])
    inter = sum(1 for b in benches if b["extra_info"].get("speedup_pairing") == "interleaved")
    if inter:
        out.append(
            f"  {counted(inter, 'cell')}, vs ar interleaved: AR's rounds ran between the cell's own "
            "(A B, B A, ...; a second engine in the process), and vs ar divides by those, not by AR's "
            "own cell (shown: the geometric mean of those rounds' tok/s; open loop of their p50 "
            "latency, beside the cell's own rounds' p50s, so x is the ratio of the two shown)"
        )
    return out


def _md_value(e: dict[str, Any], key: str, spec: str) -> str:
    """A Markdown table cell: "vs ar" names what it divides where that is not the two tok/s shown
    (open loop: p50 latency; interleaved: the baseline's rounds beside the cell, with their figure,
    and an open loop's own rounds' p50, computed alike); an interval from too few rounds without
    a verdict is said as such, one with a verdict carries its count; an open loop's rounds CV is of
    its rounds' p50 latency, said; one the bar a verdict kept under load must clear held
    (decide.unseparated) says so, never "too few": its interval cleared 1 ± 2 %."""
    if key == "speedup_vs_ar_ci95" and e.get(key):
        from ..stats.paired import LOAD_BIAS

        pairs = e.get("speedup_pairs")
        bar = (
            f"under load: not beyond x{LOAD_BIAS:.2f}..x{1 / LOAD_BIAS:.2f}"
            if str(decide.unseparated(e)).startswith("bar")
            else ""
        )
        if isinstance(pairs, int) and 0 < pairs < decide.MIN_INTERVAL_PAIRS:
            if decide.too_few(e[key], pairs, e.get("speedup_verdict")):
                return f"{pairs} rounds: too few"
            return f"{_fmt(e[key], spec)} ({pairs} rounds{'; ' + bar if bar else ''})"
        if bar:
            return f"{_fmt(e[key], spec)} ({bar})"
    out = _fmt(e.get(key), spec)
    if key == "rounds_cv" and e.get(key) is not None and open_loop_cell(e):
        return out + " (p50 latency)"
    if key != "speedup_vs_ar" or e.get(key) is None or e.get("speedup_verdict") == "baseline":
        return out
    open_loop = decide.open_loop_ratio(e)
    if open_loop:
        out += " (p50 latency)"
    ref = e.get("reference") or {}
    if e.get("speedup_pairing") == "interleaved" and ref:
        got = decide.interleaved_figures(e)
        if got and open_loop:  # x is the ratio of these two: the pooled p50 in its column is not
            out += f": {ref.get('method')}'s interleaved p50 {got[1]:.3f} s ÷ its rounds' p50 {got[0]:.3f} s"
        elif got:
            out += f" vs {ref.get('method')}'s interleaved {got[1]:.1f} tok/s"
    return out
