"""The regression gate: ``python -m pytest_specbench.report OLD.json NEW.json --max-tok-s-drop F
--max-accept-drop F`` exits 1 when a cell of OLD got worse in NEW beyond the allowed fraction
(higher is better for both, which ``pytest-benchmark compare --benchmark-compare-fail`` cannot
gate: it fails only when a time goes up), when it failed in NEW, or when NEW does not hold it (a
shard lost, another ``-k``): a gate never passes on cells it did not see. Throughput compares
intervals from the two runs' rounds (Holm over the cells, the run-to-run spread counted: read
from four cells or more, else assumed, or stated with ``--run-spread``; gate_stats.py), not one
number against another: a cell with fewer than two rounds in a run is not gateable on it, and
a cell disturbed or saturated in either run gets no verdict. An open loop (its tok/s follows the
request rate) is gated on its p50 latency. Every cell's new/old pooled fails the run when its
interval lies wholly below the limit (a shift common to every cell). A new run whose hooks failed
fails. A cell the new run's race dropped or tuned out is listed without a verdict, not as absent
(a raced run gates against a full one on the cells both measured). A gate that could gate tok/s
on no cell with power exits 3, inconclusive. Its last line, passing, failing or inconclusive,
names each check it ran and the cells each judged (docs/gate.md). Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats.gate_stats import (
    POOLED_MIN,
    POWER,
    CellTest,
    Spread,
    cell_test,
    holm,
    pooled,
    run_to_run_spread,
    underpowered,
)
from ..stats.paired import Interval, no_verdict_reason, round_p50s, round_rates, t975


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


EXIT_REGRESSION = 1  # a cell got worse beyond the allowed drop, failed, or is absent; a hook failed
EXIT_INCONCLUSIVE = 3  # nothing the gate was asked to check could be checked (2 is a usage error)


@dataclass
class Gate:
    regressions: list[str] = field(default_factory=list)  # fail the gate (exit 1)
    unreliable: list[str] = field(default_factory=list)  # a side disturbed / saturated: no verdict
    not_separated: list[str] = field(default_factory=list)  # below the limit, Holm does not reject
    gated: list[str] = field(default_factory=list)  # per gated cell with rounds: what it could detect
    underpowered: list[str] = field(default_factory=list)  # of those, the ones with too little power
    no_interval: list[str] = field(default_factory=list)  # fewer than two rounds in a run: not gateable
    tok_s_cells: int = 0  # cells whose tok/s (open loop: p50 latency) was put to the gate
    tok_s_ungated: int = 0  # of those, the ones disturbed or saturated in a run (in unreliable)
    latency_cells: int = 0  # of those gated from their rounds, the open loops (on their p50 latency)
    tok_s_asked: bool = False  # --max-tok-s-drop (or --max-latency-rise) was given
    other_work: int = 0  # cells not compared on tok/s: the two runs' cells did different work
    spread: Spread | None = None  # the run-to-run spread counted: read from the cells, assumed or stated
    run_wide: list[str] = field(default_factory=list)  # the run-wide checks that passed, or why not made
    run_wide_failed: bool = False  # a run-wide interval lies wholly past its limit: a regression
    run_wide_cells: list[tuple[str, int]] = field(default_factory=list)  # run-wide checks made: what, over n
    accept_asked: bool = False  # --max-accept-drop was given
    accept_cells: int = 0  # cells whose acceptance length both runs measured: judged on it
    present_cells: int = 0  # cells of the old run judged on being in the new one and not failed there
    left_out: list[str] = field(default_factory=list)  # the new run's race dropped / tuned out: no verdict

    @property
    def powered(self) -> int:
        """Gated cells that could see a drop the gate cares about: those with rounds in both runs
        and enough power (a cell with one round in a run is not gateable: no interval)."""
        return len(self.gated) - len(self.underpowered)

    @property
    def inconclusive(self) -> bool:
        """tok/s was asked for, nothing regressed, and no cell was gated with the power to see a
        drop (every one unreliable, other work, with fewer than two rounds in a run, or too noisy):
        the gate checked no tok/s it was asked to, which a CI must not read as a pass
        (EXIT_INCONCLUSIVE)."""
        return self.tok_s_asked and not self.regressions and self.powered == 0

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive else 0


def _rates(b: dict[str, Any]) -> list[float]:
    e = b.get("extra_info") or {}
    return [r for r in round_rates(e, (b.get("stats") or {}).get("data") or []) if r > 0]


def open_loop(b: dict[str, Any]) -> bool:
    """An open loop (poisson, trace: a request rate): its tok/s follows the rate it was offered."""
    return bool((b.get("params") or {}).get("request_rate"))


def _speeds(b: dict[str, Any]) -> list[float]:
    """Per round what the gate compares, higher is better: tok/s, or in an open loop 1 / its p50
    latency (from per_request, else round_latency_s_p50)."""
    if not open_loop(b):
        return _rates(b)
    e = b.get("extra_info") or {}
    p50s = round_p50s(e) or [x for x in e.get("round_latency_s_p50") or [] if x is not None]
    return [1 / x for x in p50s if x > 0]


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


def _latency_rise(speed_drop: float) -> float:
    """A drop of 1 / latency as the rise of the latency: 1 / (1 - drop) - 1."""
    return math.inf if speed_drop >= 1 else 1 / (1 - speed_drop) - 1


def _judge(
    tests: list[CellTest], heads: dict[str, str], floor: float, out: Gate, run_spread: float | None = None
) -> None:
    """The cells with rounds together: the run-to-run spread (``run_spread``: one run's, stated),
    Holm's step-down, each cell's detectable drop (an open loop's: rise of its p50 latency);
    regressions, not-separated and underpowered cells into ``out``."""
    if not tests:
        return
    out.spread = run_to_run_spread(tests, run_spread)
    holm(tests, floor, out.spread)
    for t in tests:
        fl = floor if t.floor is None else t.floor
        point, lo, hi = t.interval()
        det = t.detectable(fl, len(tests))
        if t.floor is None:
            span = f"new/old {point:.3f} [{lo:.3f}, {hi:.3f}]"
            limit, past = 1 - fl, f"below {fl:.3f}"
            could = f"could detect a drop of {det:.1%} (at {POWER:.0%} power)"
            weak = underpowered(det, limit)
        else:  # an open loop: its latency new/old, higher is worse
            span = f"new/old {1 / point:.3f} [{1 / hi:.3f}, {1 / lo:.3f}]"
            limit, past = 1 / fl - 1, f"above {1 / fl:.3f}"
            rise = _latency_rise(det)
            seen = f"{rise:.1%}" if rise < 10 else "over 1000%"
            could = f"could detect a rise of {seen} in p50 latency (at {POWER:.0%} power)"
            weak = underpowered(rise, limit)
        bound = fl if t.floor is None else 1 / fl
        span += (
            f" from {t.n_old} + {t.n_new} rounds; p {t.p:.4f} against {bound:.3f}, "
            f"Holm's bar {t.bar:.4f} of {len(tests)} cell(s)"
        )
        out.gated.append(f"{t.cell}: {could}" + ("; too little power" if weak else ""))
        if weak:
            out.underpowered.append(t.cell)
        if t.regressed:
            out.regressions.append(f"{heads[t.cell]} ({span}: {past})")
        elif point < fl:
            own = " on its own" if out.run_wide_failed else ""
            out.not_separated.append(
                f"{heads[t.cell]} ({span}: {past} at the point, not separated from it: not a regression{own})"
            )


def _run_wide(ds: list[float], floor: float, out: Gate, latency: bool = False) -> None:
    """The cells' new/old pooled (gate_stats.pooled; ``latency``: the open loops' 1 / p50 latency):
    wholly below ``floor``, the whole run regressed, said in one line; else where it lies."""
    what = "open loops' p50 latency" if latency else "tok/s"
    got = pooled(ds)
    if got is None:
        if len(ds) > 1:  # one cell: its own check is the run's
            out.run_wide.append(f"run-wide {what} not checked: fewer than {POOLED_MIN} cells compared")
        return
    point, lo, hi = got
    if latency:
        span, past = f"{1 / point:.3f} [{1 / hi:.3f}, {1 / lo:.3f}]", f"above {1 / floor:.3f}"
    else:
        span, past = f"{point:.3f} [{lo:.3f}, {hi:.3f}]", f"below {floor:.3f}"
    said = (
        f"run-wide: {what} new/old {span} over {len(ds)} cell(s) (their mean log new/old, a 95% "
        "interval over the cells)"
    )
    out.run_wide_cells.append((f"run-wide {what}", len(ds)))
    if hi < floor:
        out.run_wide_failed = True
        slower = "slower to answer" if latency else "slower"
        out.regressions.insert(0, f"{said}: wholly {past}: the whole run is {slower}")
    else:
        out.run_wide.append(f"{said}: not wholly {past}")


def _accept(cell: str, ea: dict[str, Any], eb: dict[str, Any], limit: float, out: Gate) -> None:
    va, vb = ea.get("accept_length"), eb.get("accept_length")
    if va and vb is not None:
        out.accept_cells += 1
    if va and vb is not None and vb < va * (1 - limit):
        out.regressions.append(
            f"{cell}: accept length {va:.3f} -> {vb:.3f} (new/old {vb / va:.3f}, "
            f"allowed down to {1 - limit:.3f})"
        )


def _hooks(new: dict[str, Any], out: Gate) -> None:
    """The new run's failed hooks (``specbench.hook_failures``): the run failed, what they were to
    restore may be left stopped."""
    for f in (new.get("specbench") or {}).get("hook_failures") or []:
        if not isinstance(f, dict):
            out.regressions.append(f"a hook failed in the new run: {f!r}")
            continue
        who = f" of {f['group']}" if f.get("group") else ""
        left = f"; may be left stopped: {f['may_be_left']}" if f.get("may_be_left") else ""
        err = (str(f.get("error") or "no error recorded").splitlines() or [""])[0]
        out.regressions.append(f"{f.get('hook') or 'a'} hook{who} failed in the new run: {err}{left}")


def gate(
    old: dict[str, Any],
    new: dict[str, Any],
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
    max_latency_rise: float | None = None,
    run_spread: float | None = None,
) -> Gate:
    """Every cell of OLD against NEW (docs/gate.md): failed or absent in NEW fails, and so does a
    hook that failed in NEW; tok/s fails when Holm's step-down over the gated cells rejects
    "new/old >= 1 - ``max_tok_s_drop``" (the rounds' spread and the run-to-run spread counted:
    ``run_spread`` one run's sd where stated, else read from the cells or assumed), an
    open loop's p50 latency when it rejects "new/old <= 1 + ``max_latency_rise``" (default: the
    tok/s limit), and the whole run when the cells' tok/s new/old pooled lies wholly below the
    limit; a cell disturbed or saturated in either run gets no verdict, nor one with fewer than two
    rounds in a run; the acceptance length (counted, not timed) fails below old x
    (1 - ``max_accept_drop``), also in a cell whose rounds did other work. A cell OLD ran only in
    part (dropped by a race) is left out; one NEW's race dropped or tuned out is
    listed without a verdict, not as absent (left_out)."""
    rise = max_tok_s_drop if max_latency_rise is None else max_latency_rise
    out = Gate(
        tok_s_asked=max_tok_s_drop is not None or rise is not None, accept_asked=max_accept_drop is not None
    )
    if max_tok_s_drop is None and max_accept_drop is None and rise is None:
        return out
    _hooks(new, out)
    a = {b["param"]: b for b in old.get("benchmarks", [])}
    b_ = {b["param"]: b for b in new.get("benchmarks", [])}
    spec = new.get("specbench") or {}
    failed = {f["cell"]: f for f in spec.get("failed_cells") or [] if isinstance(f, dict) and f.get("cell")}
    missing = {m["cell"]: m for m in spec.get("missing_cells") or [] if isinstance(m, dict) and m.get("cell")}
    changed = redefined(old, new)
    raced = left_out(new)
    tests: list[CellTest] = []
    heads: dict[str, str] = {}
    ds: dict[bool, list[float]] = {False: [], True: []}  # log new/old, closed and open loops: run-wide
    for cell, ba in a.items():
        if _dropped(ba["extra_info"]):
            continue
        if cell not in failed and cell in raced and (cell not in b_ or _dropped(b_[cell]["extra_info"])):
            out.left_out.append(f"{cell}: {raced[cell]}")
            continue
        out.present_cells += 1  # judged on being in the new run and not failed there
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
        if max_accept_drop is not None:  # counted tokens: comparable even where the rounds' work differs
            _accept(cell, ba["extra_info"], bb["extra_info"], max_accept_drop, out)
        if cell in changed:
            out.other_work += 1
            continue
        test, d = _speed(cell, ba, bb, max_tok_s_drop, rise, heads, out)
        if test is not None:
            tests.append(test)
        if d is not None:
            ds[open_loop(ba)].append(d)
    if max_tok_s_drop is not None:
        _run_wide(ds[False], 1 - max_tok_s_drop, out)
    if rise is not None:
        _run_wide(ds[True], 1 / (1 + rise), out, latency=True)
    _judge(tests, heads, 1 - (max_tok_s_drop or 0.0), out, run_spread)
    return out


def _speed(
    cell: str,
    a: dict[str, Any],
    b: dict[str, Any],
    tok_s: float | None,
    rise: float | None,
    heads: dict[str, str],
    out: Gate,
) -> tuple[CellTest | None, float | None]:
    """One cell's tok/s (an open loop's p50 latency): unreliable or not gateable (listed), or its
    test (judged with the others' by Holm, in _judge); and where compared, its log new/old (open
    loop: old/new latency) for the run-wide check (a cell of one round counts there: the check's
    interval is over the cells)."""
    ea, eb = a["extra_info"], b["extra_info"]
    loop = open_loop(a)
    key, limit = ("latency_s_p50", rise) if loop else ("output_tokens_per_s", tok_s)
    va, vb = ea.get(key), eb.get(key)
    if limit is None or not va or not vb:
        return None, None
    out.tok_s_cells += 1
    why = no_verdict_reason(ea, "the old run's cell") or no_verdict_reason(eb, "the new run's cell")
    if why:
        out.unreliable.append(f"{cell}: {'p50 latency' if loop else 'tok/s'} not gated: {why}")
        out.tok_s_ungated += 1
        return None, None
    if loop:
        heads[cell] = f"{cell} (open loop): p50 latency {va:.3f} s -> {vb:.3f} s"
    else:
        heads[cell] = f"{cell}: tok/s {va:.3f} -> {vb:.3f}"
    sa, sb = _speeds(a), _speeds(b)
    test = cell_test(cell, sa, sb)
    if test is None:
        n = f"{len(sa)} + {len(sb)} rounds"
        out.no_interval.append(
            f"{heads[cell]} (new/old {vb / va:.3f} from {n}: no interval, not gated on a point)"
        )
        return None, math.log((va / vb) if loop else (vb / va))
    if loop:
        test.floor = 1 / (1 + limit)
        out.latency_cells += 1
    return test, test.d


def _dropped(e: dict[str, Any]) -> bool:
    race = e.get("race")
    return isinstance(race, dict) and race.get("status") == "dropped"


DROPPED = "not gated: the new run dropped it (it lost a race)"
TUNED_OUT = "not gated: the new run's tuning left it out (tuned out, not run)"


def _lost(e: dict[str, Any]) -> str:
    """Whom a dropped cell lost to and by how much, and how many rounds it ran, where recorded."""
    info = e.get("race") if isinstance(e.get("race"), dict) else {}
    try:
        said = (
            f": lost to {info['lost_to']} by x{float(info['ratio']):.3f} "
            f"[{float(info['lo']):.3f}, {float(info['hi']):.3f}]"
        )
        said += f" at shape {info['shape']}" if info.get("shape") else ""
    except (KeyError, TypeError, ValueError):
        said = ""
    ran = e.get("rounds_run")
    if isinstance(ran, int) and not isinstance(ran, bool):
        said += f" after {ran} round(s)" if ran else " (not run)"
    return said


def left_out(doc: dict[str, Any]) -> dict[str, str]:
    """Per cell the new run's race left out, why: dropped (in ``benchmarks`` marked ``race.status:
    dropped``, or kept apart under ``specbench.race.dropped_cells``: whom it lost to) or tuned out
    (``specbench.race.tuned_out``, never run). The gate lists such a cell of the old run without a
    verdict: neither a regression nor absent."""
    out: dict[str, str] = {}
    for b in doc.get("benchmarks") or []:
        e = b.get("extra_info") or {}
        if isinstance(e.get("race"), dict) and e["race"].get("status") == "dropped":
            out[b["param"]] = DROPPED + _lost(e)
    race = (doc.get("specbench") or {}).get("race") or {}
    if not isinstance(race, dict):
        return out
    for d in race.get("dropped_cells") or []:
        if isinstance(d, dict) and d.get("cell_id"):
            out.setdefault(str(d["cell_id"]), DROPPED + _lost(d.get("extra_info") or {}))
    for t in race.get("tuned_out") or []:
        if isinstance(t, dict) and t.get("cell_id"):
            why = str(t.get("reason") or "").splitlines()
            out.setdefault(str(t["cell_id"]), TUNED_OUT + (f": {why[0]}" if why and why[0] else ""))
    return out


def regressions(
    old: dict[str, Any],
    new: dict[str, Any],
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
    max_latency_rise: float | None = None,
) -> list[str]:
    """One line per cell of OLD that fails the gate in NEW (and per run-wide or hook failure)."""
    return gate(old, new, max_tok_s_drop, max_accept_drop, max_latency_rise).regressions
