"""The engine protocol and the records every backend produces.

An engine serves one (method, TP) group. Workloads talk to it only through
:class:`Engine`: ``agenerate`` (one streamed request), ``run`` (drive coroutines on the
engine's own event loop), ``flush_cache`` and ``close``. Every request yields a frozen
:class:`RequestRecord` whose token counts come from the engine, never from re-tokenized text.
No pytest and no heavy imports here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..stats.records import RequestRecord  # noqa: F401  (the record every backend returns)

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    input_ids: tuple[int, ...]
    max_new_tokens: int
    tag: str = ""  # e.g. "round2/req5", "turn3": carried into the record
    stream: bool = True  # False: one response at the end (no TTFT/ITL; no per-chunk overhead)
    temperature: float = 0.0  # 0: greedy; > 0: sampled (speculative sampling keeps the distribution)
    seed: int = 0  # sampling seed where the backend takes one (the same across methods)


@runtime_checkable
class Engine(Protocol):
    """What a backend implements. One live engine per process."""

    backend: str
    info: dict[str, Any]  # resolved engine args, versions: goes into the results JSON
    deadline: float | None  # time.monotonic() by which run() must return (set per cell)

    def tokenizer(self) -> Any: ...

    async def agenerate(self, request: Request) -> RequestRecord: ...

    def run(self, coro: Awaitable[T]) -> T: ...

    def flush_cache(self) -> None: ...

    def close(self) -> None: ...


class EngineStartError(RuntimeError):
    """An engine failed to start; the message carries the reason (e.g. the engine log tail)."""


class CellTimeout(RuntimeError):
    """A cell did not finish within its time limit (an engine that stopped making progress)."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived while requests ran: the run stops (not an engine failure)."""


def _trap_signals(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], hit: list[str]) -> list[Any]:
    """SIGTERM and SIGINT, while ``task`` runs on ``loop``, cancel it and note the signal. Through
    the loop (add_signal_handler), so they are seen inside uvloop, where a Python-level handler
    would wait for the interpreter. Main thread only; returns what to restore."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return []
    saved = []
    for sig in (signal.SIGTERM, signal.SIGINT):

        def on_signal(sig: signal.Signals = sig) -> None:
            hit.append(sig.name)
            task.cancel()

        prev = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        saved.append((sig, prev))
    return saved


def _untrap(loop: asyncio.AbstractEventLoop, saved: list[Any]) -> None:
    import signal

    for sig, prev in saved:
        loop.remove_signal_handler(sig)
        signal.signal(sig, prev)


async def guard(coro: Awaitable[T], deadline: float | None) -> T:
    """``coro`` bounded by ``deadline`` (time.monotonic()): engines wrap every run() in this.

    The limit lives in the event loop, so it fires whatever the loop is (uvloop included) and
    whatever the engine's processes do; signal-based timeouts need the interpreter to run.
    SIGTERM / SIGINT meanwhile cancel the requests and raise :class:`Interrupted`.
    """
    hit: list[str] = []
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()  # the finally below may run outside it (a coroutine closed by gc)
    saved = _trap_signals(loop, task, hit) if task is not None else []
    try:
        if deadline is None:
            return await coro
        remaining = deadline - time.monotonic()
        try:
            return await asyncio.wait_for(coro, max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise CellTimeout("no result before the cell's time limit (timeout_s)") from None
    except asyncio.CancelledError:
        if hit:
            raise Interrupted(f"interrupted by {hit[0]}") from None
        raise
    finally:
        _untrap(loop, saved)


WATCH_S = 0.5  # how often a running engine's processes are checked


def run_watched(engine: Any, loop: asyncio.AbstractEventLoop, coro: Awaitable[T]) -> T:
    """``coro`` on ``loop`` under the engine's cell limit (:func:`guard`), with a watchdog beside
    it that asks ``engine._dead()`` (why the engine is gone, or None) every WATCH_S and hands a
    reason to ``engine._mark_crashed``; a crash so marked (``engine.crashed``) raises the
    engine's ``_crash_error()`` instead of the cancellation it caused."""
    try:
        if engine.crashed:
            raise engine._crash_error()
        return _run_watched(engine, loop, coro)
    finally:
        # a coroutine never started (the engine already crashed, or its task cancelled before
        # its first step) is closed here, not left to gc's "never awaited" warning
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()


def _run_watched(engine: Any, loop: asyncio.AbstractEventLoop, coro: Awaitable[T]) -> T:
    async def watchdog() -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            why = engine._dead()
            if why:
                engine._mark_crashed(why)
                return

    async def guarded() -> T:
        dog = asyncio.ensure_future(watchdog())
        try:
            return await guard(coro, engine.deadline)
        finally:
            dog.cancel()

    try:
        return loop.run_until_complete(guarded())
    except asyncio.CancelledError:
        if engine.crashed:
            raise engine._crash_error() from None
        raise


async def timed_stream(
    submit: Callable[[], Any],
    prompt_tokens: int,
    tag: str,
    parse_chunk: Callable[[Any], tuple[int, dict[str, Any]]],
) -> RequestRecord:
    """Consume an async stream of cumulative chunks and build the record.

    ``parse_chunk`` returns (cumulative output tokens, meta) for a chunk. Only chunks that
    add tokens are timed: TTFT is the first chunk carrying tokens, ITL comes from the token
    count of each chunk (several tokens per chunk under speculative decoding).
    """
    t0 = time.perf_counter()
    chunks: list[tuple[float, int]] = []
    meta: dict[str, Any] = {}
    n = 0
    last: Any = None
    stream = await submit()
    async for chunk in stream:
        now = time.perf_counter() - t0
        n_new, meta = parse_chunk(chunk)
        last = chunk
        if n_new > n:
            chunks.append((now, n_new))
            n = n_new
    latency = time.perf_counter() - t0
    ids, text = output_of(last, n)
    return RequestRecord(
        prompt_tokens=prompt_tokens,
        output_tokens=n,
        latency_s=latency,
        ttft_s=chunks[0][0] if chunks else None,
        verify_steps=meta.get("spec_verify_ct"),
        accept_histogram=tuple(meta.get("spec_accept_histogram") or ()),
        cached_tokens=cached_tokens(meta),
        chunks=tuple(chunks),
        output_ids=ids,
        output_text=text,
        tag=tag,
        engine_prompt_tokens=int(meta["prompt_tokens"]) if meta.get("prompt_tokens") is not None else None,
    )


def cached_tokens(meta: dict[str, Any], usage: dict[str, Any] | None = None) -> int | None:
    """Prefix-cache hits of one request: SGLang's meta_info.cached_tokens, else an OpenAI usage's
    prompt_tokens_details.cached_tokens (SGLang sends it only with --enable-cache-report, and
    leaves prompt_tokens_details null for 0 hits); None where neither says."""
    if meta.get("cached_tokens") is not None:
        return int(meta["cached_tokens"])
    details = (usage or {}).get("prompt_tokens_details") or {}
    return int(details["cached_tokens"]) if details.get("cached_tokens") is not None else None


def output_of(chunk: Any, n_tokens: int) -> tuple[tuple[int, ...], str]:
    """A final response's output ids (when it carries all ``n_tokens`` of them) and text."""
    if not isinstance(chunk, dict):
        return (), ""
    ids = chunk.get("output_ids")
    ids = tuple(int(i) for i in ids) if isinstance(ids, (list, tuple)) and len(ids) == n_tokens else ()
    text = chunk.get("text")
    return ids, text if isinstance(text, str) else ""


async def closed_loop(engine: Engine, requests: Sequence[Request], concurrency: int) -> list[RequestRecord]:
    """Closed loop: submit ``requests`` keeping ``concurrency`` in flight (a slot is refilled as
    soon as a request finishes); results in order, each with its submission and completion
    time since the loop started (``start_s``, ``end_s``).

    A request is issued when a slot frees, so its latency starts at its submission. When
    every request fits in one wave and none streams, an engine with ``agenerate_batch``
    gets them as one batch, as a client sending a batch would (what a bare
    ``engine.generate([...])`` loop does; the fidelity script compares the two).
    """
    t0 = time.perf_counter()
    batch = getattr(engine, "agenerate_batch", None)
    if batch is not None and len(requests) <= concurrency and not any(r.stream for r in requests):
        try:
            recs = list(await batch(list(requests)))
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
            return [RequestRecord(len(r.input_ids), 0, 0.0, tag=r.tag, error=err) for r in requests]
        return [dataclasses.replace(r, start_s=0.0, end_s=r.latency_s) for r in recs]
    sem = asyncio.Semaphore(concurrency)

    async def one(req: Request) -> RequestRecord:
        async with sem:
            start = time.perf_counter() - t0
            rec = await safe_generate(engine, req)
            return dataclasses.replace(rec, start_s=start, end_s=time.perf_counter() - t0)

    return list(await asyncio.gather(*(one(r) for r in requests)))


async def safe_generate(engine: Engine, req: Request) -> RequestRecord:
    """A failed request becomes a record with ``error`` set, never a lost cell."""
    from .progress import PROGRESS

    try:
        return await engine.agenerate(req)
    except Exception as e:
        return RequestRecord(len(req.input_ids), 0, 0.0, tag=req.tag, error=f"{type(e).__name__}: {e}")
    finally:
        PROGRESS.request_done()


def poisson_arrivals(rate: float, n: int, seed: int) -> list[float]:
    """Arrival offsets (s) of ``n`` requests of a Poisson process of ``rate`` req/s."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


async def sent_at(
    engine: Any, req: Request, t_start: float, at: float, sem: asyncio.Semaphore, wait: Any = None
) -> RequestRecord:
    """``req`` sent at ``t_start + at`` (``wait(deadline)`` sleeps until then; asyncio.sleep by
    default), through a slot of ``sem``: its record with ``start_s`` / ``end_s`` since
    ``t_start``, the wait for a slot as ``queue_s`` and how late the loop woke as
    ``client_late_s``. One process's open loop and a client worker's share send alike."""
    deadline = t_start + at
    if deadline - time.perf_counter() > 0:
        await (wait(deadline) if wait is not None else asyncio.sleep(deadline - time.perf_counter()))
    woke = time.perf_counter()
    full = sem.locked()  # every slot taken: this request waits for one
    async with sem:
        queued = time.perf_counter() - woke if full else 0.0
        start = time.perf_counter() - t_start
        rec = await safe_generate(engine, req)
    rec = dataclasses.replace(
        rec,
        start_s=start,
        end_s=time.perf_counter() - t_start,
        client_late_s=max(0.0, woke - deadline),
    )
    return with_queue(rec, queued)


async def open_loop(
    engine: Engine, requests: Sequence[Request], arrivals: Sequence[float], max_in_flight: int
) -> list[RequestRecord]:
    """Open loop: request i arrives at ``arrivals[i]`` s whatever the engine does.

    At most ``max_in_flight`` are submitted at once; a request that arrives while every slot
    is taken waits for one. That wait is the record's ``queue_s``: the engine did not keep up,
    and it is counted in the request's E2E latency and TTFT, not hidden. How late the client's
    own event loop woke for an arrival (``client_late_s``) is measured apart and charged to
    nobody: it is the client's, not the method's.
    """
    sem = asyncio.Semaphore(max_in_flight)
    t_start = time.perf_counter()

    async def one(req: Request, at: float) -> RequestRecord:
        return await sent_at(engine, req, t_start, at, sem)

    return list(await asyncio.gather(*(one(r, a) for r, a in zip(requests, arrivals, strict=True))))


def with_queue(rec: RequestRecord, queued: float) -> RequestRecord:
    """The record as the arriving user saw it: client queue time added to E2E and TTFT."""
    return dataclasses.replace(
        rec,
        queue_s=queued,
        latency_s=rec.latency_s + queued,
        ttft_s=None if rec.ttft_s is None else rec.ttft_s + queued,
    )


def run_requests(engine: Engine, requests: Sequence[Request], concurrency: int) -> list[RequestRecord]:
    return engine.run(closed_loop(engine, requests, concurrency))
