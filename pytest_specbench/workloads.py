"""Workloads: how a cell drives an engine. Each returns a :class:`CellRun`.

``throughput``: ``warmup`` untimed rounds, then ``rounds`` timed rounds of N distinct
prompts at closed-loop concurrency C, greedy, exactly ``output_tokens`` tokens (EOS
ignored). The prefix cache is flushed before every round and prompts never repeat, so no
round gets free prefill. Requests are not streamed unless ``options: {stream: true}``
(streaming adds per-chunk work in the server); the hf backend always times its chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import prompts
from .engines.base import Engine, Request, RequestRecord, run_requests
from .matrix import Cell


@dataclass
class CellRun:
    records: list[RequestRecord]  # timed rounds only
    round_times: list[float]
    extra: dict[str, Any] = field(default_factory=dict)


def _seed(cell: Cell, round_idx: int) -> int:
    # distinct prompts per cell, round and request; stable across runs and backends
    return (hash_str(cell.id) % 100_000) * 1000 + round_idx


def hash_str(s: str) -> int:
    import zlib

    return zlib.crc32(s.encode())


def throughput(engine: Engine, cell: Cell) -> CellRun:
    w = cell.workload
    n = w.requests_per_round(cell.concurrency)
    tok = engine.tokenizer()
    # Throughput cells stream only when asked (options: {stream: true}): streaming adds
    # per-chunk work in the server, although on the H200 the fidelity ratio was the same
    # with and without it (docs/results/README.md).
    stream = bool(dict(w.options).get("stream", False))
    records: list[RequestRecord] = []
    times: list[float] = []
    for r in range(w.warmup + w.rounds):
        reqs = [Request(p, cell.output_tokens, tag=f"round{r}/req{i}", stream=stream)
                for i, p in enumerate(prompts.make_prompts(tok, cell.context_tokens, n, _seed(cell, r)))]
        engine.flush_cache()
        t0 = time.perf_counter()
        recs = run_requests(engine, reqs, cell.concurrency)
        dt = time.perf_counter() - t0
        if r >= w.warmup:
            records += recs
            times.append(dt)
    return CellRun(records, times)


WORKLOADS: dict[str, Callable[[Engine, Cell], CellRun]] = {
    "throughput": throughput,
}


def run(engine: Engine, cell: Cell) -> CellRun:
    try:
        fn = WORKLOADS[cell.workload.kind]
    except KeyError:
        raise NotImplementedError(f"workload kind {cell.workload.kind!r} is not implemented yet; "
                                  f"implemented: {', '.join(WORKLOADS)}") from None
    return fn(engine, cell)
