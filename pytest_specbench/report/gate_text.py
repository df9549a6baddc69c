"""What the regression gate prints and its command line (docs/gate.md): per cell gated from its
rounds the smallest drop it could detect, how the run-to-run spread was counted, the run-wide
checks, the cells not gateable or without a verdict, the regressions, and a last line that says
what was checked; without a threshold, that no gate was asked for. Pure.
"""

from __future__ import annotations

from typing import Any

from ..stats.gate_stats import SPREAD_CELLS, Spread
from .gate import EXIT_INCONCLUSIVE, Gate, gate, left_out


def lines(g: Gate, old_name: str) -> list[str]:
    """What the gate prints: per cell gated from its rounds the smallest drop it could detect, the
    run-to-run spread counted and the run-wide check, the cells not gateable or without a verdict,
    those not separated from the limit, the count gated, then the regressions; the last line says
    what was checked (checked), after INCONCLUSIVE where the gate was."""
    out: list[str] = []
    if g.gated:
        what = "tok/s (open loops: p50 latency)" if g.latency_cells else "tok/s"
        head = f"{len(g.gated)} cell(s) gated on {what} from their rounds, the smallest drop each could see:"
        out += ["\n" + head]
        out += [f"- {x}" for x in g.gated]
        out.append(spread_line(g.spread))
    if g.run_wide:
        out += [("" if g.gated or i else "\n") + x for i, x in enumerate(g.run_wide)]
    if g.no_interval:
        out += [
            f"\n{len(g.no_interval)} cell(s) not gateable (fewer than 2 rounds in a run: no interval, "
            "so no verdict on a point; each counts in the run-wide check):"
        ]
        out += [f"- {x}" for x in g.no_interval]
    if g.unreliable:
        out += [f"\n{len(g.unreliable)} cell(s) without a tok/s verdict (unreliable, not regressions):"]
        out += [f"- {x}" for x in g.unreliable]
    if g.not_separated:
        out += [f"\n{len(g.not_separated)} cell(s) below the limit but not separated from it:"]
        out += [f"- {x}" for x in g.not_separated]
    if g.left_out:
        out += [
            f"\n{len(g.left_out)} cell(s) the new run's race left out, no verdict (not regressions, "
            "not missing):"
        ]
        out += [f"- {x}" for x in g.left_out]
    skipped = g.tok_s_ungated
    if g.tok_s_cells:
        weak = f"; {len(g.underpowered)} with too little power" if g.underpowered else ""
        lat = f" ({g.latency_cells} open loop(s) on their p50 latency)" if g.latency_cells else ""
        nope = f"; {len(g.no_interval)} not gateable (fewer than 2 rounds)" if g.no_interval else ""
        out.append(
            f"\ntok/s gated on {len(g.gated)} of {g.tok_s_cells} cell(s){lat}{weak}{nope}"
            + (
                ": NONE, every one was disturbed or saturated in a run; this gate checked failed and"
                f" missing cells (and acceptance, when asked) only, and fails as inconclusive (exit"
                f" {EXIT_INCONCLUSIVE}): run again on a quiet machine"
                if skipped == g.tok_s_cells
                else ""
            )
        )
    out.append(f"\n{len(g.regressions)} regression(s) against {old_name}" + (":" if g.regressions else ""))
    out += [f"- {x}" for x in g.regressions]
    if g.inconclusive:
        out.append(f"INCONCLUSIVE (exit {EXIT_INCONCLUSIVE}): {_why_inconclusive(g)}; {checked(g)}")
    else:  # passing or failing, the last line says what was checked
        out.append(checked(g))
    return out


def spread_line(sp: Spread | None) -> str:
    """How the run-to-run spread was counted: read from the cells, assumed, or stated."""
    if sp is None:
        return "run-to-run spread not counted"
    each = f"sd {sp.tau:.1%} per cell ({sp.per_run:.1%} a run)"  # of the log tok/s: a share
    if sp.how == "stated":
        return f"run-to-run spread stated (--run-spread): {each}"
    if sp.how == "assumed":
        return (
            f"run-to-run spread assumed: {each}: fewer than {SPREAD_CELLS} cells with rounds in both runs to "
            "read it from (--run-spread S states one run's, from repeat runs of the same code)"
        )
    return (
        f"run-to-run spread counted: {each}, the upper 80% bound of the {sp.read:.1%} its "
        f"{sp.cells} cells show beyond their rounds' own"
    )


def checked(g: Gate) -> str:
    """Each check the gate ran and how many cells it judged: tok/s (open loops: p50 latency) from
    the rounds, the run-wide checks, acceptance length, and failed or absent; then the cells the new
    run's race left without a verdict."""
    said = []
    if g.tok_s_asked:
        lat = f" and p50 latency on {g.latency_cells} open loop(s)" if g.latency_cells else ""
        power = f" ({g.powered} with the power to see the allowed drop)" if g.gated else ""
        said.append(f"tok/s on {len(g.gated) - g.latency_cells} cell(s){lat}{power}")
        said += [f"{what} over {n} cell(s)" for what, n in g.run_wide_cells]
    if g.accept_asked:
        said.append(f"acceptance length on {g.accept_cells} cell(s)")
    said.append(f"failed or absent on {g.present_cells} cell(s)")
    left = f"; no verdict on {len(g.left_out)} cell(s) the new run's race left out" if g.left_out else ""
    return "checked: " + ", ".join(said) + left


def _why_inconclusive(g: Gate) -> str:
    if g.gated:  # every one with too little power
        why = (
            f"every cell gated on tok/s had too little power ({len(g.underpowered)} cell(s); more "
            "rounds, a quieter machine, or --run-spread S from repeat runs: docs/gate.md)"
        )
        more = f"; {len(g.no_interval)} more had fewer than 2 rounds in a run" if g.no_interval else ""
        return why + more
    parts = [f"{g.other_work} did other work"] if g.other_work or not g.tok_s_cells else []
    parts.append(f"{g.tok_s_ungated} were unreliable")
    if g.no_interval:
        parts.append(f"{len(g.no_interval)} had fewer than 2 rounds in a run")
    return f"tok/s gated on no cell ({', '.join(parts)})"


NO_GATE = (
    "no gate asked for: exit 0 whatever the table shows{missing}; --max-tok-s-drop F (tok/s; p50 "
    "latency in open loops), --max-latency-rise F or --max-accept-drop F gates the new run against "
    "the old (docs/gate.md)"
)


def cli(
    old: dict[str, Any],
    new: dict[str, Any],
    old_name: str,
    max_tok_s_drop: float | None,
    max_accept_drop: float | None,
    max_latency_rise: float | None,
    allow_inconclusive: bool,
    run_spread: float | None = None,
) -> tuple[list[str], int]:
    """What ``python -m pytest_specbench.report OLD NEW`` prints after its table, and its exit
    status: the gate's lines, or without a threshold one line saying no gate was asked for (exit 0)."""
    if max_tok_s_drop is None and max_accept_drop is None and max_latency_rise is None:
        seen = {b["param"] for b in new.get("benchmarks", [])}
        spec = new.get("specbench") or {}
        failed = {f.get("cell") for f in spec.get("failed_cells") or [] if isinstance(f, dict)}
        raced = left_out(new)
        gone = [
            c
            for c in (b["param"] for b in old.get("benchmarks", []))
            if c not in raced and (c not in seen or c in failed)
        ]
        missing = f" ({len(gone)} cell(s) of the old run missing or failed in the new one)" if gone else ""
        ours = [c for c in (b["param"] for b in old.get("benchmarks", [])) if c in raced]
        missing += (
            f" ({len(ours)} cell(s) the new run's race left out: no verdict, not missing)" if ours else ""
        )
        return [NO_GATE.format(missing=missing)], 0
    g = gate(old, new, max_tok_s_drop, max_accept_drop, max_latency_rise, run_spread)
    said = lines(g, old_name)
    if g.inconclusive and allow_inconclusive:
        return [*said, "(--allow-inconclusive: exit 0)"], 0
    return said, g.exit_code
