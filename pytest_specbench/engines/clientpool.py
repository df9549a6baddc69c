"""The server backends' client worker processes: a round's requests sent from several processes.

One Python event loop reading hundreds of streams falls behind: on one H200 at c64 the client
read TTFT 20 % later than SGLang's own histogram, at c256 43 %, while its throughput agreed.
Above CLIENT_STREAMS_PER_PROCESS requests in flight, a round of the ``http`` and
``sglang-server`` backends is therefore sent by worker processes (engines/clientworker.py),
each with its own event loop and aiohttp session:

- **dealt**: the closed loop's C slots are split over the W workers (C // W each, the first
  C % W one more) and request i goes to the worker holding slot i mod C, so every worker's
  first wave is the round's first C requests and each slot keeps its share of the rest; an open
  loop deals its arrivals in turn (i mod W), each worker capping its share of C in flight. The
  round's requests, their order, tags and arrival times are the plan's: its digest is the same
  with one process or W;
- **one start**: every worker gets its share, answers ready, and is then given one start time
  on ``time.perf_counter`` (CLOCK_MONOTONIC, one clock for every process of a Linux machine);
  closed-loop slots open and open-loop arrivals are counted from it;
- **merged**: the records come back pickled, their ``start_s`` / ``end_s`` since that start,
  and are put back in the plan's order: the cell reads them as one process's;
- **persistent**: started on the first round that needs them, kept until the last engine using
  them closes, in the parent's process group, exiting when their stdin closes (the parent died)
  and killed at exit (atexit) and on close; SIGINT is the parent's, which aborts the round.

How many: ``client_processes`` in a workload's options, else :func:`default_processes`. One
means the engine's own event loop in the pytest process (no worker). No pytest here.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .clientworker import read_msg, write_msg

CLIENT_STREAMS_PER_PROCESS = 8  # requests in flight one client event loop reads before another helps
START_TIMEOUT_S = 60.0  # a worker's import and hello
STOP_GRACE_S = 2.0
START_MARGIN_S = 0.005  # from the last worker's "ready" to the round's start


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_processes(concurrency: int, cores: int | None = None) -> int:
    """Client processes for ``concurrency`` requests in flight: 1 (the engine's own loop) up to
    CLIENT_STREAMS_PER_PROCESS, then one per CLIENT_STREAMS_PER_PROCESS, at most this process's
    share of the usable cores (shared with the other pytest-xdist workers of the run, each with
    its own pool) less two (the server's own and the parent's), and at least two."""
    if concurrency <= CLIENT_STREAMS_PER_PROCESS:
        return 1
    share = (cores if cores is not None else usable_cores()) // max(1, _xdist_workers())
    return min(math.ceil(concurrency / CLIENT_STREAMS_PER_PROCESS), max(2, share - 2))


def _xdist_workers() -> int:
    try:
        return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        return 1


def effective_processes(concurrency: int, requests: int, setting: int | None) -> int:
    """The workers a round uses: the setting (else the default), never more than the slots or
    the requests (a worker without either would idle)."""
    w = setting if setting is not None else default_processes(concurrency)
    return max(1, min(w, concurrency, requests))


def split_slots(concurrency: int, workers: int) -> list[int]:
    """C slots over W workers: C // W each, the first C % W one more."""
    return [concurrency // workers + (1 if k < concurrency % workers else 0) for k in range(workers)]


def deal(n: int, concurrency: int, workers: int, closed: bool) -> list[list[int]]:
    """Request indices per worker, each list in the plan's order. Closed loop: request i to the
    worker holding slot i mod C (slot s belongs to worker s mod W); open loop: i mod W."""
    out: list[list[int]] = [[] for _ in range(workers)]
    for i in range(n):
        out[(i % concurrency) % workers if closed else i % workers].append(i)
    return out


class WorkerGone(RuntimeError):
    """A client worker process exited or stopped answering."""


class _Proc:
    """One worker process: its pipes, and a reader thread that hands each answer to the future
    waiting for it (keyed by kind and round)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_specbench.engines.clientworker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.pid = self.proc.pid
        self.lock = threading.Lock()
        self.waiting: dict[tuple[str, int], concurrent.futures.Future[Any]] = {}
        self.gone: str | None = None
        self.hello = self.expect("hello", 0)
        self.thread = threading.Thread(target=self._read, daemon=True, name=f"specbench-client-{self.pid}")
        self.thread.start()

    def expect(self, kind: str, rid: int) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            if self.gone:
                fut.set_exception(WorkerGone(self.gone))
            else:
                self.waiting[(kind, rid)] = fut
        return fut

    def send(self, msg: Any) -> None:
        try:
            assert self.proc.stdin is not None
            write_msg(self.proc.stdin, msg)
        except (BrokenPipeError, OSError, ValueError) as e:
            raise WorkerGone(f"client worker {self.pid}: {e}") from None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            try:
                msg = read_msg(self.proc.stdout)
            except Exception as e:  # a torn message: the worker is not usable
                msg, why = None, f"{type(e).__name__}: {e}"
            else:
                why = "its output ended"
            if msg is None:
                rc = self.proc.poll()
                with self.lock:
                    self.gone = f"client worker {self.pid} is gone ({why}; exit code {rc})"
                    waiting, self.waiting = self.waiting, {}
                for fut in waiting.values():
                    if not fut.done():
                        fut.set_exception(WorkerGone(self.gone))
                return
            kind, rid, payload = msg
            with self.lock:
                fut = self.waiting.pop((kind, rid), None)
            if fut is not None and not fut.done():
                fut.set_result(payload)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(("stop", 0, None))
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except (WorkerGone, OSError):
                pass
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


class ClientPool:
    """The worker processes of one pytest process, shared by its server engines (a cell's and its
    resident baseline's): each round names the endpoint it goes to. ``acquire`` / ``release``
    count the engines using it; the last release stops the workers."""

    def __init__(self) -> None:
        self.procs: list[_Proc] = []
        self.users = 0
        self.rid = 0
        atexit.register(self.stop)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def grow(self, n: int) -> None:
        """At least ``n`` live workers (a dead one is replaced), each past its hello."""
        self.procs = [p for p in self.procs if p.gone is None and p.proc.poll() is None]
        new = [_Proc() for _ in range(n - len(self.procs))]
        self.procs += new
        t_end = time.monotonic() + START_TIMEOUT_S
        for p in new:
            try:
                p.hello.result(max(0.1, t_end - time.monotonic()))
            except Exception as e:
                why = str(e) if isinstance(e, WorkerGone) else f"no hello within {START_TIMEOUT_S:g} s"
                raise WorkerGone(f"a client worker process did not start: {why}") from None

    async def round(
        self,
        target: tuple[str, str, tuple[tuple[str, str], ...], str],
        requests: Sequence[Any],
        arrivals: Sequence[float] | None,
        concurrency: int,
        workers: int,
    ) -> tuple[list[Any], list[float]]:
        """The round's records in the plan's order and its workers' loop lags (ms)."""
        self.grow(workers)
        self.rid += 1
        rid = self.rid
        procs = self.procs[:workers]
        shares = deal(len(requests), concurrency, workers, arrivals is None)
        slots = split_slots(concurrency, workers)  # workers <= concurrency: every share has a slot
        ready = [p.expect("ready", rid) for p in procs]
        done = [p.expect("done", rid) for p in procs]
        try:
            for p, share, c in zip(procs, shares, slots, strict=True):
                job = {
                    "target": target,
                    "share": [(i, requests[i]) for i in share],
                    "arrivals": None if arrivals is None else [arrivals[i] for i in share],
                    "concurrency": c,
                }
                p.send(("round", rid, job))
            await asyncio.gather(*(asyncio.wrap_future(f) for f in ready))
            t_start = time.perf_counter() + START_MARGIN_S
            for p in procs:
                p.send(("go", rid, t_start))
            answers = await asyncio.gather(*(asyncio.wrap_future(f) for f in done))
        except BaseException:
            for p in procs:
                try:
                    p.send(("abort", rid, None))
                except WorkerGone:
                    pass
            raise
        out: list[Any] = [None] * len(requests)
        lags: list[float] = []
        for p, a in zip(procs, answers, strict=True):
            if a.get("error"):
                raise WorkerGone(f"client worker {p.pid} failed its share of the round: {a['error']}")
            for i, rec in a["records"]:
                out[i] = rec
            lags += a["lag_ms"]
        return out, lags

    def acquire(self) -> ClientPool:
        self.users += 1
        return self

    def release(self) -> None:
        self.users = max(0, self.users - 1)
        if not self.users:
            self.stop()

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for p in procs:
            p.stop()


_POOL: ClientPool | None = None


def shared() -> ClientPool:
    """This process's pool (created on first use)."""
    global _POOL
    if _POOL is None:
        _POOL = ClientPool()
    return _POOL
