"""What a deployment trades: output tok/s per user (interactivity) against output tok/s per GPU
(cost), one point per (method, TP, concurrency) of a closed-loop shape, and the frontier of points
no other point beats on both; and the crossover summary: per method and (TP, shape), the
concurrencies where it is faster than its baseline, tied, or slower. Pure: no pytest, no plotting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def fmt_tokens(n: int) -> str:
    """3000 -> '3k' (as cell ids write token counts)."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


@dataclass(frozen=True)
class Point:
    cell: str
    method: str
    tp: int
    concurrency: int
    per_user: float  # output tok/s one request sees while it decodes: 1000 / TPOT p50 (ms)
    per_gpu: float  # the cell's output tok/s / TP
    per_user_from: str = "tpot"  # or "latency": tokens a request / (p50 E2E - p50 TTFT), without TPOT


def panel_of(p: dict[str, Any]) -> str:
    """The shape a Pareto panel holds (every axis but method, TP and concurrency)."""
    ctx = p.get("context_tokens")
    parts = [str(p.get("workload", "?"))]
    if ctx:
        parts.append(f"in{fmt_tokens(int(ctx))}")
    parts.append(f"out{p.get('output_tokens', '?')}")
    parts += [f"{k}={v}" for k, v in sorted(p.items()) if k not in _AXES and v is not None]
    return " ".join(parts)


_AXES = {"method", "tp", "concurrency", "workload", "context_tokens", "output_tokens"}


def _per_user(e: dict[str, Any]) -> tuple[float, str] | None:
    tpot = e.get("tpot_ms_p50")
    if isinstance(tpot, (int, float)) and tpot > 0:
        return 1000.0 / tpot, "tpot"
    lat, ttft, n = e.get("latency_s_p50"), e.get("ttft_ms_p50"), e.get("output_tokens")
    reqs = e.get("requests")
    if isinstance(lat, (int, float)) and isinstance(n, (int, float)) and reqs:
        decode = lat - (ttft or 0) / 1000.0  # no TTFT measured (not streamed): the whole latency
        return ((n / reqs) / decode, "latency") if decode > 0 else None
    return None


def never_ranked(e: dict[str, Any]) -> bool:
    """A cell that is never ranked, on a frontier or in a crossover: a forced accept length (a
    verify step's cost, not a drafter; breakeven.py reads it), a cell a race dropped, or an A/A
    control (a twin of the baseline: it reads the instance effect, report/control.py)."""
    return (
        e.get("accept_forced") is not None
        or (e.get("race") or {}).get("status") == "dropped"
        or e.get("aa_control") is not None
    )


def points(doc: dict[str, Any]) -> dict[str, list[Point]]:
    """Panel -> its points: closed-loop cells (no request rate) with a per-user rate, forced and
    dropped cells left out (never_ranked)."""
    out: dict[str, list[Point]] = {}
    for b in doc.get("benchmarks") or []:
        p, e = b.get("params") or {}, b.get("extra_info") or {}
        if p.get("request_rate") or not e.get("output_tokens_per_s") or never_ranked(e):
            continue
        got = _per_user(e)
        if got is None:
            continue
        tp = int(p.get("tp") or 1)
        pt = Point(
            b["param"],
            str(p.get("method")),
            tp,
            int(p.get("concurrency") or 1),
            got[0],
            e["output_tokens_per_s"] / tp,
            got[1],
        )
        out.setdefault(panel_of(p), []).append(pt)
    return out


def trade_panels(panels: dict[str, list[Point]]) -> dict[str, list[Point]]:
    """The panels that show a trade: some method measured at two or more (TP, concurrency)."""
    return {
        k: pts
        for k, pts in panels.items()
        if any(
            len({(q.tp, q.concurrency) for q in pts if q.method == m}) > 1 for m in {q.method for q in pts}
        )
    }


def frontier(pts: list[Point]) -> list[Point]:
    """The points no other point beats on both axes (ties kept once), by tok/s per user."""
    best: list[Point] = []
    top = float("-inf")
    for pt in sorted(pts, key=lambda q: (-q.per_user, -q.per_gpu, q.cell)):
        if pt.per_gpu > top:
            best.append(pt)
            top = pt.per_gpu
    return sorted(best, key=lambda q: q.per_user)


def csv_rows(panels: dict[str, list[Point]]) -> list[list[Any]]:
    rows: list[list[Any]] = [
        [
            "panel",
            "cell",
            "method",
            "tp",
            "concurrency",
            "tok_s_per_user",
            "per_user_from",
            "tok_s_per_gpu",
            "frontier",
        ]
    ]
    for panel, pts in panels.items():
        front = {q.cell for q in frontier(pts)}
        for q in sorted(pts, key=lambda q: (q.method, q.tp, q.concurrency)):
            rows.append(
                [
                    panel,
                    q.cell,
                    q.method,
                    q.tp,
                    q.concurrency,
                    round(q.per_user, 3),
                    q.per_user_from,
                    round(q.per_gpu, 3),
                    q.cell in front,
                ]
            )
    return rows


def _runs(items: list[tuple[int, str]]) -> list[tuple[str, list[int]]]:
    """Consecutive concurrencies with the same verdict, in concurrency order."""
    out: list[tuple[str, list[int]]] = []
    for c, v in sorted(items):
        if out and out[-1][0] == v:
            out[-1][1].append(c)
        else:
            out.append((v, [c]))
    return out


def crossover(doc: dict[str, Any]) -> list[str]:
    """Per method with a baseline and (TP, shape): where it is faster than the baseline, not
    separated, or slower, by concurrency, e.g. "dflash tp1 throughput in512 out128: faster at
    c1-c8, not separated at c16, slower at c32" (no verdict: disturbed, saturated or failed)."""
    by: dict[tuple[str, int, str], list[tuple[int, str]]] = {}
    for b in doc.get("benchmarks") or []:
        p, e = b.get("params") or {}, b.get("extra_info") or {}
        base, verdict = e.get("speedup_baseline"), e.get("speedup_verdict")
        if not base or base == p.get("method") or verdict in (None, "baseline") or never_ranked(e):
            continue
        word = (
            "tied" if "±" in verdict else verdict
        )  # "within ±2%"; faster, slower, not separated as they are
        key = (
            str(p.get("method")),
            int(p.get("tp") or 1),
            panel_of(p),
        )
        by.setdefault(key, []).append((int(p.get("concurrency") or 1), word))
    out = []
    for (method, tp, panel), items in sorted(by.items()):
        parts = []
        for verdict, cs in _runs(items):
            span = f"c{cs[0]}" if len(cs) == 1 else f"c{cs[0]}-c{cs[-1]}"
            parts.append(f"{verdict} at {span}")
        out.append(f"{method} tp{tp} {panel}: " + ", ".join(parts))
    return out


def hosts(doc: dict[str, Any]) -> dict[str, str]:
    """Cell id -> the host that measured it (each cell's provenance; a merged run's come from
    several)."""
    out = {}
    for b in doc.get("benchmarks") or []:
        host = ((b.get("extra_info") or {}).get("provenance") or {}).get("host")
        if host:
            out[b["param"]] = str(host)
    return out


def hosts_note(front: list[Point], where: dict[str, str]) -> str | None:
    """A frontier whose points were measured on different hosts (a merged run) says so: their
    rates then carry the hosts' difference too."""
    on = {where.get(q.cell, "?") for q in front}
    if len(on) < 2:
        return None
    return f"frontier across {len(on)} hosts ({', '.join(sorted(on))}): points labelled @host"
