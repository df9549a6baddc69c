"""Pure metric functions: per-request records in, one cell's numbers out.

Definitions (docs/metrics.md has the long form):
- a round's output tokens/s: in a closed loop with more requests than slots, the tokens produced
  in its steady-state window (every slot busy: ramp-up and drain left out) ÷ the window; with one
  wave (lockstep) or an open loop, its tokens ÷ its wall time; a cell's tok/s is the geometric
  mean of its rounds' (what the paired speedup rests on); ``output_tokens_per_s_total`` is all
  tokens ÷ all wall time, ramp and drain included;
- acceptance length = sum(output tokens) / sum(verify steps) over the cell's requests
  (SGLang: completion_tokens / spec_verify_ct), never a server-cumulative counter;
- TTFT = submission -> first chunk carrying tokens; TPOT = (E2E - TTFT) / (output - 1);
- ITL: each chunk's gap is spread over the tokens it carried (k tokens in one chunk give k
  gaps of gap/k), so speculative decoding's multi-token chunks are not counted as one gap.
No pytest, no I/O, no globals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .quantile import percentile

if TYPE_CHECKING:  # the records' type only: metrics read their fields, never an engine
    from .records import RequestRecord

PCTS = (50, 90, 99)


def itl_gaps(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """Per-token inter-token latencies from (time, cumulative tokens) chunks."""
    gaps: list[float] = []
    for (t0, n0), (t1, n1) in zip(chunks, chunks[1:], strict=False):
        k = n1 - n0
        if k > 0:
            gaps.extend([(t1 - t0) / k] * k)
    return gaps


def tokens_by(rec: RequestRecord, t: float) -> float:
    """Output tokens ``rec`` had produced by ``t`` (seconds on its round's clock): from its chunks
    when streamed (each chunk's time is since submission), else spread evenly over its life."""
    s, e = rec.start_s or 0.0, rec.end_s if rec.end_s is not None else (rec.start_s or 0.0) + rec.latency_s
    if t <= s:
        return 0.0
    if t >= e:
        return float(rec.output_tokens)
    if rec.chunks:
        done = 0
        for ct, n in rec.chunks:
            if s + ct > t:
                break
            done = n
        return float(done)
    return rec.output_tokens * (t - s) / (e - s)


def steady_window(records: Sequence[RequestRecord], concurrency: int) -> dict[str, float] | None:
    """A closed-loop round's steady state: from the moment the C-th request was submitted (every
    slot busy) to the first completion after the last submission (a slot that stays empty),
    i.e. [C-th smallest start, (N - C + 1)-th smallest end] of N requests. Its tokens: what each
    request produced inside it (``tokens_by``; failed requests produced none). None with one
    wave (N <= C: no refill, the round is timed by its slowest request) or without the
    requests' times (a batch or an agentic session)."""
    n = len(records)
    if n <= concurrency or any(r.start_s is None or r.end_s is None for r in records):
        return None
    starts = sorted(r.start_s for r in records if r.start_s is not None)
    ends = sorted(r.end_s for r in records if r.end_s is not None)
    a, b = starts[concurrency - 1], ends[n - concurrency]
    if b <= a:
        return None
    tokens = sum(tokens_by(r, b) - tokens_by(r, a) for r in records if not r.error)
    return {"start_s": a, "end_s": b, "tokens": tokens, "tokens_per_s": tokens / (b - a)}


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals and len(vals) == len(values) else None


def tpot(rec: RequestRecord) -> float | None:
    if rec.ttft_s is None or rec.output_tokens < 2:
        return None
    return (rec.latency_s - rec.ttft_s) / (rec.output_tokens - 1)


def accept_length(records: Iterable[RequestRecord]) -> float | None:
    """Sum of output tokens / sum of verify steps; None when nothing speculated."""
    out = steps = 0
    for r in records:
        if r.verify_steps is None or r.error:
            continue
        out += r.output_tokens
        steps += r.verify_steps
    return out / steps if steps else None


def merge_histograms(records: Iterable[RequestRecord]) -> list[int]:
    hist: list[int] = []
    for r in records:
        for i, n in enumerate(r.accept_histogram):
            if i >= len(hist):
                hist.extend([0] * (i + 1 - len(hist)))
            hist[i] += n
    return hist


def slo_metrics(records: Sequence[RequestRecord], wall_s: float, slo: Mapping[str, float]) -> dict[str, Any]:
    """Service-level objectives per request: a request meets them when it did not fail and its
    TTFT (ttft_ms), TPOT (tpot_ms; a one-token reply has none and passes it) and E2E latency
    (e2e_s) are within the limits given; queue time counts (open loop). Attainment is the
    fraction of the cell's requests that met them, goodput their requests and output tokens per
    second of the rounds' wall time."""

    def meets(r: RequestRecord) -> bool:
        if r.error:
            return False
        if "ttft_ms" in slo and (r.ttft_s is None or r.ttft_s * 1e3 > slo["ttft_ms"]):
            return False
        t = tpot(r)
        if "tpot_ms" in slo and t is not None and t * 1e3 > slo["tpot_ms"]:
            return False
        return not ("e2e_s" in slo and r.latency_s > slo["e2e_s"])

    met = [r for r in records if meets(r)]
    return {
        "slo": dict(slo),
        "slo_attainment": len(met) / len(records) if records else None,
        "goodput_requests_per_s": len(met) / wall_s if wall_s > 0 else None,
        "goodput_tokens_per_s": sum(r.output_tokens for r in met) / wall_s if wall_s > 0 else None,
    }


def accept_rate_by_position(hist: Sequence[int]) -> list[float | None]:
    """From an accept histogram (verify steps by number of accepted drafts): for draft position
    p = 1, 2, ..., the fraction of steps that accepted position p among those that accepted every
    position before it. A step that proposed fewer drafts counts as stopping where it stopped."""
    out: list[float | None] = []
    for p in range(1, len(hist)):
        reached = sum(hist[p - 1 :])
        out.append(sum(hist[p:]) / reached if reached else None)
    return out


def drafts_proposed(records: Sequence[RequestRecord], hist: Sequence[int]) -> dict[str, Any]:
    """Where the engine reports its drafts (hf): verify steps that carried a draft, draft tokens
    proposed, the share of steps with no draft (an n-gram without a match), and acceptance by
    draft position among the steps that proposed that position (after accepting every earlier
    one), which replaces the histogram-only rate. Nothing where the engine does not say."""
    recs = [r for r in records if r.verify_steps is not None]
    if not recs or any(r.draft_steps is None for r in recs):
        return {}
    steps = sum(r.verify_steps or 0 for r in recs)
    with_draft = sum(r.draft_steps or 0 for r in recs)
    reached: list[int] = []
    for r in recs:
        for i, n in enumerate(r.position_reached):
            if i >= len(reached):
                reached.append(0)
            reached[i] += n
    out: dict[str, Any] = {
        "draft_steps": with_draft,
        "draft_tokens": sum(r.draft_tokens or 0 for r in recs),
        "no_draft_fraction": (steps - with_draft) / steps if steps else None,
        "accept_rate_by_position_basis": "steps that proposed the position",
    }
    if reached:
        out["accept_rate_by_position"] = [
            sum(hist[p + 1 :]) / n if n else None for p, n in enumerate(reached)
        ] or None
    return out


def _pcts(prefix: str, values: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for q in PCTS:
        v = percentile(values, q)
        out[f"{prefix}_p{q}"] = None if v is None else v * scale
    return out


def summarize(records: Sequence[RequestRecord], wall_s: float) -> dict[str, Any]:
    """One cell's metrics from the records of its timed rounds and their summed wall time."""
    ok = [r for r in records if not r.error]
    out_tokens = sum(r.output_tokens for r in ok)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [t for t in (tpot(r) for r in ok) if t is not None]
    itls = [g for r in ok for g in itl_gaps(r.chunks)]
    hist = merge_histograms(ok)
    m: dict[str, Any] = {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "first_error": next((r.error for r in records if r.error), None),
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "output_tokens": out_tokens,
        "wall_s": wall_s,
        "output_tokens_per_s": out_tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": len(ok) / wall_s if wall_s > 0 else None,
        "accept_length": accept_length(ok),
        "verify_steps": sum(r.verify_steps for r in ok if r.verify_steps is not None) or None,
        "accept_histogram": hist or None,
        "accept_rate_by_position": accept_rate_by_position(hist) or None,
        **drafts_proposed(ok, hist),
        **prefix_cache(ok),
        "queue_s_p50": percentile([r.queue_s for r in ok], 50),
        "queue_s_max": max((r.queue_s for r in ok), default=None),
    }
    m.update(_pcts("latency_s", [r.latency_s for r in ok]))
    m.update(_pcts("ttft_ms", ttfts, 1e3))
    m.update(_pcts("tpot_ms", tpots, 1e3))
    m.update(_pcts("itl_ms", itls, 1e3))
    return m


def prefix_cache(records: list[Any]) -> dict[str, Any]:
    """Prompt tokens served by the engine's prefix cache: their sum, and the hit rate over the
    prompt tokens of the requests whose engine reported it (None where no request's did)."""
    said = [r for r in records if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens for r in said)
    cached = sum(r.cached_tokens for r in said)
    return {
        "cached_tokens": cached,
        "prefix_cache_hit_rate": cached / prompt if said and prompt else None,
        "prefix_cache_reported": f"{len(said)} of {len(records)} requests"
        if said
        else "no request's engine reported it",
    }


# the JSON's metrics: 2 = a cell's tok/s is the geometric mean of its rounds' (steady window in a
# closed loop), output_tokens_per_s_total the former all-tokens ÷ all-time figure
METRICS_VERSION = 2

# what each tok/s estimator measures (tok_s_estimator); the terminal and Markdown tables say it
ESTIMATORS = {
    "steady window": "tokens produced while all C slots were busy ÷ that window (ramp-up and drain left out)",
    "one wave": "one wave of C requests per round: a round is timed by its slowest request (lockstep)",
    "round wall time": "a round's tokens ÷ its wall time",
    "open loop": "a round's tokens ÷ its wall time, which follows the offered load",
}

# a timed round is an outlier when its tok/s is off the median of the cell's rounds by more than
# OUTLIER_MADS robust standard deviations (1.4826 x MAD of the log rates) and by at least
# OUTLIER_MIN_RATIO (a factor): reported by name, kept in the numbers
OUTLIER_MADS = 4.0
OUTLIER_MIN_RATIO = 1.25


def outlier_rounds(rates: Sequence[float]) -> list[int]:
    """Indices of the rounds far off the others (at least 3 rounds; see OUTLIER_MADS)."""
    if len(rates) < 3 or any(r <= 0 for r in rates):
        return []
    logs = [math.log(r) for r in rates]
    med = percentile(logs, 50) or 0.0
    mad = 1.4826 * (percentile([abs(x - med) for x in logs], 50) or 0.0)
    limit = max(math.log(OUTLIER_MIN_RATIO), OUTLIER_MADS * mad)
    return [i for i, x in enumerate(logs) if abs(x - med) > limit]


SATURATION_QUEUE_S = 0.010  # an open-loop request that waited longer for a free slot: saturated


def queued_requests(records: Sequence[RequestRecord]) -> int:
    """The successful requests that waited more than SATURATION_QUEUE_S for a free slot: the one
    saturation rule, for a cell's own rounds and for its baseline's interleaved rounds alike (an
    open loop is saturated when this is above 0). A shorter wait is the client's scheduling
    jitter, not an engine that fell behind."""
    return sum(1 for r in records if not r.error and r.queue_s > SATURATION_QUEUE_S)


def per_request(records: Sequence[RequestRecord]) -> dict[str, list[Any]]:
    """The successful requests of a cell as columns (tag, prompt/output tokens, verify steps,
    latency, TTFT, queue time, prefix-cache hits): what paired comparisons across methods read
    (same tags)."""
    ok = [r for r in records if not r.error]
    return {
        "tag": [r.tag for r in ok],
        "prompt_tokens": [r.prompt_tokens for r in ok],
        "output_tokens": [r.output_tokens for r in ok],
        "verify_steps": [r.verify_steps for r in ok],
        "latency_s": [round(r.latency_s, 6) for r in ok],
        "ttft_s": [None if r.ttft_s is None else round(r.ttft_s, 6) for r in ok],
        "queue_s": [round(r.queue_s, 6) for r in ok],
        "cached_tokens": [r.cached_tokens for r in ok],  # None: the engine did not say
        "itl_ms_p50": [_round(percentile(itl_gaps(r.chunks), 50), 1e3) for r in ok],
    }


def _round(v: float | None, scale: float = 1.0) -> float | None:
    return None if v is None else round(v * scale, 4)


def open_loop_metrics(
    records: Sequence[RequestRecord], wall_s: float, rate: float, offered: Sequence[float] = ()
) -> dict[str, Any]:
    """What an open loop measures besides latency: the rate its rounds' arrivals actually offered
    (``offered``: per round, requests ÷ the last arrival, a trace's from its first arrival; the
    nominal ``rate`` when not given),
    the rate the engine completed requests at (requests ÷ the rounds' wall time, which includes
    the last requests' service), and whether the engine kept up: saturated when a request waited
    > SATURATION_QUEUE_S for a free slot (every slot taken at its arrival). The client's own
    lateness in waking for arrivals is reported apart (``client_late_s_max``), never judged as
    saturation nor charged to latency."""
    ok = [r for r in records if not r.error]
    queued = queued_requests(ok)
    return {
        "nominal_request_rate": rate,
        "offered_request_rate": sum(offered) / len(offered) if offered else rate,
        "achieved_request_rate": len(ok) / wall_s if wall_s > 0 else None,
        "queued_requests": queued,
        "saturated": queued > 0,
        "client_late_s_max": max((r.client_late_s for r in ok), default=None),
        "client_late_s_p99": percentile([r.client_late_s for r in ok], 99),
    }


def cell_metrics(
    records: Sequence[RequestRecord],
    round_times: Sequence[float],
    round_output_tokens: Sequence[int],
    *,
    request_digests: Sequence[str] = (),
    slo: Mapping[str, float] | None = None,
    request_rate: float | None = None,
    energy_j: float | None = None,
    roofline_tokens_per_s: float | None = None,
    server_spec: Mapping[str, Any] | None = None,
    server_latency: Mapping[str, Any] | None = None,
    client_lag: Mapping[str, Any] | None = None,
    round_windows: Sequence[Mapping[str, float] | None] = (),
    one_wave: bool = False,
    offered_rates: Sequence[float] = (),
) -> dict[str, Any]:
    """One cell's result metrics from its timed rounds: ``summarize`` over Σ round times, the
    tok/s of each round and their coefficient of variation, SLO attainment and goodput, the
    open-loop fields, energy per output token, the roofline fraction and the per-request columns.

    ``server_spec`` (a server's /metrics counters over the timed rounds, ``httpclient.spec_delta``)
    gives the accept length only when the requests carried none of their own (OpenAI API); it
    is then marked ``accept_scope: server`` and, when the server counted more requests than the
    cell sent, ``server_exclusive: False`` (someone else's requests are in it)."""
    from .paired import cv, round_p50s

    wall_s = sum(round_times)
    m = summarize(records, wall_s)
    m["metrics_version"] = METRICS_VERSION
    total_rates = [n / t for n, t in zip(round_output_tokens, round_times, strict=True) if t > 0]
    windows = list(round_windows)
    if windows and all(w is not None for w in windows) and not request_rate:
        rates = [w["tokens_per_s"] for w in windows if w is not None]
        m["tok_s_estimator"] = "steady window"
        m["steady_windows"] = [
            [round(w["start_s"], 6), round(w["end_s"], 6), round(w["tokens"], 3)]
            for w in windows
            if w is not None
        ]
        m["window_fraction"] = sum(w["end_s"] - w["start_s"] for w in windows if w is not None) / wall_s
        m["round_tokens_per_s_total"] = total_rates
    else:
        rates = total_rates
        m["tok_s_estimator"] = "open loop" if request_rate else "one wave" if one_wave else "round wall time"
    m["round_tokens_per_s"] = rates
    m["output_tokens_per_s_total"] = m["output_tokens_per_s"]
    if rates and len(rates) == len(round_times):
        m["output_tokens_per_s"] = geomean(rates)
    outliers = outlier_rounds(rates)
    if outliers:
        med = percentile(rates, 50)
        m["outlier_rounds"] = [
            {"round": i, "tokens_per_s": rates[i], "median_tokens_per_s": med} for i in outliers
        ]
    if request_rate:  # an open loop's tok/s follows its arrivals: the CV of its rounds' p50 latency
        by_round: dict[str, list[float]] = {}
        for r in records:
            if not r.error:
                by_round.setdefault(r.tag.split("/", 1)[0], []).append(r.latency_s)
        m["rounds_cv"] = cv([p for p in (percentile(v, 50) for v in by_round.values()) if p is not None])
    else:
        m["rounds_cv"] = cv(rates)
    if request_digests:
        import hashlib

        m["request_digests"] = list(request_digests)
        m["request_digest"] = hashlib.sha256("".join(request_digests).encode()).hexdigest()[:16]
    ok = [r for r in records if not r.error]
    m["prompt_tokens_mean"] = m["prompt_tokens"] / len(ok) if ok else None
    if energy_j is not None and m["output_tokens"]:
        m["joules_per_output_token"] = energy_j / m["output_tokens"]
    if slo:
        m.update(slo_metrics(records, wall_s, slo))
    if request_rate:
        m.update(open_loop_metrics(records, wall_s, request_rate, offered_rates))
    if roofline_tokens_per_s:  # decode bound without speculation
        tps = m.get("output_tokens_per_s")
        m["roofline_tokens_per_s"] = roofline_tokens_per_s
        m["roofline_fraction"] = tps / roofline_tokens_per_s if tps else None
    approx = sum(1 for r in ok if ("token_counts", "approximate") in r.meta)
    if approx:
        m["token_counts_approximate"] = approx
    if m["accept_length"] is not None:
        m["accept_scope"] = "request"
    elif server_spec and server_spec.get("accept_length") is not None:
        m["accept_length"] = server_spec["accept_length"]
        m["accept_scope"] = "server"
        if server_spec.get("accept_rate_by_position"):
            m["accept_rate_by_position"] = list(server_spec["accept_rate_by_position"])
        seen = server_spec.get("requests")
        m["server_exclusive"] = seen is None or seen <= len(records)
    m.update(server_clock(records, server_latency, client_lag))
    m["per_request"] = per_request(records)
    if request_rate:  # the rounds' p50 latency an open loop's paired ratio divides (paired.round_p50s)
        m["round_latency_s_p50"] = round_p50s(m)
    return m


CLIENT_BOUND_MS = 2.0  # the client read TTFT this much later than the server's clock ...
CLIENT_BOUND_FRACTION = 0.02  # ... and this much of it: its own event loop held the reading


CLIENT_LAG_MS = 2.0  # the client's event loop ran its ticks this much late on average: it was busy
CLIENT_LAG_P99_MS = 10.0  # ... or this much late in its worst 1 %: bursts it read late


def loop_lag(lags_ms: Sequence[float]) -> dict[str, Any]:
    """How late the client's event loops ran a periodic tick (ms after it was due, every
    clientworker.TICK_S) over a cell's timed rounds: mean, p99, max and how many ticks. An idle
    loop reads up to about 1 ms (its timers' millisecond granularity); a loop busy reading
    streams runs every callback late, chunks included."""
    if not lags_ms:
        return {"ticks": 0}
    return {
        "mean_ms": round(sum(lags_ms) / len(lags_ms), 4),
        "p99_ms": _round(percentile(lags_ms, 99)),
        "max_ms": round(max(lags_ms), 4),
        "ticks": len(lags_ms),
    }


def server_clock(
    records: Sequence[RequestRecord],
    server: Mapping[str, Any] | None,
    lag: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The server's mean TTFT and end-to-end latency over the cell's timed rounds (its /metrics
    histograms, ``httpclient.latency_delta``) beside the client's over the same requests, and
    ``client_bound`` when the client read TTFT more than 2 ms and 2 % later than the server
    stamped it and its loops' lag was not measured on time (measured on time, the gap is said as
    ``ttft_before_server_clock``: an H200 SGLang server's histogram starts after its HTTP intake,
    which a burst of 64-256 requests waits in: docs/results/h200-clock2). Only when the server
    counted exactly the cell's requests (else someone else's are in its mean:
    ``server_latency_exclusive: False``). Where the requests carry the server's own stamps
    (stats/ttft_legs.py), TTFT's three legs are recorded and judge instead: the client is bound
    only when its own legs (its send and the delivery) are late, on average or at p99. The
    client's means run from each request's submission (an open loop's own queue left out: the
    server never saw it). With ``lag`` (:func:`loop_lag`
    of the client's event loops), ``client_loop_lag_ms_mean`` / ``_p99`` / ``_max``, and the cell is
    client-bound too when its loops ran more than CLIENT_LAG_MS late on average or
    CLIENT_LAG_P99_MS in their worst 1 % (with or without a server histogram)."""
    out: dict[str, Any] = _lag_fields(lag)
    ok = [r for r in records if not r.error]
    # from each request's submission, as the server can see it: an open loop's own wait for a
    # slot (queue_s, in the record's TTFT and E2E as the arriving user saw them) left out
    ok_ttft = [r.ttft_s - r.queue_s for r in ok if r.ttft_s is not None]
    ok_e2e = [r.latency_s - r.queue_s for r in ok]
    for what, client in (("ttft", ok_ttft), ("e2e", ok_e2e)):
        mean, n = (server or {}).get(f"{what}_ms_mean"), (server or {}).get(f"{what}_requests")
        if mean is None:
            continue
        out[f"server_{what}_ms_mean"] = mean
        if client:
            out[f"client_{what}_ms_mean"] = sum(client) / len(client) * 1e3
        if n != len(ok):
            out["server_latency_exclusive"] = False
    from .ttft_legs import judged, legs, usable

    out.update(legs(records))
    c, s = out.get("client_ttft_ms_mean"), out.get("server_ttft_ms_mean")
    has_legs = "ttft_delivery_ms_mean" in out
    unusable = usable(out, len(ok_ttft)) if has_legs else None
    if unusable:
        out["ttft_legs_unused"] = unusable
    if has_legs and not unusable:  # the server's own stamps on every request, one clock: they judge
        if c is None:
            out["client_ttft_ms_mean"] = c = sum(ok_ttft) / len(ok_ttft) * 1e3 if ok_ttft else None
        by_legs = judged(out, CLIENT_BOUND_MS, CLIENT_BOUND_FRACTION, CLIENT_LAG_P99_MS)
        if "client_bound" in by_legs and out.get("client_bound"):
            by_legs["client_bound"] += "; " + out["client_bound"]
        out.update(by_legs)
    elif c is not None and s and out.get("server_latency_exclusive") is not False:
        late = c - s
        on_time = "client_loop_lag_ms_mean" in out and not out.get("client_bound")
        if late > CLIENT_BOUND_MS and late > CLIENT_BOUND_FRACTION * s and on_time:
            # the client's loops were measured on time: the gap is not the client's reading
            out["ttft_before_server_clock"] = (
                f"the client read TTFT {c:.1f} ms, the server stamped {s:.1f} ms (+{late:.1f} ms, "
                f"+{late / s:.0%}) while the client's loops ran on time: the gap lies before the "
                "server's clock starts (its HTTP intake of a burst) or on the way to it"
            )
        elif late > CLIENT_BOUND_MS and late > CLIENT_BOUND_FRACTION * s:
            said = out.get("client_bound")
            out["client_bound"] = (
                f"the client read TTFT {c:.1f} ms, the server stamped {s:.1f} ms (+{late:.1f} ms, "
                f"+{late / s:.0%}): the client (its event loop, or the way to the server), not the "
                "server, set that part of the latency" + (f"; {said}" if said else "")
            )
    return out


def _lag_fields(lag: Mapping[str, Any] | None) -> dict[str, Any]:
    if not lag or not lag.get("ticks"):
        return {}
    out: dict[str, Any] = {f"client_loop_lag_ms_{k[:-3]}": lag[k] for k in ("mean_ms", "p99_ms", "max_ms")}
    mean, p99 = lag["mean_ms"], lag["p99_ms"] or 0.0
    if mean > CLIENT_LAG_MS or p99 > CLIENT_LAG_P99_MS:
        out["client_bound"] = (
            f"the client's event loop ran {mean:.1f} ms late on average, {p99:.1f} ms in its worst 1 % "
            f"(limits {CLIENT_LAG_MS:g} and {CLIENT_LAG_P99_MS:g} ms): it read the streams late; more "
            "client processes (options: {client_processes: N}) or a less loaded client machine"
        )
    return out


ORACLE_TOLERANCE = 1e-6


def capped_accept(per_step: float, output_tokens: int | None) -> float:
    """The accept length of N output tokens at ``per_step`` tokens a verify step: the first token
    comes from prefill and the last step is capped, so N takes ceil((N - 1) / per_step) steps and
    the accept length is N / that (256 at 3: 3.012; 128 at 6: 5.818)."""
    if not output_tokens or output_tokens <= 1:
        return per_step
    return output_tokens / math.ceil((output_tokens - 1) / per_step)


def oracle_check(method: Any, accept: float | None, output_tokens: int | None = None) -> dict[str, Any]:
    """Draft = target ("oracle"): every draft token must be accepted. With K + 1 tokens per verify
    step (K = num_steps for standalone, num_draft_tokens for draft) and the first token from
    prefill, a request of N output tokens takes ceil((N - 1) / (K + 1)) verify steps (the last one
    capped), so the accept length must be N / that: K + 1 exactly when K + 1 divides N - 1 (256
    tokens at K = 3: 4.0; at K = 5: 256 / 43 = 5.953). Empty for other methods."""
    spec = method.speculative
    draft = method.draft_model
    if spec is None or draft is None or draft.path != method.model.path:
        return {}
    per_step = spec.expected_oracle_accept
    if per_step is None:
        return {}
    expected = capped_accept(per_step, output_tokens)
    exact = accept is not None and abs(accept - expected) <= ORACLE_TOLERANCE
    return {"oracle_accept_expected": expected, "oracle_exact": exact}


FORCED_TOLERANCE = 0.05  # an integer forced length; a fractional one: twice that


def forced_check(method: Any, accept: float | None, output_tokens: int | None = None) -> dict[str, Any]:
    """A forced accept length L (``simulate_accept_length``): the cell is a system-cost
    measurement, labelled ``accept_forced``. The first token comes from prefill and the last
    step is capped, so N output tokens take ceil((N - 1) / L) verify steps: the measured accept
    length must be N / that (256 tokens at L = 3: 3.012) within FORCED_TOLERANCE (twice that for
    a fractional L, which the engine meets on average). Empty for other methods."""
    spec = method.speculative
    if spec is None or spec.simulate_accept_length is None:
        return {}
    forced = float(spec.simulate_accept_length)
    expected = capped_accept(forced, output_tokens)
    tol = FORCED_TOLERANCE * (1 if forced.is_integer() else 2)
    return {
        "accept_forced": forced,
        "accept_forced_expected": round(expected, 6),
        "accept_forced_exact": accept is not None and abs(accept - expected) <= tol,
        "accept_forced_tolerance": tol,
        "forced_family": method.forced_family,
    }
