"""A shape's methods as one line, in the notation the end-of-run screen and the Markdown report
share: the first with its x over the baseline ("draft x1.39 [1.31, 1.48] faster vs ar"), each
after it as "next M xR [interval] verdict vs P" (M over the method P before it, over paired rounds,
read left to right), the figures each rests on in parentheses; and the "fastest" column. Pure."""

from __future__ import annotations

from typing import Any

from ..stats.paired import CV_WARN
from .pairwise import (
    _baseline_row,
    _interleaved_tok_s,
    fmt_speedup,
    pair,
    relation,
    verdict_text,
)


def _details(r: dict[str, Any]) -> list[str]:
    """What a row adds to its figure: accept length, SLO attainment, saturation, a noisy CV (open
    loop: of its rounds' p50 latency, said)."""
    parts = []
    if r.get("accept_length"):
        parts.append(f"accept {r['accept_length']:.2f}")
    if r.get("slo_attainment") is not None:
        parts.append(f"slo met {r['slo_attainment']:.0%}")
    if r.get("saturated"):
        parts.append("saturated")
    if r.get("rounds_cv") is not None and r["rounds_cv"] > CV_WARN:
        what = "rounds' p50 latency CV" if open_loop_cell(r) else "rounds CV"
        parts.append(f"{what} {r['rounds_cv']:.0%}")
    return parts


def open_loop_cell(e: dict[str, Any]) -> bool:
    return bool(e.get("offered_request_rate")) or e.get("tok_s_estimator") == "open loop"


def _figure(r: dict[str, Any]) -> str:
    """The figure a row stands on: its tok/s (open loop: its p50 latency); ranked by the
    interleaved speedup, beside its interleaved baseline rounds' (``_interleaved_tok_s``)."""
    if r.get("_ranked_by") == "interleaved":
        return _interleaved_tok_s(r)
    if r.get("offered_request_rate"):
        return f"p50 {r.get('latency_s_p50') or 0:.3f} s"
    return f"{r['output_tokens_per_s']:.1f} tok/s"


def method_summary(r: dict[str, Any]) -> str:
    """The first of a ranking: "ngram 812.4 tok/s (x1.18 [1.10, 1.27] faster vs ar, accept 2.10)";
    open loop: its p50 latency; ranked by the interleaved speedup (rank_closed_loop): that speedup
    first, then the cell's tok/s beside its interleaved baseline rounds' (``_interleaved_tok_s``);
    the baseline "ar 500.0 tok/s (the baseline)" (no x: a ratio to itself says nothing)."""
    interleaved = r.get("_ranked_by") == "interleaved"
    parts = _details(r)
    if _baseline_row(r):
        if interleaved:
            return f"{r['method']} ({', '.join(['the baseline', _figure(r), *parts])})"
        return f"{r['method']} {_figure(r)} ({', '.join(['the baseline', *parts])})"
    versus = f"{fmt_speedup(r)} vs {r.get('speedup_baseline')}" if r.get("speedup_vs_ar") is not None else ""
    if interleaved:
        return f"{r['method']} {versus} ({', '.join([_figure(r), *parts])})"
    parts = [versus, *parts] if versus else parts
    return f"{r['method']} {_figure(r)}" + (f" ({', '.join(parts)})" if parts else "")


def link(r: dict[str, Any], prev: dict[str, Any], prev_said: bool = True) -> dict[str, Any] | None:
    """The comparison a ranking prints for ``r`` after ``prev`` ("next r x0.81 [..] slower vs
    prev": r over prev, read left to right; decide.pair: the JSON's own fields where one of the two
    is the baseline); None where it is already said (r is the baseline, and prev's own x over it
    was printed: ``prev_said``)."""
    own = prev.get("speedup_vs_ar") is not None and not _baseline_row(prev)
    if _baseline_row(r) and own and prev_said:
        return None
    return pair(r, prev)


def link_text(c: dict[str, Any]) -> str:
    """A link's comparison: "x0.81 [0.75, 0.88] slower"; without a ratio its verdict."""
    if c.get("speedup_vs_ar") is None:
        v = verdict_text(c)
        return "unpaired (different requests)" if v.startswith("unpaired") else v or "no paired comparison"
    return fmt_speedup(c)


def next_summary(r: dict[str, Any], prev: dict[str, Any]) -> str:
    """A method after the one before it: "next draft-oracle x0.86 [0.70, 1.04] not separated vs ar
    (279.3 tok/s; ...)"; its own x over the baseline among the details where the link is not it;
    the baseline after a method whose x over it was said: "next ar 500.0 tok/s (the baseline)"."""
    c = link(r, prev)
    if c is None:
        return "next " + method_summary(r)
    details = [_figure(r)]
    if _baseline_row(r):
        details.insert(0, "the baseline")
    elif not _baseline_row(prev) and r.get("speedup_vs_ar") is not None:
        details.append(f"{fmt_speedup(r)} vs {r.get('speedup_baseline')}")
    return f"next {r['method']} {link_text(c)} vs {prev['method']} ({', '.join(details + _details(r))})"


def ranking(rows: list[dict[str, Any]]) -> str:
    """Methods in the order of the quantity each row leads with, each after the first as "next M
    xR [interval] verdict vs P": M over the method P before it, over paired rounds (the notation
    of the end-of-run screen; the paired rounds can disagree with the pooled p50 or tok/s that
    orders the rows)."""
    rest = [next_summary(b, a) for a, b in zip(rows, rows[1:], strict=False)]
    return "; ".join([method_summary(rows[0]), *rest])


def fastest_cell(ranked: list[dict[str, Any]]) -> str:
    """The "fastest" column: the first method in bold only when a paired comparison puts it ahead
    of the second (a verdict); otherwise no method is called fastest: "no verdict (B vs A: not
    separated)", the second over the first as the ranking's "next" reads them."""
    win, run = ranked[0], ranked[1]
    if relation(win, run) == " > ":
        return f"**{win['method']}**"
    c = pair(run, win)
    return f"no verdict ({run['method']} vs {win['method']}: {_short(c)})"


def _short(c: dict[str, Any]) -> str:
    """A comparison's verdict without its details (those are the cells' rows'): "not separated",
    "no interval (1 round)", "faster", "withheld", "unpaired"."""
    v = verdict_text(c)
    if v.startswith("no verdict"):
        return "withheld"
    if v.startswith("no interval"):  # "no interval, 1 round": one pair of parentheses in the cell
        return v.replace(" (", ", ").rstrip(")")
    return v.split(":", 1)[0].split(" (", 1)[0] or "no paired comparison"
