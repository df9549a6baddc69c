"""A cell's rounds: warm-up until warm, the timed rounds, and the baseline's rounds interleaved.

``timed`` runs what every workload kind shares: the configured warm-up rounds (extended while
two in a row differ by more than WARM_TOLERANCE), then the timed rounds, each with the prefix
cache flushed and garbage collected before its clock starts. Given a ``reference`` engine (an
instance of the cell's baseline method in this process, on backends whose engines can live
side by side), every round is also run on it, interleaved A B B A A B ...: the cell and its
baseline then see the same requests within seconds of each other, so the machine's drift over
the minutes between two engine groups (on a shared 2-core VM one engine ran 246-362 tok/s over
four blocks of a run) is not read as a speedup. No pytest.
"""

from __future__ import annotations

import array
import gc
import hashlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..deciding import stopping as stopping_rule
from ..deciding.stopping import Rule, Stopping, decided  # noqa: F401  (names the kinds and tests read here)
from ..engines.base import Engine, Request, RequestRecord
from ..engines.progress import PROGRESS
from ..matrix.cells import Cell
from ..stats import metrics


@dataclass
class CellRun:
    records: list[RequestRecord]  # timed rounds only
    round_times: list[float]
    extra: dict[str, Any] = field(default_factory=dict)
    round_digests: list[str] = field(default_factory=list)  # one per timed round (request_digest)
    round_output_tokens: list[int] = field(default_factory=list)  # per timed round, failed requests excluded
    # per timed round: its steady-state window (metrics.steady_window) or None (one wave, open loop)
    round_windows: list[Any] = field(default_factory=list)
    one_wave: bool = False  # a closed loop whose rounds never refill a slot (requests <= concurrency)
    # the baseline's rounds interleaved with this cell's (``timed`` with a reference engine)
    reference: dict[str, Any] | None = None


@dataclass(frozen=True)
class RoundPlan:
    """One round's requests, built before its clock starts: in order, with their arrival
    offsets (s) for an open loop (None: closed loop)."""

    requests: list[Request]
    arrivals: list[float] | None = None

    def digest(self) -> str:
        """sha256 (16 hex digits) of what the round sends: per request in order its tag, input
        ids, output length, temperature, seed and arrival offset. Two cells whose digests agree
        got the same requests at the same times."""
        return request_digest(self.requests, self.arrivals)


def request_digest(requests: list[Request], arrivals: list[float] | None = None) -> str:
    h = hashlib.sha256()
    for i, r in enumerate(requests):
        at = "-" if arrivals is None else f"{arrivals[i]:.9f}"
        h.update(f"{r.tag}|{r.max_new_tokens}|{r.temperature!r}|{r.seed}|{at}|".encode())
        h.update(array.array("q", r.input_ids).tobytes())
    return h.hexdigest()[:16]


class Meter(Protocol):
    """Measures something over a cell's timed rounds (e.g. GPU energy): ``start`` before the
    first timed round, ``stop`` after the last one returns what goes into the cell's extra. A
    meter may also measure each timed round (``lap_start`` / ``lap_stop``, returning a figure:
    the disturbance meter's share of the cores others took), which ``timed`` records per round
    for the cell and for its interleaved baseline."""

    def start(self) -> None: ...

    def stop(self) -> dict[str, Any]: ...


class Meters:
    """Several meters over the same window, their results merged."""

    def __init__(self, meters: list[Meter]):
        self.meters = meters

    def start(self) -> None:
        for m in self.meters:
            m.start()

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for m in self.meters:
            out.update(m.stop())
        return out

    def lap_start(self) -> None:
        for m in self.meters:
            _lap(m, "lap_start")

    def lap_stop(self) -> float | None:
        laps = [_lap(m, "lap_stop") for m in self.meters]
        return next((x for x in laps if x is not None), None)


def _lap(meter: Any, what: str) -> Any:
    """A meter's per-round reading (``lap_start`` / ``lap_stop``), where it has one."""
    fn = getattr(meter, what, None)
    return fn() if fn is not None else None


def meters(meter: Meter | None, engine: Any) -> Meter | None:
    """``meter`` together with the engine's own (``cell_meter()``: a server's counters)."""
    own = getattr(engine, "cell_meter", None)
    ms = [m for m in (meter, own() if own is not None else None) if m is not None]
    return None if not ms else ms[0] if len(ms) == 1 else Meters(ms)


# warm until warm: after the configured warm-up rounds, more (of the last warm-up plan) while
# the last two warm-up rounds' tok/s differ by more than WARM_TOLERANCE, at most WARM_EXTRA_MAX
WARM_TOLERANCE = 0.10
WARM_EXTRA_MAX = 3


def _round_rate(recs: list[RequestRecord], dt: float, concurrency: int, closed: bool) -> tuple[float, Any]:
    """A round's tok/s (its steady window's in a closed loop with refills, else tokens ÷ wall
    time) and the window (None without one)."""
    win = metrics.steady_window(recs, concurrency) if closed else None
    if win is not None:
        return win["tokens_per_s"], win
    tokens = sum(x.output_tokens for x in recs if not x.error)
    return (tokens / dt if dt > 0 else 0.0), None


def timed(
    engine: Engine,
    cell: Cell,
    plans: list[Any],
    round_fn: Callable[[Engine, Any], list[RequestRecord]],
    meter: Meter | None,
    reference: Reference | None = None,
    rule: Rule | None = None,
) -> CellRun:
    """Warm-up rounds (extended until two in a row agree within WARM_TOLERANCE, when any are
    configured), then the timed ones; ``plans`` (one per round, warm-up first) are built before
    the first clock starts, so no round times prompt building and the meters' window holds only
    the timed rounds. RoundPlans' digests become the run's round_digests. With a ``reference``
    (the baseline's engine), every round runs on both, in the order A B, B A, A B, ... (the
    configured warm-up rounds too), and the reference's per-round figures go into
    ``CellRun.reference``. How many timed rounds: the cell's stopping protocol ``rule``
    (deciding/stopping.py; default ``for_cell``), asked after every timed round;
    ``rounds_run``, ``stop_reason`` and ``rounds_stop`` say how they ended."""
    w = cell.workload
    closed = not cell.request_rate
    gc.unfreeze()  # the cell's first collection walks everything, earlier cells' frozen objects too
    records: list[RequestRecord] = []
    times: list[float] = []
    tokens: list[int] = []
    windows: list[Any] = []
    warm_rates: list[float] = []
    ref_rounds: list[list[RequestRecord]] = []
    ref_rates: list[float] = []  # per round: the reference's tok/s
    ref_own: list[float] = []  # per round: what its verdict rests on (tok/s, or open loop p50 s)
    # per timed round: the share of the cores other processes took during it (the meter's lap),
    # the cell's and its interleaved baseline's: whether a pair's two halves bore a load alike
    loads: list[float | None] = []
    ref_loads: list[float | None] = []
    lap: list[float | None] = [None, None]  # the last round's, the cell's last round's

    def one(eng: Engine, r: int, plan: Any, who: str = "") -> tuple[list[RequestRecord], float]:
        PROGRESS.start_round(r, len(plan.requests) if isinstance(plan, RoundPlan) else 0, who)
        eng.flush_cache()
        # no collection of earlier rounds' garbage inside this round's clock; what survives is
        # frozen, so the next round's collection walks only what was made since (a full walk of
        # a process holding torch and transformers took 0.2-0.4 s a round)
        gc.collect()
        gc.freeze()
        _lap(meter, "lap_start")
        t0 = time.perf_counter()
        if hasattr(eng, "round_span_s"):
            eng.round_span_s = None  # type: ignore[attr-defined]
        recs = round_fn(eng, plan)
        dt = time.perf_counter() - t0
        span = getattr(eng, "round_span_s", None)
        if span is not None:  # sent by client worker processes: the round's wall time from their
            dt = min(dt, span)  # shared start, without the dealing and merging around it
        lap[0] = _lap(meter, "lap_stop")
        return recs, dt

    def both(r: int, plan: Any, k: int) -> tuple[list[RequestRecord], float]:
        """The cell's round, and the reference's before or after it (k-th round: even after)."""
        if reference is not None and k % 2:
            ref(r, plan)
        out = one(engine, r, plan)
        lap[1] = lap[0]
        if reference is not None and not k % 2:
            ref(r, plan)
        return out

    def ref(r: int, plan: Any) -> None:
        assert reference is not None
        rr, dt = one(reference.engine, r, plan, f"baseline {reference.method}'s interleaved round")
        ref_rounds.append(rr)
        ref_rates.append(_round_rate(rr, dt, cell.concurrency, closed)[0])
        ref_own.append(ref_rates[-1] if closed else _p50(rr) or 0.0)
        ref_loads.append(lap[0])

    for r, plan in enumerate(plans[: w.warmup]):
        recs, dt = both(r, plan, r)
        warm_rates.append(_round_rate(recs, dt, cell.concurrency, closed)[0])
    extra = 0
    while w.warmup and extra < WARM_EXTRA_MAX and not _settled(warm_rates):
        extra += 1
        recs, dt = one(engine, w.warmup - 1, plans[w.warmup - 1])
        warm_rates.append(_round_rate(recs, dt, cell.concurrency, closed)[0])
    ref_rounds.clear()
    ref_rates.clear()
    ref_own.clear()
    ref_loads.clear()
    if meter is not None:
        meter.start()
    own: list[float] = []  # per timed round: tok/s (closed loop) or p50 E2E latency (open loop)
    rule = rule if rule is not None else stopping_rule.for_cell(cell)
    answer: stopping_rule.Answer | None = None
    base = ref_own if reference is not None else None
    for k, (r, plan) in enumerate(enumerate(plans[w.warmup : w.warmup + rule.looks.last], start=w.warmup)):
        recs, dt = both(r, plan, k)
        loads.append(lap[1])
        records += recs
        times.append(dt)
        tokens.append(sum(x.output_tokens for x in recs if not x.error))
        rate, win = _round_rate(recs, dt, cell.concurrency, closed)
        windows.append(win)
        own.append(rate if closed else _p50(recs) or 0.0)
        answer = rule.after_round(own, base, closed)  # deciding/stopping.py: continue, settled, dropped
        if answer.stops:
            break
    ran = plans[w.warmup : w.warmup + len(times)]
    run = CellRun(records, times, round_output_tokens=tokens, round_windows=windows)
    run.one_wave = closed and all(
        isinstance(p, RoundPlan) and len(p.requests) <= cell.concurrency for p in ran
    )
    run.round_digests = [p.digest() for p in ran if isinstance(p, RoundPlan)]
    run.extra["rounds_run"] = len(times)
    run.extra.update(rule.finish(own, base, closed, answer, w.max_rounds))
    from_first = w.kind == "trace"
    rates = [_offered(p.arrivals, from_first) for p in ran if isinstance(p, RoundPlan) and p.arrivals]
    offered = [x for x in rates if x]
    if offered:  # what each round's arrivals actually offered (a Poisson draw, not the nominal rate)
        run.extra["offered_request_rates"] = [round(x, 4) for x in offered]
    if w.warmup:
        run.extra.update(
            warmup_tokens_per_s=[round(x, 3) for x in warm_rates],
            warmup_extra_rounds=extra,
            warmup_settled=_settled(warm_rates),
        )
    if meter is not None and w.rounds:
        run.extra.update(meter.stop())
    if any(x is not None for x in loads):
        run.extra["round_other_cpu_share"] = [None if x is None else round(x, 4) for x in loads]
    if reference is not None:
        run.reference = reference.summary(ref_rounds, ref_rates, closed)
        if any(x is not None for x in ref_loads):
            run.reference["round_other_cpu_share"] = [None if x is None else round(x, 4) for x in ref_loads]
    return run


def _offered(arrivals: list[float], from_first: bool) -> float | None:
    """The rate a round's arrivals offered: Poisson arrivals count from the round's start (n over
    the last), a trace's from its first request (``from_first``: n - 1 over the span)."""
    if from_first:
        span = arrivals[-1] - arrivals[0]
        return (len(arrivals) - 1) / span if span > 0 else None
    return len(arrivals) / arrivals[-1] if arrivals[-1] > 0 else None


def _p50(recs: list[RequestRecord]) -> float | None:
    """A round's median E2E latency over its successful requests (None: none succeeded)."""
    ok = [r.latency_s for r in recs if not r.error]
    return statistics.median(ok) if ok else None


@dataclass
class Reference:
    """The baseline method's engine, run interleaved with a cell's rounds (``timed``)."""

    engine: Engine
    method: str
    group: str

    def summary(self, rounds: list[list[RequestRecord]], rates: list[float], closed: bool) -> dict[str, Any]:
        """Per timed round (the cell's order): the baseline's tok/s (closed loop: its steady
        window, as the cell's own) and p50 E2E latency (client queue time included); its
        failed requests and whether it saturated (an open loop, by the cell's own rule:
        metrics.queued_requests)."""
        p50s = [_p50(recs) for recs in rounds]
        return {
            "method": self.method,
            "group": self.group,
            "order": "interleaved: A B, B A, A B, ... (A: the cell's round, B: the baseline's)",
            "round_tokens_per_s": [round(x, 4) for x in rates],
            "round_latency_s_p50": [None if x is None else round(x, 6) for x in p50s],
            "errors": sum(1 for recs in rounds for r in recs if r.error),
            "saturated": not closed and metrics.queued_requests([r for recs in rounds for r in recs]) > 0,
        }


def _settled(rates: list[float]) -> bool:
    return len(rates) >= 2 and rates[-2] > 0 and abs(rates[-1] / rates[-2] - 1) <= WARM_TOLERANCE
