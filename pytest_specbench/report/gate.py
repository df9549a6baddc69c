"""The regression gate: ``python -m pytest_specbench.report OLD.json NEW.json --max-tok-s-drop F
--max-accept-drop F`` exits 1 when a cell of OLD got worse in NEW beyond the allowed fraction
(higher is better for both, which ``pytest-benchmark compare --benchmark-compare-fail`` cannot
gate: it fails only when a time goes up), when it failed in NEW, or when NEW does not hold it (a
shard lost, another ``-k``): a gate never passes on cells it did not see. Throughput compares
intervals from the two runs' rounds (Holm over the cells, the run-to-run spread counted; gate_stats.py), not
one number against another, and a cell disturbed or saturated in either run gets no verdict. A
gate that could check nothing it was asked to exits 3, inconclusive (docs/gate.md). Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .gate_stats import POWER, CellTest, cell_test, holm, run_to_run_spread, underpowered
from .paired import Interval, no_verdict_reason, round_rates, t975


def failure_headline(f: dict[str, Any]) -> str:
    """One line for a failed cell: the exception's first line, plus the engine log's own reason."""
    err = str(f.get("error") or "").splitlines()
    if not err:
        reason = str(f.get("reason") or "").splitlines()
        return reason[-1] if reason else ""
    says = next((ln for ln in err if ln.startswith("engine log says: ")), None)
    return f"{err[0]}; {says}" if says else err[0]


def _work(doc: dict[str, Any]) -> dict[str, tuple[float, float] | None]:
    """Per cell, what one timed round measured: (requests per round, prompt tokens per request).
    Two runs' cells compare only when these agree (the number of rounds may differ)."""
    out: dict[str, tuple[float, float] | None] = {}
    for b in doc.get("benchmarks", []):
        e, rounds = b["extra_info"], len((b.get("stats") or {}).get("data") or [])
        n, p = e.get("requests"), e.get("prompt_tokens")
        out[b["param"]] = (round(n / rounds, 3), round(p / n, 3)) if n and p and rounds else None
    return out


def redefined(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """Cells in both runs whose rounds measured different work, with what differs."""
    wa, wb = _work(old), _work(new)
    out = {}
    for cell in (c for c in wa if c in wb):
        a, b = wa[cell], wb[cell]
        if a and b and a != b:
            names = ("requests per round", "prompt tokens per request")
            out[cell] = ", ".join(
                f"{n} {x:g} -> {y:g}" for n, x, y in zip(names, a, b, strict=True) if x != y
            )
    return out


EXIT_REGRESSION = 1  # a cell got worse beyond the allowed drop, failed, or is absent
EXIT_INCONCLUSIVE = 3  # nothing the gate was asked to check could be checked (2 is a usage error)


@dataclass
class Gate:
    regressions: list[str] = field(default_factory=list)  # fail the gate (exit 1)
    unreliable: list[str] = field(default_factory=list)  # a side disturbed / saturated: no verdict
    not_separated: list[str] = field(default_factory=list)  # below the limit, Holm does not reject
    gated: list[str] = field(default_factory=list)  # per gated cell with rounds: what it could detect
    underpowered: list[str] = field(default_factory=list)  # of those, the ones with too little power
    tok_s_cells: int = 0  # cells whose tok/s was put to the gate (gated or found unreliable)
    tok_s_ungated: int = 0  # of those, the ones disturbed or saturated in a run (in unreliable)
    tok_s_points: int = 0  # of those, the ones compared as points (fewer than two rounds in a run)
    tok_s_asked: bool = False  # --max-tok-s-drop was given
    other_work: int = 0  # cells not compared on tok/s: the two runs' cells did different work
    spread: float | None = None  # the run-to-run spread counted (log sd), None: too few cells

    @property
    def powered(self) -> int:
        """Gated cells that could see a drop the gate cares about: those with rounds and enough
        power, and those compared as points (one round: their power is not known)."""
        return len(self.gated) - len(self.underpowered) + self.tok_s_points

    @property
    def inconclusive(self) -> bool:
        """tok/s was asked for, nothing regressed, and no cell was gated with the power to see a
        drop (every one unreliable, other work, or too noisy): the gate checked nothing it was
        asked to, which a CI must not read as a pass (EXIT_INCONCLUSIVE)."""
        return self.tok_s_asked and not self.regressions and self.powered == 0

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive else 0


def _rates(b: dict[str, Any]) -> list[float]:
    e = b.get("extra_info") or {}
    return [r for r in round_rates(e, (b.get("stats") or {}).get("data") or []) if r > 0]


def ratio_between_runs(old: Sequence[float], new: Sequence[float]) -> Interval | None:
    """new / old tok/s of one cell in two runs, from each run's rounds: the ratio of the rounds'
    geometric means, with a 95 % Welch t-interval on the difference of the mean log rates (the
    rounds of two runs are not paired). Fewer than two rounds on a side: a point, no interval."""
    if not old or not new:
        return None
    la, lb = [math.log(x) for x in old], [math.log(x) for x in new]
    d = statistics.fmean(lb) - statistics.fmean(la)
    if len(la) < 2 or len(lb) < 2:
        return Interval(math.exp(d), None, None, min(len(la), len(lb)))
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    if va + vb == 0:  # every round of both runs alike: the interval is the point
        return Interval(math.exp(d), math.exp(d), math.exp(d), len(la) + len(lb))
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    half = t975(max(1, int(df))) * math.sqrt(va + vb)
    return Interval(math.exp(d), math.exp(d - half), math.exp(d + half), len(la) + len(lb))


def _tok_s(cell: str, a: dict[str, Any], b: dict[str, Any], limit: float, out: Gate) -> CellTest | None:
    """A cell's tok/s: unreliable (listed), points (judged here), or its test (judged with the
    others' by Holm, in _judge)."""
    ea, eb = a["extra_info"], b["extra_info"]
    why = no_verdict_reason(ea, "the old run's cell") or no_verdict_reason(eb, "the new run's cell")
    if why:
        out.unreliable.append(f"{cell}: tok/s not gated: {why}")
        out.tok_s_ungated += 1
        return None
    floor = 1 - limit
    test = cell_test(cell, _rates(a), _rates(b))
    if test is not None:
        return test
    out.tok_s_points += 1
    va, vb = ea.get("output_tokens_per_s"), eb.get("output_tokens_per_s")
    if vb < va * floor:
        out.regressions.append(
            f"{cell}: tok/s {va:.3f} -> {vb:.3f} (new/old {vb / va:.3f}, allowed down to {floor:.3f}; fewer "
            "than 2 rounds in a run: no interval, compared as points)"
        )
    return None


def _judge(tests: list[CellTest], heads: dict[str, str], limit: float, out: Gate) -> None:
    """The cells with rounds together: the run-to-run spread, Holm's step-down, each cell's
    detectable drop; regressions, not-separated and underpowered cells into ``out``."""
    if not tests:
        return
    floor = 1 - limit
    out.spread = run_to_run_spread(tests)
    holm(tests, floor, out.spread)
    for t in tests:
        point, lo, hi = t.interval()
        det = t.detectable(floor, len(tests))
        span = (
            f"new/old {point:.3f} [{lo:.3f}, {hi:.3f}] from {t.n_old} + {t.n_new} rounds; p {t.p:.4f} "
            f"against {floor:.3f}, Holm's bar {t.bar:.4f} of {len(tests)} cell(s)"
        )
        could = f"could detect a drop of {det:.1%} (at {POWER:.0%} power)"
        weak = underpowered(det, limit)
        out.gated.append(f"{t.cell}: {could}" + ("; too little power" if weak else ""))
        if weak:
            out.underpowered.append(t.cell)
        if t.regressed:
            out.regressions.append(f"{heads[t.cell]} ({span}: below {floor:.3f})")
        elif point < floor:
            out.not_separated.append(
                f"{heads[t.cell]} ({span}: below {floor:.3f} at the point, not separated from it: "
                "not a regression)"
            )


def _accept(cell: str, ea: dict[str, Any], eb: dict[str, Any], limit: float, out: Gate) -> None:
    va, vb = ea.get("accept_length"), eb.get("accept_length")
    if va and vb is not None and vb < va * (1 - limit):
        out.regressions.append(
            f"{cell}: accept length {va:.3f} -> {vb:.3f} (new/old {vb / va:.3f}, "
            f"allowed down to {1 - limit:.3f})"
        )


def gate(
    old: dict[str, Any],
    new: dict[str, Any],
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
) -> Gate:
    """Every cell of OLD against NEW (docs/gate.md): failed or absent in NEW fails; tok/s fails
    when Holm's step-down over the gated cells rejects "new/old >= 1 - ``max_tok_s_drop``" (the
    rounds' spread and the run-to-run spread counted), and gets no verdict when either side was
    disturbed or saturated; the acceptance length (counted, not timed) fails below old x
    (1 - ``max_accept_drop``), also in a cell whose rounds did other work. A cell OLD ran only in
    part (dropped by a race) is left out."""
    out = Gate(tok_s_asked=max_tok_s_drop is not None)
    if max_tok_s_drop is None and max_accept_drop is None:
        return out
    a = {b["param"]: b for b in old.get("benchmarks", [])}
    b_ = {b["param"]: b for b in new.get("benchmarks", [])}
    spec = new.get("specbench") or {}
    failed = {f["cell"]: f for f in spec.get("failed_cells") or [] if isinstance(f, dict) and f.get("cell")}
    missing = {m["cell"]: m for m in spec.get("missing_cells") or [] if isinstance(m, dict) and m.get("cell")}
    changed = redefined(old, new)
    tests: list[CellTest] = []
    heads: dict[str, str] = {}
    for cell, ba in a.items():
        if _dropped(ba["extra_info"]):
            continue
        if cell in failed:
            out.regressions.append(
                f"{cell}: measured in the old run, failed in the new one: {failure_headline(failed[cell])}"
            )
            continue
        if cell not in b_:
            why = f" ({missing[cell]['why']})" if cell in missing else ""
            out.regressions.append(f"{cell}: measured in the old run, absent from the new one{why}")
            continue
        bb = b_[cell]
        if _dropped(bb["extra_info"]):
            out.unreliable.append(f"{cell}: not gated: the new run dropped it (it lost a race)")
            continue
        if max_accept_drop is not None:  # counted tokens: comparable even where the rounds' work differs
            _accept(cell, ba["extra_info"], bb["extra_info"], max_accept_drop, out)
        if cell in changed:
            out.other_work += 1
            continue
        va, vb = ba["extra_info"].get("output_tokens_per_s"), bb["extra_info"].get("output_tokens_per_s")
        if max_tok_s_drop is not None and va and vb is not None:
            out.tok_s_cells += 1
            heads[cell] = f"{cell}: tok/s {va:.3f} -> {vb:.3f}"
            test = _tok_s(cell, ba, bb, max_tok_s_drop, out)
            if test is not None:
                tests.append(test)
    if max_tok_s_drop is not None:
        _judge(tests, heads, max_tok_s_drop, out)
    return out


def _dropped(e: dict[str, Any]) -> bool:
    race = e.get("race")
    return isinstance(race, dict) and race.get("status") == "dropped"


def regressions(
    old: dict[str, Any],
    new: dict[str, Any],
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
) -> list[str]:
    """One line per cell of OLD that fails the gate in NEW."""
    return gate(old, new, max_tok_s_drop, max_accept_drop).regressions


def lines(g: Gate, old_name: str) -> list[str]:
    """What the gate prints: per cell gated from its rounds the smallest drop it could detect and
    the run-to-run spread counted, the cells without a verdict, those not separated from the
    limit, the count gated, then the regressions; an inconclusive gate's last line says so."""
    out: list[str] = []
    if g.gated:
        head = f"{len(g.gated)} cell(s) gated on tok/s from their rounds, the smallest drop each could see:"
        out += ["\n" + head]
        out += [f"- {x}" for x in g.gated]
        out.append(
            f"run-to-run spread counted: {math.expm1(g.spread):.1%} per cell (beyond the rounds' own)"
            if g.spread is not None
            else "run-to-run spread not counted: fewer than 4 cells with rounds in both runs"
        )
    if g.unreliable:
        out += [f"\n{len(g.unreliable)} cell(s) without a tok/s verdict (unreliable, not regressions):"]
        out += [f"- {x}" for x in g.unreliable]
    if g.not_separated:
        out += [f"\n{len(g.not_separated)} cell(s) below the limit but not separated from it:"]
        out += [f"- {x}" for x in g.not_separated]
    skipped = g.tok_s_ungated
    if g.tok_s_cells:
        weak = f"; {len(g.underpowered)} with too little power" if g.underpowered else ""
        out.append(
            f"\ntok/s gated on {g.tok_s_cells - skipped} of {g.tok_s_cells} cell(s){weak}"
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
        if g.underpowered and len(g.underpowered) == g.tok_s_cells - skipped:
            why = (
                f"every cell gated on tok/s had too little power ({len(g.underpowered)} cell(s); more "
                "rounds, or a quieter machine)"
            )
        elif g.other_work or not g.tok_s_cells:
            why = f"tok/s gated on no cell ({g.other_work} did other work, {g.tok_s_ungated} were unreliable)"
        else:
            why = f"tok/s gated on no cell ({g.tok_s_ungated} were unreliable)"
        said = f"INCONCLUSIVE (exit {EXIT_INCONCLUSIVE}): {why}"
        out.append(f"{said}; the gate checked nothing it was asked to")
    return out
