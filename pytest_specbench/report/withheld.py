"""The screen's counts of what has no verdict and why (disturbed, saturated, forced, out of the
race, tuned out, inside a drift, failed, missing), the care line (noisy rounds, client-bound TTFT,
...) and the hooks that failed: each counted once, detailed in the full report. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import decide
from .screen_text import MAX_VIEW_LINES, WIDTH, clip, counted, withheld, wrap

Entry = dict[str, Any]


def _cells(doc: dict[str, Any]) -> list[Entry]:
    return list(doc.get("benchmarks") or [])


def _disturbed(doc: dict[str, Any]) -> list[str]:
    """Disturbed cells without a verdict on their rounds (a verdict kept under load is not one)."""
    return [b["param"] for b in _cells(doc) if b["extra_info"].get("disturbed") and not _kept(b)]


def _kept(b: Entry) -> bool:
    e = b["extra_info"]
    return bool(e.get("speedup_under_load")) and not withheld(e.get("speedup_verdict"))


def kept_under_load(doc: dict[str, Any]) -> list[str]:
    """Disturbed cells whose interleaved verdict was kept: both halves of every pair bore the load
    alike (paired.load_spread); not withheld, so counted apart from the withheld ones."""
    return [b["param"] for b in _cells(doc) if b["extra_info"].get("disturbed") and _kept(b)]


def kept_head(doc: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The verdicts kept under load (the screen's and the report's): a head and, per cell, its
    verdict shortened; None without any."""
    from ..stats.paired import LOAD_BIAS

    kept = kept_under_load(doc)
    if not kept:
        return None
    return (
        f"kept under load {len(kept)} (disturbed, but both halves of every pair bore the load alike: "
        f"faster/slower only beyond x{LOAD_BIAS:.2f}..x{1 / LOAD_BIAS:.2f}): ",
        [f"{c} {_short(doc, c)}" for c in kept],
    )


# why a kept verdict is "not separated", said short (decide.unseparated's reasons)
UNSEPARATED = {
    "spans 1": "spans 1",
    "margin": "reaches into 1 ± 2%",
    "bar": "inside the bar",
    "bar, point beyond": "reaches into the bar",
}


def _short(doc: dict[str, Any], cell: str) -> str:
    """A kept verdict shortened, a "not separated" one with the reason that held: "not separated
    (inside the bar)" where its interval cleared 1 ± 2 % but not x0.78..x1.28, "not separated
    (spans 1)" where more rounds would narrow it."""
    from .screen_text import short_verdict

    e = next(b["extra_info"] for b in _cells(doc) if b["param"] == cell)
    why = decide.unseparated(e)
    return short_verdict(e.get("speedup_verdict")) + (f" ({UNSEPARATED[why]})" if why else "")


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


def _controls(doc: dict[str, Any]) -> list[str]:
    from .control import control_cells

    return control_cells(doc)


def _control(doc: dict[str, Any]) -> list[str]:
    from .control import withheld_cells

    return withheld_cells(doc)


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
    ids = set(_disturbed(doc))  # those without a verdict: the kept ones are counted apart
    texts = [str(b["extra_info"]["disturbed"]) for b in _cells(doc) if b["param"] in ids]
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
        named, last = "", 0  # the processes named most often, as many as fit the line
        for n, k in sorted(seen.items(), key=lambda kv: -kv[1]):
            more = f"{', ' if named else ''}{n} in {k}"
            if len(named) + len(more) > 60:
                break
            named, last = named + more, k
        if named:  # "in 3, ... in 1 cell": the noun takes the last count's number
            out.append(f"most: {named} {'cell' if last == 1 else 'cells'}")
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
    ("A/A control", _controls, "a twin of the baseline, never ranked: it reads the instance effect", None),
    (
        "instance-withheld",
        _control,
        "verdict not clear of the instance effect its shape's A/A control read (the control lines above)",
        None,
    ),
    ("failed", _failed, "measured nothing", None),
    ("missing", _missing, "not in any merged shard", None),
]


def withheld_counts(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Reason -> the cells it covers (REASONS' order; every reason, empty or not)."""
    return {name: cells(doc) for name, cells, _, _ in REASONS}


def withheld_lines(doc: dict[str, Any]) -> list[str]:
    counts = withheld_counts(doc)
    # the A/A control's counts only where there is something to count (its lines say the rest)
    said = {k: v for k, v in counts.items() if v or k not in ("instance-withheld", "A/A control")}
    out = wrap("withheld or never ranked: ", [f"{k} {len(v)}" for k, v in said.items()])
    kept = kept_head(doc)
    if kept:  # not withheld: its own lines, before the withheld ones
        out[0:0] = wrap(*kept)
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
        elif (
            name in ("disturbed", "forced (never ranked)", "drift-withheld", "instance-withheld")
            or len(ids) > 6
        ):
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
            "client-bound TTFT (the client's own send and read late, or its loop late)",
            sum(1 for e in cells if e.get("client_bound")),
        ),
        (
            f"no draft in >= {decide.NO_DRAFT_WARN:.0%} of steps",
            sum(1 for e in cells if (e.get("no_draft_fraction") or 0) >= decide.NO_DRAFT_WARN),
        ),
    ]
    said = [f"{what} in {counted(n, 'cell')}" for what, n in kinds if n]
    return [clip("care: " + "; ".join(said))] if said else []


def hook_view(doc: dict[str, Any]) -> list[str]:
    """The matrix's hooks that failed (``specbench.hook_failures``): they failed the run, and what
    an after-hook was to restore (a live service) may be left stopped."""
    got = (doc.get("specbench") or {}).get("hook_failures") or []
    out = (
        [f"HOOKS FAILED: {len(got)} (the run failed; what they were to restore may be left stopped):"]
        if got
        else []
    )
    import textwrap

    for f in got:  # wrapped, never cut: the hook's output and what it left are the point
        who = f"{f['group']}: " if f.get("group") else ""
        text = f"{who}{f['error']}; may be left stopped: {f.get('may_be_left')}"
        out += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")
    return out


def load_counts(doc: dict[str, Any]) -> list[str]:
    """The disturbed cells as the screen counts them: those without a verdict on their rounds, and
    apart from them the verdicts kept under load (withheld.py)."""
    out = []
    gone = _disturbed(doc)
    if gone:
        out.append(f"- disturbed {len(gone)} (no verdict on their rounds; each cell's warning below)")
    kept = kept_head(doc)
    if kept:
        out.append(f"- {kept[0]}{', '.join(kept[1])}")
    return out
