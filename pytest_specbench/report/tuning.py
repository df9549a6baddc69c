"""The tuning view: per cell shape and swept method (a ``speculative:`` knob given as a list), its
settings ranked (decide.rank_closed_loop), the best against the runner-up and each knob's effect on
its own, over paired rounds, and the best against the methods the matrix's ``compare`` (or
``--versus``) names for the sweep. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

from .decide import (
    _interleaved_tok_s,
    _natural,
    _shape_label,
    _varying,
    compare,
    fmt_interval,
    fmt_speedup,
    rank_closed_loop,
)
from .versus import references, side


def _rates(e: dict[str, Any]) -> str:
    r = [x for x in (e.get("accept_rate_by_position") or []) if x is not None]
    return "/".join(f"{x:.2f}" for x in r[:6]) if r else ""


def _setting_summary(row: dict[str, Any]) -> str:
    """A setting's figures, led by what the tuning view ranks by (rank_closed_loop): its tok/s, or
    its interleaved speedup with the two tok/s it rests on."""
    label = ",".join(f"{k}={v}" for k, v in row["setting"].items())
    interleaved = row.get("_ranked_by") == "interleaved" and row.get("speedup_vs_ar") is not None
    parts = []
    if interleaved:
        head = f"{label} {fmt_speedup(row)}"
        parts.append(_interleaved_tok_s(row))
    else:
        head = f"{label} {row['output_tokens_per_s']:.1f} tok/s"
        if row.get("speedup_vs_ar") is not None:
            parts.append(fmt_speedup(row))
    if row.get("accept_length"):
        parts.append(f"accept {row['accept_length']:.2f}")
    if _rates(row):
        parts.append(f"accept rate by position {_rates(row)}")
    return head + (f" ({', '.join(parts)})" if parts else "")


def _versus(best: dict[str, Any], ref: str, cells: list[dict[str, Any]], k: int) -> str:
    """ "; best of 3 vs dflash: x1.24 [1.05, 1.46] faster (corrected for the choice)": the best of
    the ``k`` settings ranked at this shape against a reference the matrix's ``compare`` or
    ``--versus`` names, its interval read at the shape's level / k and widened by the shape's bias
    bound (pooled.best_of: the best of k read as one comparison would be "faster" more often than
    its level says); without an interval, the plain comparison (empty where it did not run)."""
    from .pooled import best_of

    other = side(ref, cells).get(None)
    if other is None or other is best["_entry"]:
        return ""
    c = compare(best["_entry"], other)
    got = best_of(best["_entry"], other, k) if k > 1 else None
    if got is not None:
        return f"; best of {k} vs {ref}: {fmt_speedup(got)} (corrected for the choice)"
    ratio = fmt_speedup(c) if c.get("speedup_vs_ar") is not None else str(c.get("speedup_verdict"))
    return f"; best{f' of {k}' if k > 1 else ''} vs {ref}: {ratio}"


def tuning(doc: dict[str, Any]) -> list[str]:
    """The tuning view: per cell shape and swept method (a ``speculative:`` knob given as a list),
    its best setting (rank_closed_loop) with its speedup interval over AR, the runner-up, whether a
    paired comparison separates the two, the best against each reference named for the sweep
    (versus.references), and every setting's acceptance and accept rate by position (where longer
    drafts stop paying)."""
    by: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    shapes = _varying(doc, "method")
    for key, cells in shapes.items():
        for method, b in cells:
            e = b["extra_info"]
            if e.get("sweep"):
                row = {"method": method, **e, "_entry": b}
                by.setdefault(key, {}).setdefault(e["sweep"], []).append(row)
    out = []
    for key, sweeps in sorted(by.items(), key=lambda kv: _natural(kv[0])):
        label = _shape_label(dict(key[1:]))
        for sweep, rows in sweeps.items():
            if len(rows) < 2:  # one setting of the sweep in this shape: nothing to tune here
                continue
            rank_closed_loop(rows)
            c = compare(rows[0]["_entry"], rows[1]["_entry"])
            sep = {"faster": "separated", "slower": "the runner-up is faster by paired rounds"}.get(
                str(c.get("speedup_verdict")), "not separated"
            )
            ratio = (
                f" x{c['speedup_vs_ar']:.2f}{fmt_interval(c.get('speedup_vs_ar_ci95'))}"
                if c.get("speedup_vs_ar")
                else ""
            )
            line = (
                f"{label}: {sweep}: best {_setting_summary(rows[0])}; runner-up {_setting_summary(rows[1])}; "
                f"best/runner-up{ratio}: {sep}"
            )
            line += "".join(
                _versus(rows[0], ref, [b for _, b in shapes[key]], len(rows))
                for ref in references(doc, sweep)
            )
            out.append(line + "".join(f"; then {_setting_summary(r)}" for r in rows[2:]))
            out += _knob_effects(label, sweep, rows)
    return out


def _knob_effects(label: str, sweep: str, rows: list[dict[str, Any]]) -> list[str]:
    """Each swept knob's effect on its own: every pair of settings that differ in that knob alone,
    compared on paired rounds (the first value over the second, with the verdict of a speedup), e.g.
    whether overlap scheduling helped at this shape, once for each value of the other knobs."""
    knobs = sorted({k for r in rows for k in r["setting"]})
    if len(knobs) < 2:  # one knob: the ranking above is its effect
        return []
    out = []
    for k in knobs:
        values = list(dict.fromkeys(r["setting"].get(k) for r in rows))
        if len(values) < 2:
            continue
        parts = []
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                sa, sb = a["setting"], b["setting"]
                if sa.get(k) == sb.get(k) or any(sa.get(o) != sb.get(o) for o in knobs if o != k):
                    continue
                a2, b2 = (a, b) if values.index(sa.get(k)) < values.index(sb.get(k)) else (b, a)
                c = compare(a2["_entry"], b2["_entry"])
                if not c.get("speedup_vs_ar"):
                    continue
                verdict = c.get("speedup_verdict") or "no verdict"
                rest = ",".join(f"{o}={a2['setting'].get(o)}" for o in knobs if o != k)
                parts.append(
                    f"x{c['speedup_vs_ar']:.2f}{fmt_interval(c.get('speedup_vs_ar_ci95'))} {verdict}"
                    + (f" (with {rest})" if rest else "")
                )
        if parts:
            out.append(f"{label}: {sweep}: {k}={values[0]} over {k}={values[1]}: " + "; ".join(parts))
    return out


def section(doc: dict[str, Any]) -> list[str]:
    """The tuning view as Markdown (after the decision view); empty without a swept method."""
    tune = tuning(doc)
    if not tune:
        return []
    head = "Tuning (per shape and swept method: the best setting, the runner-up, separated or not):"
    return ["", head, "", *(f"- {ln}" for ln in tune)]
