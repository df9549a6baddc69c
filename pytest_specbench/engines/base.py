"""The engine protocol and the records every backend produces.

An engine serves one (method, TP) group. Workloads talk to it only through
:class:`Engine`: ``agenerate`` (one streamed request), ``run`` (drive coroutines on the
engine's own event loop), ``flush_cache`` and ``close``. Every request yields a frozen
:class:`RequestRecord` whose token counts come from the engine, never from re-tokenized text.
No pytest and no heavy imports here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    input_ids: tuple[int, ...]
    max_new_tokens: int
    tag: str = ""  # e.g. "round2/req5", "turn3": carried into the record
    stream: bool = True  # False: one response at the end (no TTFT/ITL; no per-chunk overhead)


@dataclass(frozen=True)
class RequestRecord:
    """What one request did. Times are seconds on the client's perf_counter clock.

    ``chunks`` holds (seconds since submission, cumulative output tokens) per streamed chunk
    that carried tokens; ``verify_steps`` is the number of target forward passes in decode
    (SGLang's spec_verify_ct), ``None`` for engines that do not speculate.
    """

    prompt_tokens: int
    output_tokens: int
    latency_s: float
    ttft_s: float | None = None
    queue_s: float = 0.0
    verify_steps: int | None = None
    accept_histogram: tuple[int, ...] = ()
    cached_tokens: int = 0
    chunks: tuple[tuple[float, int], ...] = ()
    output_ids: tuple[int, ...] = ()
    tag: str = ""
    error: str | None = None
    meta: tuple[tuple[str, Any], ...] = field(default=())


@runtime_checkable
class Engine(Protocol):
    """What a backend implements. One live engine per process."""

    backend: str
    info: dict[str, Any]  # resolved engine args, versions: goes into the results JSON

    def tokenizer(self) -> Any: ...

    async def agenerate(self, request: Request) -> RequestRecord: ...

    def run(self, coro: Awaitable[T]) -> T: ...

    def flush_cache(self) -> None: ...

    def close(self) -> None: ...


class EngineStartError(RuntimeError):
    """An engine failed to start; the message carries the reason (e.g. the engine log tail)."""


async def timed_stream(submit: Callable[[], Any], prompt_tokens: int, tag: str,
                       parse_chunk: Callable[[Any], tuple[int, dict[str, Any]]]) -> RequestRecord:
    """Consume an async stream of cumulative chunks and build the record.

    ``parse_chunk`` returns (cumulative output tokens, meta) for a chunk. Only chunks that
    add tokens are timed: TTFT is the first chunk carrying tokens, ITL comes from the token
    count of each chunk (several tokens per chunk under speculative decoding).
    """
    t0 = time.perf_counter()
    chunks: list[tuple[float, int]] = []
    meta: dict[str, Any] = {}
    n = 0
    stream = await submit()
    async for chunk in stream:
        now = time.perf_counter() - t0
        n_new, meta = parse_chunk(chunk)
        if n_new > n:
            chunks.append((now, n_new))
            n = n_new
    latency = time.perf_counter() - t0
    return RequestRecord(
        prompt_tokens=prompt_tokens,
        output_tokens=n,
        latency_s=latency,
        ttft_s=chunks[0][0] if chunks else None,
        verify_steps=meta.get("spec_verify_ct"),
        accept_histogram=tuple(meta.get("spec_accept_histogram") or ()),
        cached_tokens=int(meta.get("cached_tokens") or 0),
        chunks=tuple(chunks),
        tag=tag,
    )


async def closed_loop(engine: Engine, requests: Sequence[Request], concurrency: int
                      ) -> list[RequestRecord]:
    """Closed loop: submit ``requests`` keeping ``concurrency`` in flight; results in order.

    A request is issued when a slot frees, so its latency starts at its submission.
    """
    sem = asyncio.Semaphore(concurrency)

    async def one(req: Request) -> RequestRecord:
        async with sem:
            return await safe_generate(engine, req)

    return list(await asyncio.gather(*(one(r) for r in requests)))


async def safe_generate(engine: Engine, req: Request) -> RequestRecord:
    """A failed request becomes a record with ``error`` set, never a lost cell."""
    try:
        return await engine.agenerate(req)
    except Exception as e:
        return RequestRecord(len(req.input_ids), 0, 0.0, tag=req.tag, error=f"{type(e).__name__}: {e}")


def run_requests(engine: Engine, requests: Sequence[Request], concurrency: int) -> list[RequestRecord]:
    return engine.run(closed_loop(engine, requests, concurrency))
