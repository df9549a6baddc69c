"""One client worker process of the server backends (``python -m pytest_specbench.engines.clientworker``).

It holds its own event loop (uvloop where installed) and one aiohttp session per endpoint, and
runs the share of a round its parent (engines/clientpool.py) deals it: its requests, in order,
with its share of the closed loop's concurrency or at their open-loop arrival times, from the
start time the parent gives every worker (``time.perf_counter``: CLOCK_MONOTONIC, one clock for
every process of the machine). Its records go back pickled, with their submission and
completion times counted from that start, and with how late its event loop ran a periodic
tick over the round (the loop's lag).

Messages are length-prefixed pickles on stdin (from the parent) and on a private copy of
stdout (to it); the process's own stdout goes to stderr so that nothing else can write into
that stream. It exits when its stdin closes (the parent stopped or died) and ignores SIGINT
(Ctrl-C reaches the parent, which stops the round and then its workers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

HEADER = struct.Struct(">Q")
TICK_S = 0.005  # the lag probe's period


def read_msg(f: BinaryIO) -> Any:
    """One message, or None at the end of the stream."""
    head = f.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (n,) = HEADER.unpack(head)
    body = f.read(n)
    if len(body) < n:
        return None
    return pickle.loads(body)


def write_msg(f: BinaryIO, msg: Any) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(HEADER.pack(len(data)) + data)
    f.flush()


async def sleep_until(t: float) -> None:
    """Wake at ``t`` (perf_counter) to well under a millisecond: the loop's timers wake up to
    1 ms late, so the last 2 ms are spent yielding."""
    d = t - time.perf_counter()
    if d > 0.002:
        await asyncio.sleep(d - 0.002)
    while time.perf_counter() < t:
        await asyncio.sleep(0)


async def tick_lags(out: list[float]) -> None:
    """Until cancelled: every TICK_S, how late (ms) the loop ran the tick after it was due."""
    want = time.perf_counter() + TICK_S
    while True:
        await asyncio.sleep(max(0.0, want - time.perf_counter()))
        now = time.perf_counter()
        out.append((now - want) * 1e3)
        want = now + TICK_S


class _Sender:
    """What ``base.safe_generate`` calls: one endpoint's client."""

    def __init__(self, client: Any):
        self.agenerate = client.generate


async def run_share(
    client: Any, share: list[tuple[int, Any]], arrivals: list[float] | None, concurrency: int, t_start: float
) -> tuple[list[tuple[int, Any]], list[float]]:
    """This worker's requests (index, Request) from ``t_start``: a closed loop of ``concurrency``
    slots, or each request at ``t_start + arrivals[k]`` with at most ``concurrency`` in flight
    (a request that finds them taken waits: its ``queue_s``), as ``base.closed_loop`` and
    ``base.open_loop`` do in one process. Records in the share's order with ``start_s`` /
    ``end_s`` since ``t_start``; the loop's lag (ms) over the share."""
    from .base import safe_generate, sent_at

    sender = _Sender(client)
    sem = asyncio.Semaphore(concurrency)
    lags: list[float] = []
    await sleep_until(t_start)
    ticker = asyncio.ensure_future(tick_lags(lags))

    async def closed(req: Any) -> Any:
        async with sem:
            start = time.perf_counter() - t_start
            rec = await safe_generate(sender, req)
            return dataclasses.replace(rec, start_s=start, end_s=time.perf_counter() - t_start)

    async def opened(req: Any, at: float) -> Any:
        return await sent_at(sender, req, t_start, at, sem, sleep_until)

    try:
        if arrivals is None:
            recs = await asyncio.gather(*(closed(r) for _, r in share))
        else:
            recs = await asyncio.gather(*(opened(r, a) for (_, r), a in zip(share, arrivals, strict=True)))
    finally:
        ticker.cancel()
    return [(i, rec) for (i, _), rec in zip(share, recs, strict=True)], lags


class Worker:
    def __init__(self, out: BinaryIO):
        self.out = out
        self.lock = threading.Lock()
        self.loop = _new_loop()
        self.clients: dict[tuple[Any, ...], Any] = {}
        self.rounds: dict[int, dict[str, Any]] = {}
        self.tasks: dict[int, asyncio.Task[Any]] = {}

    def send(self, msg: Any) -> None:
        with self.lock:
            write_msg(self.out, msg)

    def client(self, target: tuple[str, str, tuple[tuple[str, str], ...], str]) -> Any:
        from .httpclient import Client

        if target not in self.clients:
            url, api, headers, model = target
            self.clients[target] = Client(url, api, dict(headers), model)
        return self.clients[target]

    def handle(self, msg: Any) -> None:
        kind, rid, payload = msg
        if kind == "round":
            self.rounds[rid] = payload
            self.loop.create_task(self.prepare(rid, payload))
        elif kind == "go":
            job = self.rounds.pop(rid, None)
            if job is not None:
                self.tasks[rid] = self.loop.create_task(self.run_round(rid, job, payload))
        elif kind == "abort":
            self.rounds.pop(rid, None)
            task = self.tasks.get(rid)
            if task is not None:
                task.cancel()
        elif kind == "stop":
            self.loop.create_task(self.stop())

    async def prepare(self, rid: int, job: dict[str, Any]) -> None:
        """The endpoint's session made before this worker says it is ready: no round's clock
        holds its creation."""
        try:
            await self.client(job["target"]).ensure()
        finally:
            self.send(("ready", rid, None))

    async def run_round(self, rid: int, job: dict[str, Any], t_start: float) -> None:
        try:
            client = self.client(job["target"])
            recs, lags = await run_share(client, job["share"], job["arrivals"], job["concurrency"], t_start)
            self.send(("done", rid, {"records": recs, "lag_ms": lags}))
        except asyncio.CancelledError:
            self.send(("done", rid, {"error": "aborted"}))
        except Exception:
            self.send(("done", rid, {"error": traceback.format_exc(limit=8)}))
        finally:
            self.tasks.pop(rid, None)

    async def stop(self) -> None:
        for c in self.clients.values():
            await c.close()
        self.loop.stop()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")  # the parent's channel; fd 1 itself now goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb")
    w = Worker(out)
    asyncio.set_event_loop(w.loop)
    import aiohttp  # noqa: F401  (imported before the hello: a round never waits for it)

    def reader() -> None:
        while True:
            msg = read_msg(inp)
            if msg is None:  # the parent closed the pipe or died: nothing is left to serve
                os._exit(0)
            w.loop.call_soon_threadsafe(w.handle, msg)

    threading.Thread(target=reader, daemon=True).start()
    w.send(("hello", 0, {"pid": os.getpid()}))
    w.loop.run_forever()
    os._exit(0)


if __name__ == "__main__":
    main()
