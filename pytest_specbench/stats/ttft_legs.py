"""A streamed request's time to first token in three legs, on the one wall clock the client and
an SGLang server on the same host share (docs/metrics.md "The server's clock beside the client's").
Pure: no pytest, no I/O.

SGLang (0.5.x) stamps two instants in a ``/generate`` stream's meta_info: ``request_received_ts``,
where its TTFT histogram starts (its tokenizer manager took the request, after its HTTP layer
read and parsed it), and ``response_sent_to_client_ts``, where it handed the first chunk to its
HTTP layer (just after the histogram's end). With the client's own submission and read times:

- intake: the client's submission to the server's clock start (the client's write, the server's
  HTTP intake and parsing of a burst of requests);
- server: the server's clock start to the first chunk handed over (its histogram's TTFT and its
  output loop's wake-up);
- delivery: the hand-over to the client's read (the server's HTTP write and the client's read
  loop): charged to the client, the conservative side.

The client also times its own part of the intake: ``send``, submission to the moment its
request's body is about to be handed to the transport (``ttft_send_s``; any server: the JSON
encoding and the connection's acquisition are in it). A client that keeps up sends each request
and reads each first chunk within the bound together (send + delivery, per request, on average
and at p99); a TTFT gap against the server's histogram with the client's own legs that small
lies in the server's intake.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .quantile import percentile

if TYPE_CHECKING:
    from .records import RequestRecord

LEGS = ("intake", "server", "delivery")


def _ms_mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs) * 1e3, 3)


def _ms_p99(xs: Sequence[float]) -> float:
    return round((percentile(xs, 99) or 0.0) * 1e3, 3)


def legs(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """``ttft_send_ms_mean`` / ``_p99`` over the error-free requests that timed their send; where
    requests carry the server's stamps (streamed, both of them), over those: ``ttft_<leg>_ms_mean``
    for each leg, ``ttft_delivery_ms_p99``, the client's own legs per request (send + delivery:
    ``ttft_client_own_ms_mean`` / ``_p99``), ``ttft_legs_requests`` and ``ttft_send_requests`` (how
    many of them timed their send). {} without either."""
    metas = [dict(r.meta) for r in records if not r.error]
    sends = [m["ttft_send_s"] for m in metas if m.get("ttft_send_s") is not None]
    out: dict[str, Any] = {}
    if sends:  # the client's own part of the intake, whatever the server
        out["ttft_send_ms_mean"], out["ttft_send_ms_p99"] = _ms_mean(sends), _ms_p99(sends)
    both = [(m["ttft_legs_s"], m.get("ttft_send_s")) for m in metas if len(m.get("ttft_legs_s") or ()) == 3]
    if not both:
        return out
    got = [g for g, _ in both]
    out |= {f"ttft_{name}_ms_mean": _ms_mean([g[i] for g in got]) for i, name in enumerate(LEGS)}
    out["ttft_delivery_ms_p99"] = _ms_p99([g[2] for g in got])
    own = [g[2] + (x or 0.0) for g, x in both]  # the same requests' send and delivery
    out["ttft_client_own_ms_mean"], out["ttft_client_own_ms_p99"] = _ms_mean(own), _ms_p99(own)
    out["ttft_legs_requests"] = len(got)
    out["ttft_send_requests"] = sum(1 for _, x in both if x is not None)
    return out


CLOCK_SLACK_MS = 1.0  # a leg this far below 0 on average, or legs this far from the client's TTFT


def usable(m: dict[str, Any], timed_with_ttft: int) -> str | None:
    """Why a cell's legs cannot judge it, or None: every request with a TTFT must carry them (a
    mean over some is not the cell's), with its send timed by all or none of them, no leg may run
    backwards (the server's clock and the client's are not one: another host, a clock stepped),
    and the legs must add up to the client's TTFT from submission (``client_ttft_ms_mean``)."""
    n = m.get("ttft_legs_requests") or 0
    if n != timed_with_ttft:
        return f"the server's stamps came with {n} of the {timed_with_ttft} timed requests"
    k = m.get("ttft_send_requests") or 0
    if k not in (0, n):
        return f"the client timed its send for {k} of the {n} requests with the server's stamps"
    low = min(m["ttft_intake_ms_mean"], m["ttft_delivery_ms_mean"])
    if low < -CLOCK_SLACK_MS:
        return f"a leg read {low:.1f} ms on average: the server's clock and the client's are not one"
    c = m.get("client_ttft_ms_mean")
    total = sum(m[f"ttft_{name}_ms_mean"] for name in LEGS)
    if c is not None and abs(total - c) > CLOCK_SLACK_MS:
        return f"the legs add up to {total:.1f} ms, the client's TTFT from submission is {c:.1f} ms"
    return None


def judged(m: dict[str, Any], bound_ms: float, bound_fraction: float, bound_p99_ms: float) -> dict[str, Any]:
    """The legs' judgement, where a cell has usable legs: the client is bound when its own legs
    (its send, where timed, plus the delivery, per request) are above ``bound_ms`` and
    ``bound_fraction`` of its TTFT on average, or above ``bound_p99_ms`` in their worst 1 %; else,
    its loops on time (no ``client_bound`` already), a TTFT above the server's histogram is said as
    lying before the server's clock (``ttft_before_server_clock``), with the legs. The delivery
    leg holds the server's HTTP write too (its event loop): a late one is charged to the client,
    the conservative side."""
    if "ttft_delivery_ms_mean" not in m:
        return {}
    c = m.get("client_ttft_ms_mean")
    d, i, s = m["ttft_delivery_ms_mean"], m["ttft_intake_ms_mean"], m["ttft_server_ms_mean"]
    send = m.get("ttft_send_ms_mean") if m.get("ttft_send_requests") else None
    own, own99 = m["ttft_client_own_ms_mean"], m["ttft_client_own_ms_p99"]
    said = f"intake {i:.1f} ms, server {s:.1f} ms, delivery {d:.1f} ms (p99 {m['ttft_delivery_ms_p99']:.1f})"
    if send is not None:
        said += f"; the client's send {send:.2f} ms of the intake (p99 {m['ttft_send_ms_p99']:.2f})"
    if c and ((own > bound_ms and own > bound_fraction * c) or own99 > bound_p99_ms):
        return {
            "client_bound": f"the client's own legs (send and delivery) took {own:.1f} ms on average, "
            f"{own99:.1f} ms in their worst 1 % ({said}; limits {bound_ms:g} ms and {bound_fraction:.0%} "
            f"on average, {bound_p99_ms:g} ms at p99): its send and its reading set that part of TTFT"
        }
    srv = m.get("server_ttft_ms_mean") if m.get("server_latency_exclusive") is not False else None
    if m.get("client_bound"):  # its loops ran late: its sends were late too (they are in the intake)
        return {}
    if c and srv and c - srv > bound_ms and c - srv > bound_fraction * srv:
        return {
            "ttft_before_server_clock": f"the client read TTFT {c:.1f} ms, the server's histogram "
            f"{srv:.1f} ms (+{c - srv:.1f} ms, +{(c - srv) / srv:.0%}); legs: {said}: the client "
            + ("sent each request and " if send is not None else "")
            + f"read each first chunk within the {bound_ms:g} ms / {bound_fraction:.0%} bound "
            f"(p99 {own99:.1f} ms) and its loops ran on time, so the gap is the intake leg: the "
            "server's HTTP intake before its clock starts"
        }
    return {}
