"""The end-of-run screen: a results JSON as about 40 lines of at most WIDTH characters, the
decision first. Per cell shape the winner, its speedup over the shape's baseline with interval and
verdict, and how it stands against the runner-up (decide.py's ranking and paired comparisons, the
ones the full report prints); shapes where nothing separates, or whose verdict was withheld, are
grouped. Then what was withheld or never ranked and why, counted, each detail once; then where
the full tables are. Pure: no pytest, no I/O; ``python -m pytest_specbench.report RUN.json
--screen`` prints it from a JSON, the plugin at the end of a run.

A new reason to withhold adds one entry to ``REASONS``; a new section one function to
``SECTIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import breakeven, decide
from .mdtext import one_line
from .ranked_text import link
from .screen_text import (  # noqa: F401
    MAX_VIEW_LINES,
    MAX_WRAPPED,
    MIN_SHAPE_LINES,
    SCREEN_LINES,
    WIDTH,
    clip,
    counted,
    short_verdict,
    withheld,
    wrap,
)
from .withheld import care_line, hook_view, withheld_counts, withheld_lines  # noqa: F401


def _x(c: dict[str, Any]) -> str:
    """ "x1.33 [1.03, 1.72] faster" from comparison fields (output tok/s, as the legend says; open
    loop "x1.17 by p50 latency": the other's p50 ÷ its own), the verdict shortened; an interval
    from too few rounds said as such."""
    if c.get("speedup_vs_ar") is None:
        return short_verdict(decide.verdict_text(c)) or "no paired comparison"
    unit = " by p50 latency" if decide.open_loop_ratio(c) else ""  # else tok/s, as the legend says
    verdict = c.get("speedup_verdict")
    return (
        f"x{c['speedup_vs_ar']:.2f}{unit}"
        f"{decide.fmt_interval(c.get('speedup_vs_ar_ci95'), c.get('speedup_pairs'), verdict)} "
        f"{short_verdict(decide.verdict_text(c))}"
    ).strip()


# ------------------------------------------------------------------------- the decision per shape


def _is_baseline(r: dict[str, Any]) -> bool:
    return r.get("speedup_baseline") == r["method"]


def shape_decisions(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape of decide.ranked_shapes: its label, winner (decide's first), the winner's
    comparison with the baseline (the cell's own fields, as the report shows them), the runner-up,
    decide.pair of the winner over it (``pair``) and of the runner-up over the winner
    (``runner``), ``links``: per method after the first (method, the one before it, ranked_text.link's
    comparison: None where already said), and ``status``: "withheld" (the winner's verdict or the
    pair's was withheld, or no verdict in the shape stands and one was withheld), "decided" (some
    verdict in the shape separates), "no interval" (no comparison in the shape has one: one round a
    cell), or, where every verdict of the shape stands and none separates, the reason that held
    for each of its comparisons with an interval (``unseparated_status``): "not separated" (every
    interval spans 1), "margin" (every interval reaches into 1 ± 2 %, one clear of 1), "under
    load" (every one held by the bar a verdict kept under load must clear, its point inside it:
    more rounds do not lift it) or "under load, narrows" (the bar held one, and more rounds
    narrow an interval that may then separate)."""
    out = []
    for label, rows in decide.ranked_shapes(doc):
        win, run = rows[0], rows[1]
        pair = decide.pair(win, run)
        runner = decide.pair(run, win)
        sign = decide.relation(win, run).strip()
        verdicts = [str(r.get("speedup_verdict") or "") for r in rows if not _is_baseline(r)]
        separated = sign in (">", "<") or any(
            v in ("faster", "slower") or v.startswith("within") for v in verdicts
        )
        no_interval = not pair.get("speedup_vs_ar_ci95") and not any(
            r.get("speedup_vs_ar_ci95") or r.get("speedup_verdict") for r in rows if not _is_baseline(r)
        )
        status = (
            "withheld"
            if withheld(win.get("speedup_verdict")) or withheld(pair.get("speedup_verdict"))
            else "decided"
            if separated
            else "withheld"  # nothing separates, and a verdict of the shape was withheld
            if any(withheld(v) for v in verdicts)
            else "no interval"  # e.g. one round a cell, no baseline in the shape: nothing to decide
            if no_interval
            else unseparated_status([r for r in rows if not _is_baseline(r)], [pair, runner])
        )
        out.append(
            {
                "label": label,
                "winner": win,
                "runner_up": run,
                "rows": rows,
                "sign": sign,
                "pair": pair,
                "runner": runner,
                # the winner's own x over the baseline is on the line; a later method's is not
                "links": [(r, p, link(r, p, p is win)) for p, r in zip(rows, rows[1:], strict=False)],
                "status": status,
            }
        )
    return out


def unseparated_status(comparisons: list[dict[str, Any]], derived: list[dict[str, Any]] = ()) -> str:
    """The status of a shape none of whose ``comparisons`` separates nor was withheld, from the
    reasons that held for those with an interval (decide.unseparated): "under load" where the bar
    held every one with its point inside the bar, "under load, narrows" where it held one and more
    rounds narrow another or may lift it, "not separated" where every interval spans 1, "margin"
    where every one reaches into 1 ± 2 % and one is clear of 1, "no interval" where none has one.
    ``derived``: the shape's pair and runner-up comparisons, read from the same cells (they carry
    no load record of their own): they count only where no comparison was kept under load."""
    why = {decide.unseparated(c) for c in comparisons} - {None}
    if not any(str(w).startswith("bar") for w in why):  # the shape's pair read too where no load
        why |= {decide.unseparated(c) for c in derived} - {None}
    if why == {"bar"}:
        return "under load"
    if any(str(w).startswith("bar") for w in why):
        return "under load, narrows"
    if why == {"spans 1"}:
        return "not separated"
    return "margin" if why else "no interval"


def _winner_text(r: dict[str, Any]) -> str:
    if _is_baseline(r):
        return f"{r['method']} (the baseline)"
    if r.get("speedup_vs_ar") is None:
        if r.get("offered_request_rate"):
            return f"{r['method']} p50 {r.get('latency_s_p50') or 0:.3f} s (no baseline comparison)"
        return f"{r['method']} {r.get('output_tokens_per_s') or 0:.1f} tok/s (no baseline comparison)"
    return f"{r['method']} {_x(r)} vs {r.get('speedup_baseline')}"


MAX_DECISION_LINES = 2  # a decided shape's line and at most one continued line


def _link_text(r: dict[str, Any], prev: dict[str, Any], c: dict[str, Any] | None) -> str:
    if c is None:  # the baseline after a method whose x over it is said
        return f"next {r['method']} (the baseline)"
    return f"next {r['method']} {_x(c)} vs {prev['method']}"


def _pack(pieces: list[str], max_lines: int) -> list[str] | None:
    """``pieces`` joined by "; " on lines of at most WIDTH, continued on indented lines; None when
    they take more than ``max_lines``."""
    out = [pieces[0]]
    for p in pieces[1:]:
        if len(out[-1]) + 2 + len(p) <= WIDTH:
            out[-1] += "; " + p
        else:
            out[-1] += ";"
            out.append("    " + p)
    return out if len(out) <= max_lines and all(len(ln) <= WIDTH for ln in out) else None


def decision_lines(d: dict[str, Any]) -> list[str]:
    """ "sampled tp1 c4 in64 out32: draft x1.33 tok/s [1.03, 1.72] faster vs ar; next ngram-d4 x0.81
    tok/s [0.75, 0.88] slower vs draft; next ar (the baseline)": every method of the shape, each
    after the first ("next") with its own comparison against the method before it, read left to
    right (a ratio below 1 is it slower), as the full report's ranking reads; on a continued line
    where it is long (MAX_DECISION_LINES at most), the methods that still do not fit counted and
    named: "+2 more in the report: eagle3, ngram-d8"."""
    head = f"  {d['label']}: {_winner_text(d['winner'])}"
    links = [_link_text(r, p, c) for r, p, c in d["links"]]
    names = [r["method"] for r, _, _ in d["links"]]
    got = _pack([head, *links], MAX_DECISION_LINES)
    if got is not None:
        return got
    for whole in (True, False):  # every name left out said, else as many as fit and the rest counted
        for k in range(len(links) - 1, -1, -1):
            rest = names[k:]
            for j in [len(rest)] if whole else range(len(rest) - 1, -1, -1):
                named = ", ".join(rest[:j])
                if j < len(rest):
                    named += f"{', ' if j else ''}and {len(rest) - j} others"
                more = f"+{len(rest)} more in the report: {named}"
                got = _pack([head, *links[:k], more], MAX_DECISION_LINES)
                if got is not None:
                    return got
    return [clip(head), clip(f"    +{len(names)} more in the report")]


def decision_line(d: dict[str, Any]) -> str:
    """The decision of a shape on one line (decision_lines joined)."""
    return " ".join(ln.strip() if i else ln for i, ln in enumerate(decision_lines(d)))


def _merge_labels(labels: list[str]) -> list[str]:
    """Labels that differ in one word merged: "categories tp1 c4 category=chat" and "... category=qa"
    -> "categories tp1 c4 category=chat/qa"; "throughput tp1 c1 out32", "... c4 ..." -> "c1/c4"."""
    items = [lb.split(" ") for lb in labels]
    while True:
        best: tuple[int, int, list[int]] | None = None
        for pos in range(max((len(t) for t in items), default=0)):
            groups: dict[tuple[Any, ...], list[int]] = {}
            for i, t in enumerate(items):
                if pos < len(t):
                    groups.setdefault((len(t), *t[:pos], "*", *t[pos + 1 :]), []).append(i)
            for idx in groups.values():
                if len(idx) > 1 and (best is None or len(idx) > len(best[2])):
                    best = (pos, idx[0], idx)
        if best is None:
            return [" ".join(t) for t in items]
        pos, first, idx = best
        words = [items[i][pos] for i in idx]
        key = words[0].split("=", 1)[0] + "=" if all("=" in w for w in words) else ""
        same = key and all(w.startswith(key) for w in words)
        merged = key + "/".join(w[len(key) :] for w in words) if same else "/".join(words)
        items[first] = [*items[first][:pos], merged, *items[first][pos + 1 :]]
        items = [t for i, t in enumerate(items) if i == first or i not in idx]


def decisions(doc: dict[str, Any], budget: int = SCREEN_LINES) -> list[str]:
    """The decision section in at most ``budget`` lines (MIN_SHAPE_LINES at least): the grouped
    shapes first in the budget, then as many decided shapes as fit, the rest counted."""
    ds = shape_decisions(doc)
    if not ds:
        return []
    n_cells = len(doc.get("benchmarks") or [])
    out = [
        f"decision per cell shape ({counted(n_cells, 'cell')}, "
        f"{counted(len(ds), 'shape')} with two or more methods):"
    ]
    from ..stats.paired import LOAD_BIAS

    grouped = []
    for status, head in (
        ("not separated", "nothing separated (every interval spans 1; more rounds narrow them)"),
        ("margin", "nothing separated (every interval reaches into 1 ± 2%; more rounds narrow them)"),
        (
            "under load",
            f"not separated under load (disturbed alike: beyond x{LOAD_BIAS:.2f}..x{1 / LOAD_BIAS:.2f} "
            "needed, which more rounds do not lift)",
        ),
        (
            "under load, narrows",
            f"not separated under load (disturbed alike: beyond x{LOAD_BIAS:.2f}..x{1 / LOAD_BIAS:.2f} "
            "needed; more rounds narrow the intervals)",
        ),
        ("withheld", "verdict withheld (the reasons are counted below)"),
        ("no interval", "no interval to decide on (one round a cell, or no paired comparison)"),
    ):
        labels = [d["label"] for d in ds if d["status"] == status]
        if labels:
            grouped += wrap(f"  {head}, {counted(len(labels), 'shape')}: ", _merge_labels(labels))
    decided = [d for d in ds if d["status"] == "decided"]
    room = max(MIN_SHAPE_LINES, budget) - len(out) - len(grouped) - (1 if decided else 0)
    each = [decision_lines(d) for d in decided]
    if sum(len(ls) for ls in each) > room:  # a line counts the shapes that do not fit
        room -= 1
    shown: list[str] = []
    shown_ds: list[dict[str, Any]] = []
    for d, ls in zip(decided, each, strict=True):
        if shown_ds and len(shown) + len(ls) > room:
            break
        shown += ls
        shown_ds.append(d)
    if len(shown_ds) < len(decided):
        shown.append(
            f"  ... and {counted(len(decided) - len(shown_ds), 'more decided shape')} "
            "(the full report lists each)"
        )
    return out + legend(shown_ds) + shown + grouped


def legend(shown: list[dict[str, Any]]) -> list[str]:
    """What the decided lines' x means, only when one is shown, naming only the units shown."""
    if not shown:
        return []
    cs = [x for d in shown for x in (d["winner"], *(c for _, _, c in d["links"] if c))]
    cs = [c for c in cs if c.get("speedup_vs_ar") is not None]
    text = "  (x: a method over the shape's baseline, paired rounds [95% CI]"
    if any(not decide.open_loop_ratio(c) for c in cs):
        text += ", in output tok/s"
    if any(decide.open_loop_ratio(c) for c in cs):
        text += "; x by p50 latency (open loop): the other's p50 latency ÷ its own, > 1 faster"
    return [clip(text + "; next: each method after the first, its x over the method before it)")]


# ------------------------------------------------------------------ other views, one line each


def _capped(head: str, lines: list[str]) -> list[str]:
    if not lines:
        return []
    out = [clip(head)] + [clip("  " + ln) for ln in lines[:MAX_VIEW_LINES]]
    if len(lines) > MAX_VIEW_LINES:
        out.append(f"  ... and {len(lines) - MAX_VIEW_LINES} more (the full report lists each)")
    return out


def forced_view(doc: dict[str, Any]) -> list[str]:
    """The break-even accept lengths (forced cells: a verify step's cost), without the points."""
    got = [ln.split("; ", 1)[0] for ln in breakeven.lines(doc)]
    return _capped("break-even accept length per method and shape (forced acceptance, never ranked):", got)


def compare_view(doc: dict[str, Any]) -> list[str]:
    """The matrix's compare pairs: A over B per shape, the verdict shortened."""
    from .versus import _shape_label, comparisons

    got = []
    for c in comparisons(doc):
        label = _shape_label(dict(c["shape"]))
        if c["forced"] is not None:
            label += f" at forced accept {c['forced']:g}"
        got.append(f"{c['a']} vs {c['b']} {label}: {_x(c)}")
    return _capped(
        "comparisons between methods (the matrix's compare: A over B, paired rounds [95% CI]):", got
    )


def drift_view(doc: dict[str, Any]) -> list[str]:
    """Per family with a drift sentinel (report/drift.py): the drift, its interval and span, how
    many verdicts it withheld; the sentinel's own disturbance named, not listed (the report's)."""
    from .drift import family_label  # with its shard in a merged sharded run

    got = []
    for rec in (doc.get("specbench") or {}).get("drift") or ():
        if rec.get("drift") is None:
            got.append(f"drift {family_label(rec)}: not measured ({rec.get('why')})")
            continue
        ci = rec.get("drift_ci95")
        line = f"drift {family_label(rec)}: {rec['drift']:+.1%}" + (
            f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
        )
        if rec.get("minutes") is not None:
            line += f" over {rec['minutes']:.1f} min"
        held = list(rec.get("withheld") or [])
        if rec.get("established") is False:  # its interval reaches 0: the rounds' spread, no drift
            line += "; within the rounds' spread"
        line += f"; {counted(len(held), 'verdict')} withheld" + (
            f" ({', '.join(held)})" if 0 < len(held) <= 4 else ""
        )
        if rec.get("sentinel_disturbed"):
            line += "; the sentinel was disturbed"
        got.append(line)
    if len(got) > MAX_VIEW_LINES:
        got = got[:MAX_VIEW_LINES] + [
            f"... and {counted(len(got) - MAX_VIEW_LINES, 'more family', 'more families')} "
            "(the report lists each)"
        ]
    return [clip(ln) for ln in got]


def control_view(doc: dict[str, Any]) -> list[str]:
    """Each A/A control (a twin of the baseline, report/control.py): what it read against its
    baseline's instance and the verdicts it withheld; or that a run with resident baselines has none."""
    from . import instances
    from .control import lines

    got = lines(doc) + instances.lines(doc)
    if len(got) > MAX_VIEW_LINES:
        got = got[:MAX_VIEW_LINES] + [
            f"... and {counted(len(got) - MAX_VIEW_LINES, 'more control')} (the report lists each)"
        ]
    return [clip(ln) for ln in got]


# ---------------------------------------------------------------------------------- pointers


def pointers(json_path: str | None) -> list[str]:
    """Where the rest is; without ``json_path`` (no --benchmark-json) nothing was saved: how to save it."""
    run = json_path or "RUN.json"
    cmd = f"python -m pytest_specbench.report {run}"
    saved = "" if json_path else "not saved: run with --benchmark-json RUN.json, then "
    return [
        f"{saved}full tables, per-cell reasons and process lists: {cmd}",
        f"html: {cmd} --html report.html",
        f"plots: {cmd} --plots DIR",
    ]


SECTIONS: list[Callable[[dict[str, Any]], list[str]]] = [  # after the decisions, in this order
    hook_view,
    forced_view,
    compare_view,
    drift_view,
    control_view,
    withheld_lines,
    care_line,
]


def engine_starts_line(spec: dict[str, Any]) -> str:
    """The groups started (a failed one marked) and the interleaved baselines' instances."""
    refs = spec.get("reference_engines") or []
    started = [e for e in spec.get("engine_groups") or () if "resumed_from" not in e]
    return (
        f"engine starts: {spec.get('engine_starts')} "
        f"({', '.join(e['group'] + ('' if e.get('ok') else ' FAILED') for e in started)})"
        + (
            f"; baseline instances for interleaved rounds: {len(refs)} "
            f"({', '.join(e['group'] + ' in ' + e['worker'] for e in refs)})"
            if refs
            else ""
        )
    )


def json_facts(doc: dict[str, Any]) -> list[str]:
    """The run's facts a results JSON holds, for a screen printed from it (the live run adds its
    own: wall time, where the JSON went): its engine starts."""
    spec = doc.get("specbench") or {}
    return [engine_starts_line(spec)] if spec.get("engine_starts") is not None else []


def lines(doc: dict[str, Any], json_path: str | None = None, facts: Iterable[str] | None = None) -> list[str]:
    """The screen for a results document: the sections, the run's ``facts`` (the plugin's: engine
    starts, wall time, ...; as given; None: those the JSON holds, json_facts), then the pointers;
    every line at most WIDTH but a command's (a pointer, a resume) with a path longer than fits."""
    rest: list[str] = []
    for section in SECTIONS:
        rest += section(doc)
    facts = [clip(ln) for ln in json_facts(doc)] if facts is None else list(facts)
    commands = pointers(json_path)
    import textwrap

    from .pooled import screen_lines

    # the sentence first, wrapped (never cut: its setting and what it left out are part of it)
    head = [w for ln in screen_lines(doc) for w in textwrap.wrap(ln, WIDTH, subsequent_indent="    ")]
    budget = SCREEN_LINES - len(head) - len(rest) - len(facts) - 3
    out = [clip(ln) for ln in one_line(head + decisions(doc, budget) + rest)]
    # the facts come clipped as they need (a command in them is never cut), the pointers whole: a
    # path cut to fit the width could not be copied
    return out + one_line(facts) + commands
