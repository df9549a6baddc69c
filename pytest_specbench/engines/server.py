"""Backends ``http`` (an endpoint the plugin does not start) and ``sglang-server`` (one
``python -m sglang.launch_server`` per (method, TP) group).

Both send the workloads' token-id requests over HTTP: SGLang's native ``/generate`` (per-request
``meta_info``: prompt/completion/cached tokens, ``spec_verify_ct``, ``spec_accept_histogram``) or
OpenAI's ``/v1/completions`` (acceptance only from the server's Prometheus counters, diffed over
the cell's timed rounds and marked server-scoped). ``sglang-server`` renders the same YAML ->
arguments mapping as the in-process engine as CLI flags, pins the GPUs through the
CUDA_VISIBLE_DEVICES it inherits, runs the server in its own process group with its output in
the group's log, and tears the whole group down (SIGTERM, then SIGKILL) when the group ends.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..inputs import tinymodel
from ..matrix.cells import EngineGroup
from .base import CellTimeout, EngineStartError, Request, RequestRecord, run_watched
from .httpclient import (
    Client,
    counter_sums,
    histogram_sums,
    http_call,
    latency_delta,
    parse_prometheus,
    spec_delta,
)
from .sglang import DEFAULTS, EngineCrashed, args_hash, engine_kwargs, failure_report

T = TypeVar("T")
WARMUP_TIMEOUT_S = 600.0
STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL of the server's process group
FLUSH_RETRY_S = 10.0  # /flush_cache refuses while requests are still running
LAG_KEEP = 1_000_000  # loop-lag samples an engine keeps between two cells' meters


def api_key(method: Any) -> dict[str, str]:
    """The Authorization header from the variable ``api_key_env`` names (never logged or saved)."""
    name = getattr(method, "api_key_env", None)
    if not name:
        return {}
    return {"Authorization": f"Bearer {os.environ[name]}"}


class HTTPEngine:
    """An endpoint: ``method.url`` with ``method.api`` (sglang | openai). No lifecycle, no GPU
    pinning, no memory planning."""

    backend = "http"
    deadline: float | None = None
    log_path: Path | None = None
    log_offset = 0

    def __init__(self, group: EngineGroup, url: str | None = None):
        self.group = group
        m = group.method
        self.url = (url or m.url or "").rstrip("/")
        self.api = m.api or "sglang"
        self.crashed: str | None = None
        self._tok: Any = None
        self.flush_note: str | None = None
        self.flush_path: str | None = None  # the flush endpoint that answered
        self.loop = _new_loop()
        self.client = Client(self.url, self.api, api_key(m))
        # the client's own clock: its event loops' lag (ms) per round, and how many processes sent
        # each round (engines/clientpool.py); the cell's meter reads what its timed rounds added
        self.lag_ms: list[float] = []
        self.processes_used: list[int] = []
        # the last round's wall time from its workers' shared start to its last completion (None:
        # sent from this process): the round's clock without the dealing and merging around it
        self.round_span_s: float | None = None
        self._pool: Any = None
        t0 = time.perf_counter()
        self.server_info = self._connect()
        self._warm_up()
        self.info: dict[str, Any] = {
            "backend": self.backend,
            "url": self.url,
            "api": self.api,
            "model": self.client.model or None,
            "api_key_env": m.api_key_env,  # the variable's name only
            "server_info": self.server_info,
            "connect_and_warmup_s": time.perf_counter() - t0,
        }
        if self.server_info:
            self.info["server_args_hash"] = args_hash(self.server_info)

    # ------------------------------------------------------------------ connection
    def _get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        return http_call(self.url + path, self.client.headers, timeout=timeout)

    def _connect(self) -> dict[str, Any]:
        """Check that the endpoint answers; the OpenAI API's served model name; what an SGLang
        server sized (/get_server_info)."""
        import json

        if self.api == "openai":
            status, body = self._get("/v1/models")
            if status != 200:
                raise EngineStartError(f"{self.group.id}: GET {self.url}/v1/models: {_said(status, body)}")
            try:
                served = [m["id"] for m in json.loads(body)["data"]]
            except (ValueError, KeyError, TypeError):
                served = []
            want = dict(self.group.method.engine_args).get("served_model")
            if want is not None and want not in served:
                raise EngineStartError(
                    f"{self.group.id}: engine_args.served_model {want!r} is not served at "
                    f"{self.url}/v1/models; served: {', '.join(served) or '(none)'}"
                )
            if want is None and len(served) != 1:
                raise EngineStartError(
                    f"{self.group.id}: {self.url}/v1/models lists "
                    f"{', '.join(served) if served else 'no model'}; name the one to benchmark in the "
                    "method's engine_args: {served_model: NAME}"
                )
            self.client.model = want or served[0]
            return {}
        status, body = self._get("/health")
        if status != 200:
            raise EngineStartError(f"{self.group.id}: GET {self.url}/health: {_said(status, body)}")
        for path in ("/get_server_info", "/server_info"):
            status, body = self._get(path)
            if status == 200:
                try:
                    info = json.loads(body)
                except ValueError:
                    return {}
                return {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, type(None)))}
        return {}

    def _warm_up(self) -> None:
        self.deadline = time.monotonic() + WARMUP_TIMEOUT_S
        try:
            rec = self.run(self.client.generate(Request(tuple(range(16, 48)), 8, tag="warmup", stream=False)))
        except CellTimeout:
            raise EngineStartError(
                self._report(
                    f"{self.group.id}: the warm-up request got no answer within {WARMUP_TIMEOUT_S:g} s"
                )
            ) from None
        except EngineCrashed as e:
            raise EngineStartError(str(e)) from None
        except Exception as e:
            raise EngineStartError(
                self._report(f"{self.group.id}: the warm-up request failed: {type(e).__name__}: {e}")
            ) from None
        finally:
            self.deadline = None
        if rec.output_tokens != 8:
            raise EngineStartError(
                f"{self.group.id}: the warm-up request asked for 8 tokens and got {rec.output_tokens}"
            )

    def _report(self, what: str) -> str:
        return failure_report(what, self.log_path, self.log_offset) if self.log_path else what

    # ------------------------------------------------------------------ Engine protocol
    def tokenizer(self) -> Any:
        if self._tok is None:
            from transformers import AutoTokenizer

            m = self.group.method.model
            self._tok = AutoTokenizer.from_pretrained(tinymodel.resolve(m.tokenizer or m.path))
        return self._tok

    def _dead(self) -> str | None:
        """Why the engine cannot go on (a launched server that exited), else None."""
        return None

    def run(self, coro: Awaitable[T]) -> T:
        return run_watched(self, self.loop, coro)

    def _mark_crashed(self, why: str) -> None:
        if self.crashed:
            return
        self.crashed = why
        for task in asyncio.all_tasks(self.loop):
            task.cancel()

    def _crash_error(self) -> EngineCrashed:
        return EngineCrashed(
            self._report(
                f"{self.group.id}: engine crashed ({self.crashed}); the group's remaining cells fail"
            )
        )

    def submit_round(
        self,
        requests: Sequence[Request],
        arrivals: Sequence[float] | None,
        concurrency: int,
        processes: int | None = None,
    ) -> list[RequestRecord]:
        """A round's requests (a closed loop of ``concurrency``, or at their ``arrivals``) from
        ``processes`` client processes (None: clientpool.default_processes): one is this
        engine's own event loop, more are the shared worker processes (engines/clientpool.py).
        Records in the requests' order; the loops' lag and the process count kept for the
        cell's meter."""
        from .base import closed_loop, open_loop
        from .clientpool import effective_processes, shared
        from .clientworker import tick_lags

        w = effective_processes(concurrency, len(requests), processes)
        self.processes_used.append(w)
        self.round_span_s = None
        if len(self.lag_ms) > LAG_KEEP:  # an engine no cell meters (an interleaved baseline)
            del self.lag_ms[: -LAG_KEEP // 2]
        if w == 1:

            async def ticked() -> list[RequestRecord]:
                tick = asyncio.ensure_future(tick_lags(self.lag_ms))
                try:
                    if arrivals is not None:
                        return await open_loop(self, requests, arrivals, concurrency)
                    return await closed_loop(self, requests, concurrency)
                finally:
                    tick.cancel()

            return self.run(ticked())
        if self.crashed:
            raise self._crash_error()
        if self._pool is None:
            self._pool = shared().acquire()
        self._pool.grow(w)
        target = (self.url, self.api, tuple(sorted(self.client.headers.items())), self.client.model)
        recs, lags = self.run(self._pool.round(target, requests, arrivals, concurrency, w))
        self.lag_ms += lags
        self.round_span_s = max((r.end_s or 0.0 for r in recs), default=0.0)
        from .progress import PROGRESS

        for _ in recs:
            PROGRESS.request_done()
        return recs

    async def agenerate(self, request: Request) -> RequestRecord:
        try:
            return await self.client.generate(request)
        except Exception:
            why = await self._gone()
            if why:  # the server died under the request: the group fails, not just this request
                self._mark_crashed(why)
            raise

    async def _gone(self) -> str | None:
        """Why the engine is gone after a failed request (None: a failure of that request)."""
        return None

    def flush_cache(self) -> None:
        """SGLang's API: /flush_cache (retried while requests drain). OpenAI API: vLLM's
        /reset_prefix_cache, else SGLang's /flush_cache (an SGLang server behind its OpenAI API),
        else a note in every cell that the prefix cache was not flushed."""
        if self.crashed:
            raise self._crash_error()
        if self.api == "sglang":
            paths = ["/flush_cache"]
        else:  # the one that answered before, else both in turn
            paths = [self.flush_path] if self.flush_path else ["/reset_prefix_cache", "/flush_cache"]
        said = []
        t_end = time.monotonic() + FLUSH_RETRY_S
        for path in paths:
            while True:
                status, body = http_call(self.url + path, self.client.headers, method="POST")
                if status == 0:  # nothing answers: the group's remaining cells fail now
                    self._mark_crashed(self._dead() or f"{self.url} stopped answering ({body})")
                    raise self._crash_error()
                if status == 200:
                    self.flush_path, self.flush_note = path, None
                    return
                if status in (404, 405) or time.monotonic() > t_end:
                    said.append(f"POST {path}: {_said(status, body)}")
                    break
                time.sleep(0.2)  # SGLang refuses to flush while requests are still running
        self.flush_note = f"prefix cache not flushed ({'; '.join(said)})"

    def cell_meter(self) -> Any:
        """The server's Prometheus counters over the cell's timed rounds (where /metrics
        answers) and whether its prefix cache could be flushed."""
        return _ServerMeter(self)

    def close(self) -> None:
        try:
            if self._pool is not None:
                pool, self._pool = self._pool, None
                pool.release()  # the last engine using the worker processes stops them
        finally:
            try:
                if not self.loop.is_closed():
                    self.loop.run_until_complete(self.client.close())
            finally:
                self.loop.close()


class _ServerMeter:
    def __init__(self, engine: HTTPEngine):
        self.engine = engine
        self.before: dict[str, float] = {}

    def _scrape(self) -> dict[str, float]:
        status, body = self.engine._get("/metrics")
        if status != 200:
            return {}
        samples = parse_prometheus(body)
        return {**counter_sums(samples), **histogram_sums(samples)}

    def start(self) -> None:
        self.before = self._scrape()
        del self.engine.lag_ms[:], self.engine.processes_used[:]  # what came before is no cell's

    def stop(self) -> dict[str, Any]:
        from ..stats.metrics import loop_lag

        after = self._scrape()
        out: dict[str, Any] = {"server_spec": spec_delta(self.before, after)} if after else {}
        used = sorted(set(self.engine.processes_used))
        if used:  # how many processes sent the timed rounds, and how late their loops ran
            out["client_processes"] = used[0] if len(used) == 1 else used
            out["client_loop_lag"] = loop_lag(self.engine.lag_ms)
        clock = latency_delta(self.before, after) if after else {}
        if clock:  # the server's own clock over the timed rounds, beside the client's
            out["server_latency"] = clock
        if self.engine.flush_note:
            out["prefix_cache"] = self.engine.flush_note
        return out


def _said(status: int, body: str) -> str:
    return f"no answer ({body})" if status == 0 else f"HTTP {status}: {body.strip()[:200]}"


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def cli_args(kwargs: dict[str, Any]) -> list[str]:
    """``sglang.Engine`` keyword arguments as ``launch_server`` flags: ``tp_size: 2`` ->
    ``--tp-size 2``; True -> the bare flag; False and None -> left out (the server's default);
    lists -> the flag and each item; everything else -> its string. Pure."""
    import json

    out: list[str] = []
    for k, v in kwargs.items():
        flag = "--" + k.replace("_", "-")
        if v is None or v is False:
            continue
        if v is True:
            out.append(flag)
        elif isinstance(v, (list, tuple)):
            out += [flag, *map(str, v)]
        elif isinstance(v, dict):
            out += [flag, json.dumps(v, sort_keys=True)]
        else:
            out += [flag, str(v)]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SGLangServerEngine(HTTPEngine):
    """``python -m sglang.launch_server`` for the group on 127.0.0.1 and a free port."""

    backend = "sglang-server"
    launcher: tuple[str, ...] = ("-m", "sglang.launch_server")  # python LAUNCHER FLAGS...

    def __init__(self, group: EngineGroup, log_dir: str | os.PathLike[str] | None = None):
        self.group = group
        self.log_path = Path(log_dir or os.environ.get("SPECBENCH_LOG_DIR", ".")) / f"engine-{group.id}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        kw = engine_kwargs(group)
        kw.setdefault("enable_metrics", True)  # /metrics: the server's own counters, a cross-check
        self.kwargs = kw
        self.port = free_port()
        self.argv = [
            sys.executable,
            *self.launcher,
            *cli_args(kw),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if "json_model_override_args" in kw:
            os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
        t0 = time.perf_counter()
        with self.log_path.open("ab") as log:
            log.write(f"[specbench] {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        atexit.register(self._kill_group)
        try:
            self._wait_healthy(f"http://127.0.0.1:{self.port}")
            start_s = time.perf_counter() - t0
            super().__init__(group, f"http://127.0.0.1:{self.port}")
        except BaseException:
            self._kill_group()
            raise
        self.info.update(
            {
                "kwargs": dict(kw),
                "argv": self.argv,
                "pid": self.proc.pid,
                "engine_start_s": start_s,
                "log": str(self.log_path),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        )

    def _wait_healthy(self, url: str) -> None:
        """Until /health answers 200 (the start limit, --specbench-start-timeout, interrupts this
        wait from outside); a server that exits meanwhile fails the start with its status."""
        while True:
            why = self._dead()
            if why:
                raise EngineStartError(self._report(f"{self.group.id}: sglang.launch_server {why}"))
            status, _ = http_call(url + "/health", timeout=2.0)
            if status == 200:
                return
            time.sleep(0.5)

    def _dead(self) -> str | None:
        rc = self.proc.poll()
        if rc is None:
            return None
        if rc < 0:
            try:
                return f"server process {self.proc.pid} was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"server process {self.proc.pid} was killed by signal {-rc}"
        return f"server process {self.proc.pid} exited with code {rc}"

    async def _gone(self) -> str | None:
        # a dead server's sockets close before its exit is seen: give the exit a moment
        for _ in range(20):
            why = self._dead()
            if why:
                return why
            await asyncio.sleep(0.05)
        return None

    def _mark_crashed(self, why: str) -> None:
        super()._mark_crashed(why)
        self._kill_group()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_group(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace period; then any
        process of its session still alive (a child that left the group) is killed too."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGCONT)  # a stopped (hung on purpose) server must see SIGTERM
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(30)
        self._signal_group(signal.SIGKILL)  # children of an exited leader
        for pid in session_pids(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_for_test(self) -> None:
        """SIGKILL the server's process group (``--specbench-kill-engine``): a crash on purpose."""
        self._signal_group(signal.SIGKILL)

    def hang_for_test(self) -> None:
        """SIGSTOP the server's process group (``--specbench-hang-engine``): alive, no progress."""
        self._signal_group(signal.SIGSTOP)

    def abandon(self, why: str) -> None:
        self._mark_crashed(why)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._kill_group()
            atexit.unregister(self._kill_group)
            self.info["left_after_stop"] = len(session_pids(self.proc.pid))


def session_pids(sid: int) -> list[int]:
    """Live processes of the session ``sid`` (the server and everything it spawned)."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(p.pid) == sid:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


__all__ = ["DEFAULTS", "HTTPEngine", "SGLangServerEngine", "cli_args", "session_pids"]
