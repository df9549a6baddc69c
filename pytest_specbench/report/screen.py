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

import re
from collections.abc import Callable, Iterable
from typing import Any

from . import breakeven, decide
from .mdtext import one_line

WIDTH = 160  # no line of the screen is longer
SCREEN_LINES = 42  # the decided shapes get what the other sections leave of this
MIN_SHAPE_LINES = 6  # ... and at least this many (header included)
MAX_WRAPPED = 3  # lines of one grouped list (shapes, cells) before "... and N more"
MAX_VIEW_LINES = 4  # per extra view (break-even, the matrix's compare pairs, failed cells)


def clip(line: str, width: int = WIDTH) -> str:
    """``line`` on one line of at most ``width`` characters ("..." where it was cut)."""
    text = str(line)
    indent = text[: len(text) - len(text.lstrip(" "))]
    line = indent + " ".join(text.split())
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def wrap(
    head: str, items: Iterable[str], width: int = WIDTH, indent: str = "    ", max_lines: int = MAX_WRAPPED
) -> list[str]:
    """``head`` then ``items`` joined by ", ", continued on indented lines of at most ``width``;
    past ``max_lines`` lines the rest is counted ("... and 12 more")."""
    items = list(items)
    out, line = [], head
    for i, item in enumerate(items):
        piece = ("" if i == 0 else ", ") + item
        if len(line) + len(piece) > width and line.strip():
            if len(out) + 1 == max_lines:  # the last line: what is left, counted
                line += f", ... and {len(items) - i} more"
                if len(line) > width:
                    line = line[: width - 3] + "..."
                break
            out.append(line + ("," if i else ""))
            line, piece = indent, item
        line += piece
    out.append(line)
    return [clip(ln, width) for ln in out]


def short_verdict(v: Any) -> str:
    """A comparison's verdict without its details: "no verdict: the cell was disturbed (other
    processes ...: python (pid 1): 3 s)" -> "no verdict (disturbed)"; the details are the report's."""
    v = str(v or "")
    if v.startswith("no verdict"):
        for word, kind in (("drift", "drift"), ("saturated", "saturated"), ("disturbed", "disturbed")):
            if word in v:
                return f"no verdict ({kind})"
        return "no verdict (withheld)"
    if v.startswith("unpaired"):
        return "unpaired (different requests)"
    return v.split(" (", 1)[0]


def withheld(v: Any) -> bool:
    return str(v or "").startswith(("no verdict", "unpaired"))


def _x(c: dict[str, Any]) -> str:
    """ "x1.33 [1.03, 1.72] faster" from comparison fields, the verdict shortened."""
    if c.get("speedup_vs_ar") is None:
        return short_verdict(c.get("speedup_verdict")) or "no paired comparison"
    return (
        f"x{c['speedup_vs_ar']:.2f}{decide.fmt_interval(c.get('speedup_vs_ar_ci95'))} "
        f"{short_verdict(c.get('speedup_verdict'))}"
    ).strip()


# ------------------------------------------------------------------------- the decision per shape


def _is_baseline(r: dict[str, Any]) -> bool:
    return r.get("speedup_baseline") == r["method"]


def shape_decisions(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape of decide.ranked_shapes: its label, winner (decide's first), the winner's
    comparison with the baseline (the cell's own fields, as the report shows them), the runner-up
    and decide.compare of the winner over it, and ``status``: "decided" (some verdict in the shape
    separates), "withheld" (the winner's verdict was withheld), "no interval" (no comparison in
    the shape has one: one round a cell) or "not separated"."""
    out = []
    for label, rows in decide.ranked_shapes(doc):
        win, run = rows[0], rows[1]
        pair = decide.compare(win["_entry"], run["_entry"])
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
            else "no interval"  # e.g. one round a cell, no baseline in the shape: nothing to decide
            if no_interval
            else "decided"
            if separated
            else "not separated"
        )
        out.append(
            {
                "label": label,
                "winner": win,
                "runner_up": run,
                "rows": rows,
                "sign": sign,
                "pair": pair,
                "status": status,
            }
        )
    return out


def _winner_text(r: dict[str, Any]) -> str:
    if _is_baseline(r):
        return f"{r['method']} (the baseline)"
    if r.get("speedup_vs_ar") is None:
        if r.get("offered_request_rate"):
            return f"{r['method']} p50 {r.get('latency_s_p50') or 0:.3f} s (no baseline comparison)"
        return f"{r['method']} {r.get('output_tokens_per_s') or 0:.1f} tok/s (no baseline comparison)"
    return f"{r['method']} {_x(r)} vs {r.get('speedup_baseline')}"


def decision_line(d: dict[str, Any]) -> str:
    """ "sampled tp1 c4 in64 out32: draft x1.33 [1.03, 1.72] faster vs ar; > ngram-d4 x1.23 [...]
    faster" (the runner-up after the sign of the winner over it, and that comparison)."""
    win, run = d["winner"], d["runner_up"]
    line = f"  {d['label']}: {_winner_text(win)}"
    if _is_baseline(run):  # the winner's own comparison with it is already said
        line += f"; {d['sign']} {run['method']} (the baseline)"
    else:
        line += f"; {d['sign']} {run['method']} {_x(d['pair'])}"
    for v in ("faster", "slower"):  # the shape's other methods the paired rounds separate from it
        rest = [r["method"] for r in d["rows"][2:] if r.get("speedup_verdict") == v]
        if rest:
            line += f"; also {v}: {', '.join(rest)}"
    return clip(line)


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
        f"decision per cell shape ({n_cells} cells, {len(ds)} shapes with two or more methods):",
        "  (x: speedup over the shape's baseline, paired rounds [95% CI]; then the runner-up after"
        " >, < or ≈: the winner over it separates, in that direction, or not)",
    ]
    grouped = []
    for status, head in (
        ("not separated", "nothing separated (every interval spans 1; more rounds narrow them)"),
        ("withheld", "verdict withheld (the reasons are counted below)"),
        ("no interval", "no interval to decide on (one round a cell, or no paired comparison)"),
    ):
        labels = [d["label"] for d in ds if d["status"] == status]
        if labels:
            grouped += wrap(f"  {head}, {len(labels)} shapes: ", _merge_labels(labels))
    decided = [d for d in ds if d["status"] == "decided"]
    room = max(MIN_SHAPE_LINES, budget) - len(out) - len(grouped)
    if len(decided) > room:
        room = max(room - 1, 1)
        shown = [decision_line(d) for d in decided[:room]]
        shown.append(f"  ... and {len(decided) - room} more decided shapes (the full report lists each)")
    else:
        shown = [decision_line(d) for d in decided]
    return out + shown + grouped


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
    got = []
    for rec in (doc.get("specbench") or {}).get("drift") or ():
        if rec.get("drift") is None:
            got.append(f"drift {rec.get('family')}: not measured ({rec.get('why')})")
            continue
        ci = rec.get("drift_ci95")
        line = f"drift {rec.get('family')}: {rec['drift']:+.1%}" + (
            f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
        )
        if rec.get("minutes") is not None:
            line += f" over {rec['minutes']:.1f} min"
        held = list(rec.get("withheld") or [])
        line += f"; {len(held)} verdicts withheld" + (f" ({', '.join(held)})" if 0 < len(held) <= 4 else "")
        if rec.get("sentinel_disturbed"):
            line += "; the sentinel was disturbed"
        got.append(line)
    if len(got) > MAX_VIEW_LINES:
        got = got[:MAX_VIEW_LINES] + [
            f"... and {len(got) - MAX_VIEW_LINES} more families (the report lists each)"
        ]
    return [clip(ln) for ln in got]


# ------------------------------------------------------------------- withheld, counted, once each

Entry = dict[str, Any]


def _cells(doc: dict[str, Any]) -> list[Entry]:
    return list(doc.get("benchmarks") or [])


def _disturbed(doc: dict[str, Any]) -> list[str]:
    return [b["param"] for b in _cells(doc) if b["extra_info"].get("disturbed")]


def _saturated(doc: dict[str, Any]) -> list[str]:
    return [b["param"] for b in _cells(doc) if b["extra_info"].get("saturated")]


def _forced(doc: dict[str, Any]) -> list[str]:
    return [b["param"] for b in _cells(doc) if b["extra_info"].get("accept_forced") is not None]


def _dropped(doc: dict[str, Any]) -> list[str]:
    """Cells out of the race: in benchmarks marked dropped, or kept apart under specbench.race."""
    ids = [b["param"] for b in _cells(doc) if (b["extra_info"].get("race") or {}).get("status") == "dropped"]
    race = (doc.get("specbench") or {}).get("race") or {}
    ids += [str(d.get("cell_id")) for d in race.get("dropped_cells") or () if isinstance(d, dict)]
    return list(dict.fromkeys(ids))


def _tuned_out(doc: dict[str, Any]) -> list[str]:
    """Settings of a tuned sweep not carried past its deciding cells (never run)."""
    race = (doc.get("specbench") or {}).get("race") or {}
    return [str(t.get("cell_id")) for t in race.get("tuned_out") or () if isinstance(t, dict)]


def dropped_lines(doc: dict[str, Any]) -> list[str]:
    """One line per cell out of the race (at most MAX_VIEW_LINES): whom it lost to, by how much."""
    race = (doc.get("specbench") or {}).get("race") or {}
    cells = [(b["param"], b["extra_info"]) for b in _cells(doc) if b["param"] in _dropped(doc)]
    cells += [(str(d.get("cell_id")), d.get("extra_info") or {}) for d in race.get("dropped_cells") or ()]
    out, seen = [], set()
    for cell, e in cells:
        info = e.get("race") or {}
        if cell in seen:
            continue
        seen.add(cell)
        try:
            why = (
                f"lost to {info['lost_to']} by x{info['ratio']:.3f} [{info['lo']:.3f}, {info['hi']:.3f}] "
                f"at shape {info.get('shape')}"
            )
        except (KeyError, TypeError, ValueError):
            why = "lost"
        ran = e.get("rounds_run")
        out.append(clip(f"    {cell}: out of the race: {why}" + ("" if ran else " (not run)")))
    if len(out) > MAX_VIEW_LINES:
        out = out[:MAX_VIEW_LINES] + [f"    ... and {len(out) - MAX_VIEW_LINES} more (the report lists each)"]
    return out


def _drift(doc: dict[str, Any]) -> list[str]:
    ids = [c for rec in (doc.get("specbench") or {}).get("drift") or () for c in rec.get("withheld") or ()]
    ids += [
        b["param"]
        for b in _cells(doc)
        if "drift" in str(b["extra_info"].get("speedup_verdict") or "")
        and withheld(b["extra_info"].get("speedup_verdict"))
    ]
    return list(dict.fromkeys(ids))


def _failed(doc: dict[str, Any]) -> list[str]:
    fs = (doc.get("specbench") or {}).get("failed_cells") or []
    return [str(f.get("cell") or "?") if isinstance(f, dict) else "?" for f in fs]


def _missing(doc: dict[str, Any]) -> list[str]:
    ms = (doc.get("specbench") or {}).get("missing_cells") or []
    return [str(m.get("cell") or "?") if isinstance(m, dict) else "?" for m in ms]


_SHARE = re.compile(r"took (\d+(?:\.\d+)?)\s*%")
_PROC = re.compile(r"(?:^|, |\): )([^,;()]+?) \(pid (\d+)\)")


def disturbed_detail(doc: dict[str, Any]) -> str:
    """The disturbances in one clause: the range of the share other processes took, and the
    processes named most often (each once, with the number of cells it disturbed)."""
    texts = [str(b["extra_info"]["disturbed"]) for b in _cells(doc) if b["extra_info"].get("disturbed")]
    shares = [float(m.group(1)) for t in texts for m in [_SHARE.search(t)] if m]
    seen: dict[str, int] = {}
    for t in texts:
        for name in dict.fromkeys(f"{m.group(1).strip()} (pid {m.group(2)})" for m in _PROC.finditer(t)):
            seen[name] = seen.get(name, 0) + 1
    out = []
    if shares:
        lo, hi = min(shares), max(shares)
        out.append(f"other processes took {lo:.0f}" + (f"-{hi:.0f}" if hi != lo else "") + "% of the cores")
    if seen:
        named = ""  # the processes named most often, as many as fit the line
        for n, k in sorted(seen.items(), key=lambda kv: -kv[1]):
            more = f"{', ' if named else ''}{n} in {k}"
            if len(named) + len(more) > 60:
                break
            named += more
        if named:
            out.append(f"most: {named} cells")
    return "; ".join(out)


def failed_lines(doc: dict[str, Any]) -> list[str]:
    """One line per failed cell (at most MAX_VIEW_LINES): the cell, its phase and the error's head."""
    from .gate import failure_headline

    fs = [f for f in (doc.get("specbench") or {}).get("failed_cells") or [] if isinstance(f, dict)]
    out = [
        clip(f"    {f.get('cell') or '?'} ({f.get('phase') or '?'}): {failure_headline(f) or 'no error'}")
        for f in fs[:MAX_VIEW_LINES]
    ]
    if len(fs) > MAX_VIEW_LINES:
        out.append(f"    ... and {len(fs) - MAX_VIEW_LINES} more (the report lists each)")
    return out


# (name, cells, what it means, extra detail or None): the withheld and never-ranked cells, by reason
REASONS: list[
    tuple[str, Callable[[dict[str, Any]], list[str]], str, Callable[[dict[str, Any]], str] | None]
] = [
    ("disturbed", _disturbed, "no verdict on their rounds", disturbed_detail),
    ("saturated", _saturated, "open loop did not keep up: no verdict", None),
    ("forced (never ranked)", _forced, "a set accept length measures a verify step's cost", None),
    ("out of the race", _dropped, "lost to a shape's leader; never ranked or a baseline", None),
    ("tuned out", _tuned_out, "a sweep's setting not carried past its deciding cells; not run", None),
    ("drift-withheld", _drift, "verdict not clear of its family's drift (the drift lines above)", None),
    ("failed", _failed, "measured nothing", None),
    ("missing", _missing, "not in any merged shard", None),
]


def withheld_counts(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Reason -> the cells it covers (REASONS' order; every reason, empty or not)."""
    return {name: cells(doc) for name, cells, _, _ in REASONS}


def withheld_lines(doc: dict[str, Any]) -> list[str]:
    counts = withheld_counts(doc)
    out = [clip("withheld or never ranked: " + ", ".join(f"{k} {len(v)}" for k, v in counts.items()))]
    for name, _, means, detail in REASONS:
        ids = counts[name]
        if not ids:
            continue
        extra = detail(doc) if detail else ""
        head = f"  {name} {len(ids)} ({means})" + (f": {extra}" if extra else "")
        if name == "failed":
            out += [clip(head + ":"), *failed_lines(doc)]
        elif name == "out of the race":
            out += [clip(head + ":"), *dropped_lines(doc)]
        elif name in ("disturbed", "forced (never ranked)", "drift-withheld") or len(ids) > 6:
            out.append(clip(head))  # many cells: named in the full report, not here
        else:
            out += wrap(head + (", " if extra else ": "), ids)
    return out


# ------------------------------------------------------------ what needs care, counted in one line


def care_line(doc: dict[str, Any]) -> list[str]:
    """Counts of decide.warnings' kinds (noisy rounds, outlier rounds, unsettled warm-ups, cells
    that often proposed no draft), one line; each is detailed in the full report."""
    cells = [b["extra_info"] for b in _cells(doc)]
    kinds = [
        (
            f"rounds CV > {decide.CV_WARN:.0%}",
            sum(1 for e in cells if (e.get("rounds_cv") or 0) > decide.CV_WARN),
        ),
        ("an outlier round", sum(1 for e in cells if e.get("outlier_rounds"))),
        ("warm-up unsettled", sum(1 for e in cells if e.get("warmup_settled") is False)),
        (
            "client-bound TTFT (read > 2 ms and 2 % after the server's clock)",
            sum(1 for e in cells if e.get("client_bound")),
        ),
        (
            f"no draft in >= {decide.NO_DRAFT_WARN:.0%} of steps",
            sum(1 for e in cells if (e.get("no_draft_fraction") or 0) >= decide.NO_DRAFT_WARN),
        ),
    ]
    said = [f"{what} in {n} cells" for what, n in kinds if n]
    return [clip("care: " + "; ".join(said))] if said else []


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
    forced_view,
    compare_view,
    drift_view,
    withheld_lines,
    care_line,
]


def lines(doc: dict[str, Any], json_path: str | None = None, facts: Iterable[str] = ()) -> list[str]:
    """The screen for a results document: the sections, the run's ``facts`` (the plugin's: engine
    starts, wall time, ...; as given), then the pointers; every line at most WIDTH but a command's
    (a pointer, a resume) with a path longer than fits."""
    rest: list[str] = []
    for section in SECTIONS:
        rest += section(doc)
    facts, commands = list(facts), pointers(json_path)
    import textwrap

    from .pooled import screen_lines

    # the sentence first, wrapped (never cut: its setting and what it left out are part of it)
    head = [w for ln in screen_lines(doc) for w in textwrap.wrap(ln, WIDTH, subsequent_indent="    ")]
    budget = SCREEN_LINES - len(head) - len(rest) - len(facts) - 3
    out = [clip(ln) for ln in one_line(head + decisions(doc, budget) + rest)]
    # the facts come clipped as they need (a command in them is never cut), the pointers whole: a
    # path cut to fit the width could not be copied
    return out + one_line(facts) + commands
