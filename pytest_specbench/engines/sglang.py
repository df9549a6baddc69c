"""Backend ``sglang``: one in-process ``sglang.Engine`` per (method, TP) group.

sglang is imported only when an engine starts (``import sglang`` initialises CUDA in the
importing process, so the plugin pins CUDA_VISIBLE_DEVICES first). Lifecycle rules learned
on an H200 (docs/sglang.md):
- a module-level ``custom_sigquit_handler`` keeps a failing start from killing pytest; the
  running-phase SIGQUIT handler is replaced by one that kills only the engine's children
  and marks the engine crashed; a watchdog also notices a dead scheduler by itself;
- a crashed engine fails the cell that saw it and every later cell of its group at once,
  with the tail of the group's engine log; the next group starts clean;
- one untimed warm-up request after each start; shutdown kills every child of this
  process, so nothing else spawned by pytest may rely on surviving it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from ..inputs import tinymodel
from ..matrix.algorithms import algorithm
from ..matrix.cells import EngineGroup, thaw
from ..planning import plan
from .base import (
    CellTimeout,
    EngineStartError,
    Request,
    RequestRecord,
    cached_tokens,
    output_of,
    run_watched,
    timed_stream,
)

T = TypeVar("T")
# What worked offline on the H200 with the slim wheelhouse (docs/sglang.md); a method's
# engine_args override any of these.
DEFAULTS: dict[str, Any] = {
    "attention_backend": "triton",
    "sampling_backend": "pytorch",
    "grammar_backend": "none",
    "random_seed": 0,
    "log_level": "warning",
}
LOG_TAIL_LINES = 40
WARMUP_TIMEOUT_S = 600.0  # the first request after a start (about 10 s seen on the H200)


class EngineCrashed(RuntimeError):
    """The engine died mid-group; the message carries the engine log tail."""


def sigquit_handler(signum: int, frame: Any) -> None:
    # Module-level so it pickles into the spawned engine processes. SGLang's default
    # handler kills the whole process tree, pytest included, when a child fails at start.
    print("[specbench] SIGQUIT from an engine child process (it failed)", file=sys.stderr, flush=True)


def engine_kwargs(group: EngineGroup) -> dict[str, Any]:
    """The ``sglang.Engine(**kwargs)`` of a group, from its method's YAML. Pure; testable on CPU."""
    m = group.method
    kw: dict[str, Any] = dict(DEFAULTS)
    kw["model_path"] = tinymodel.resolve(m.model.path)
    if m.model.tokenizer:
        kw["tokenizer_path"] = m.model.tokenizer
    if m.model.load_format != "auto":
        kw["load_format"] = m.model.load_format
    ctx = plan.engine_context(group)
    if ctx.length:
        kw["context_length"] = ctx.length
    kw["tp_size"] = group.tp
    s = m.speculative
    if s is not None:
        # SGLang's name for it (its declaration, matrix/algorithms.py); an algorithm without one
        # (SGLang's own, a plugin's) goes to the engine as given, in upper case
        decl = algorithm(s.algorithm)
        kw["speculative_algorithm"] = decl.sglang if decl is not None and decl.sglang else s.algorithm.upper()
        if m.draft_model is not None:
            kw["speculative_draft_model_path"] = tinymodel.resolve(m.draft_model.path)
        for src, dst in (
            ("num_steps", "speculative_num_steps"),
            ("topk", "speculative_eagle_topk"),
            ("num_draft_tokens", "speculative_num_draft_tokens"),
            ("block_size", "speculative_dflash_block_size"),
        ):
            v = getattr(s, src)
            if v is not None:
                kw[dst] = v
        if decl is not None and decl.chain and s.num_steps and (s.topk or 1) == 1:
            # a chain: sglang pins num_draft_tokens to num_steps + 1; say so in the recorded args
            kw.setdefault("speculative_num_draft_tokens", s.num_steps + 1)
    kw.update(thaw(m.engine_args) if m.engine_args else {})
    if ctx.override:  # beyond the config's max_position_embeddings (see SGLANG_ALLOW_OVERWRITE_...)
        over = kw.get("json_model_override_args") or {}
        over = json.loads(over) if isinstance(over, str) else dict(over)
        over.setdefault("max_position_embeddings", ctx.length)
        kw["json_model_override_args"] = over
    for k in ("json_model_override_args",):  # YAML mappings -> the JSON string sglang expects
        if isinstance(kw.get(k), dict):
            kw[k] = json.dumps(kw[k], sort_keys=True)
    return kw


def args_hash(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_log(path: Path, offset: int = 0) -> str | None:
    """The log from byte ``offset`` on (where this engine's start began: the file is appended to
    across runs and groups of the same id), or None without a log."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return None


def log_tail(path: Path, n: int = LOG_TAIL_LINES, offset: int = 0) -> str:
    text = _read_log(path, offset)
    if text is None:
        return "(no engine log)"
    # progress bars (CUDA graph capture) redraw with \r: they would push the reason out
    lines = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip() and "%|" not in ln]
    return "\n".join(lines[-n:]) or "(the engine log holds only progress bars)"


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$")


def log_reason(path: Path, offset: int = 0) -> str | None:
    """The last exception line of the engine log ("AttributeError: 'NoneType' object has no
    attribute 'dim'"): the reason, which a tail of a long traceback can cut off."""
    text = _read_log(path, offset)
    for ln in reversed((text or "").replace("\r", "\n").splitlines()):
        if _EXC_LINE.match(ln.strip()):
            return ln.strip()[:500]
    return None


def failure_report(what: str, path: Path, offset: int = 0) -> str:
    """``what`` failed, the engine log's own reason on the next line, then the log's tail."""
    why = log_reason(path, offset)
    head = f"{what}\nengine log says: {why}" if why else what
    return f"{head}\n--- engine log tail ({path}) ---\n{log_tail(path, offset=offset)}"


class _StderrToFile:
    """Point fds 1/2 at the group's log while the engine spawns its processes (they inherit
    the fds and keep logging there); the pytest process gets its own fds back afterwards."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)

    def __exit__(self, *exc: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in (*self.saved, self.fd):
            os.close(fd)


class SGLangEngine:
    backend = "sglang"
    deadline: float | None = None  # set per cell by the plugin (base.guard)

    def __init__(self, group: EngineGroup, log_dir: str | os.PathLike[str] | None = None):
        self.group = group
        self.crashed: str | None = None
        self.log_path = Path(log_dir or os.environ.get("SPECBENCH_LOG_DIR", ".")) / f"engine-{group.id}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.kwargs = engine_kwargs(group)  # the method's env: is set by the plugin around the engine
        if "json_model_override_args" in self.kwargs and plan.engine_context(group).override:
            # SGLang refuses a context_length above the config's without this
            os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
        t0 = time.perf_counter()
        # this engine's part of the log: reasons and tails never come from an earlier run
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with _StderrToFile(self.log_path):
            import sglang
            from sglang.srt.entrypoints.engine import Engine

            import_s = time.perf_counter() - t0
            self._install_running_sigquit_handler()
            t1 = time.perf_counter()
            try:
                self.engine = Engine(**self.kwargs, custom_sigquit_handler=sigquit_handler)
            except BaseException as e:
                self._kill_children()
                raise EngineStartError(
                    failure_report(
                        f"{group.id}: sglang.Engine failed to start: {type(e).__name__}: {e}",
                        self.log_path,
                        self.log_offset,
                    )
                ) from None
            start_s = time.perf_counter() - t1
        self._children = self._scheduler_pids()
        self._tok: Any = None
        t2 = time.perf_counter()
        self._warm_up()
        resolved = self._resolved_args()
        self.info: dict[str, Any] = {
            "backend": "sglang",
            "sglang": sglang.__version__,
            "kwargs": {k: v for k, v in self.kwargs.items()},
            "server_args": resolved,
            "server_args_hash": args_hash(resolved),
            "import_s": import_s,
            "engine_start_s": start_s,
            "warmup_s": time.perf_counter() - t2,
            "log": str(self.log_path),
            # what the scheduler sized at start (compare with the planner's numbers)
            "scheduler_info": _scheduler_info(self.engine),
        }

    # ------------------------------------------------------------------ lifecycle
    def _install_running_sigquit_handler(self) -> None:
        from sglang.srt.managers import tokenizer_manager as tm

        engine = self

        def running_phase_sigquit_handler(handler_self: Any, signum: Any = None, frame: Any = None) -> None:
            wd = getattr(handler_self.tokenizer_manager, "_subprocess_watchdog", None)
            if wd is not None:
                wd.stop()
            dead = engine._dead() or "an engine process died"
            engine._mark_crashed(f"{dead}; SIGQUIT from sglang's watchdog")

        tm.SignalHandler.running_phase_sigquit_handler = running_phase_sigquit_handler

    def _scheduler_pids(self) -> dict[int, str]:
        """The engine's own processes (pid -> title): sglang names them ``sglang::scheduler...``
        and ``sglang::detokenizer`` (setproctitle). Other children of pytest (multiprocessing's
        resource tracker, helpers that exit after the start) are not watched: their exit is not
        an engine crash. Without any titled process, every child is watched."""
        import psutil

        procs = {}
        for p in psutil.Process().children(recursive=False):
            try:
                procs[p.pid] = " ".join(p.cmdline()) or p.name()
            except psutil.Error:
                continue
        titled = {pid: t for pid, t in procs.items() if is_engine_process(t)}
        return titled or procs

    def _kill_children(self) -> None:
        from sglang.srt.utils import kill_process_tree

        kill_process_tree(os.getpid(), include_parent=False, wait_timeout=60)

    def _mark_crashed(self, why: str) -> None:
        if self.crashed:
            return
        self.crashed = why
        self._kill_children()
        loop = self.engine.loop
        for task in asyncio.all_tasks(loop):
            task.cancel()

    def _dead(self) -> str | None:
        import psutil

        for pid, title in self._children.items():
            name = f"engine process {pid} ({' '.join(title.split())[:60]})"  # titles are space-padded
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    return f"{name} {exit_status(pid)}"
            except psutil.NoSuchProcess:
                return f"{name} is gone"
        return None

    def _crash_error(self) -> EngineCrashed:
        return EngineCrashed(
            failure_report(
                f"{self.group.id}: engine crashed ({self.crashed}); the group's remaining cells fail",
                self.log_path,
                self.log_offset,
            )
        )

    def _scheduler(self) -> int:
        import psutil

        procs = [psutil.Process(p) for p in self._children if psutil.pid_exists(p)]
        sched = [p for p in procs if "scheduler" in " ".join(p.cmdline() + [p.name()])] or procs
        return sched[0].pid

    def kill_for_test(self) -> None:
        """SIGKILL the scheduler process (``--specbench-kill-engine``): a crash on purpose."""
        import signal

        os.kill(self._scheduler(), signal.SIGKILL)

    def hang_for_test(self) -> None:
        """SIGSTOP the scheduler (``--specbench-hang-engine``): alive, but no progress."""
        import signal

        os.kill(self._scheduler(), signal.SIGSTOP)

    def abandon(self, why: str) -> None:
        """Tear down a hung engine now (its processes killed, pending requests cancelled)."""
        self._mark_crashed(why)

    # ------------------------------------------------------------------ Engine protocol
    def tokenizer(self) -> Any:
        if self._tok is None:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(
                self.kwargs.get("tokenizer_path") or self.kwargs["model_path"]
            )
        return self._tok

    def run(self, coro: Awaitable[T]) -> T:
        return run_watched(self, self.engine.loop, coro)

    async def agenerate(self, request: Request) -> RequestRecord:
        sp = _sampling(request)

        ids = list(request.input_ids)
        if not request.stream:
            t0 = time.perf_counter()
            out = await self.engine.async_generate(input_ids=ids, sampling_params=sp)
            return _final_record(request, out, time.perf_counter() - t0)

        async def submit() -> Any:
            return await self.engine.async_generate(input_ids=ids, sampling_params=sp, stream=True)

        return await timed_stream(submit, len(ids), request.tag, _parse_chunk)

    async def agenerate_batch(self, requests: list[Request]) -> list[RequestRecord]:
        """Non-streamed requests as ONE batched call (what a bare ``engine.generate([...])``
        does). Every request's latency is the batch's: with a fixed output length they all
        finish in the same decode step."""
        sps = [_sampling(r) for r in requests]
        t0 = time.perf_counter()
        outs = await self.engine.async_generate(
            input_ids=[list(r.input_ids) for r in requests], sampling_params=sps
        )
        latency = time.perf_counter() - t0
        return [_final_record(r, o, latency) for r, o in zip(requests, outs, strict=True)]

    def flush_cache(self) -> None:
        # through run(): a dead scheduler must surface as EngineCrashed here too, not a hang
        self.run(self.engine.tokenizer_manager.flush_cache())

    def close(self) -> None:
        try:
            self.engine.shutdown()
        finally:
            _reap()

    def _warm_up(self) -> None:
        """The untimed first request after a start. It runs in sglang's uvloop, where the start
        limit's SIGALRM does not fire, so it has its own in-loop limit: an engine that never
        answers fails its group's start (processes killed) instead of hanging the run."""
        self.deadline = time.monotonic() + WARMUP_TIMEOUT_S
        try:
            self.run(self._warmup())
        except CellTimeout:
            self._mark_crashed("the warm-up request got no answer")
            raise EngineStartError(
                failure_report(
                    f"{self.group.id}: the warm-up request after the start got no answer within "
                    f"{WARMUP_TIMEOUT_S:g} s",
                    self.log_path,
                    self.log_offset,
                )
            ) from None
        finally:
            self.deadline = None

    async def _warmup(self) -> None:
        sp = {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
        await self.engine.async_generate(input_ids=list(range(16, 48)), sampling_params=sp)

    def _resolved_args(self) -> dict[str, Any]:
        import dataclasses

        sa = self.engine.server_args
        out = {}
        for f in dataclasses.fields(sa):
            v = getattr(sa, f.name)
            out[f.name] = v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
        return out


def exit_status(pid: int) -> str:
    """How a dead child ended ("killed by SIGKILL", "exited with code 1"), read without reaping
    it (WNOWAIT): multiprocessing and sglang's own watchdog still wait for it."""
    import signal

    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except OSError:
        return "exited"
    if info is None:
        return "is still running"
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        try:
            return f"was killed by {signal.Signals(info.si_status).name}"
        except ValueError:
            return f"was killed by signal {info.si_status}"
    return f"exited with code {info.si_status}"


def is_engine_process(title: str) -> bool:
    """sglang's process titles (setproctitle): ``sglang::scheduler_TP0``, ``sglang::detokenizer``."""
    return "sglang::" in title


def _scheduler_info(engine: Any) -> dict[str, Any]:
    """What the scheduler sized at start (max_total_num_tokens, ...): sglang 0.5.17 keeps it in
    Engine._scheduler_init_result.scheduler_infos[0] (what get_server_info() reads)."""
    res = getattr(engine, "_scheduler_init_result", None)
    infos = getattr(res, "scheduler_infos", None) or [getattr(engine, "scheduler_info", None) or {}]
    info = infos[0] if infos and isinstance(infos[0], dict) else {}
    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool))}


def _sampling(request: Request) -> dict[str, Any]:
    """SGLang sampling params of a request: its temperature (0 = greedy), exactly
    max_new_tokens (EOS ignored). No seed: SGLang 0.5.17 samples with its own generator."""
    return {"temperature": request.temperature, "max_new_tokens": request.max_new_tokens, "ignore_eos": True}


def _final_record(request: Request, out: dict[str, Any], latency: float) -> RequestRecord:
    meta = out.get("meta_info") or {}
    n = int(meta.get("completion_tokens", 0))
    ids, text = output_of(out, n)
    return RequestRecord(
        prompt_tokens=len(request.input_ids),
        output_tokens=n,
        output_ids=ids,
        output_text=text,
        latency_s=latency,
        verify_steps=meta.get("spec_verify_ct"),
        accept_histogram=tuple(meta.get("spec_accept_histogram") or ()),
        cached_tokens=cached_tokens(meta),
        tag=request.tag,
        engine_prompt_tokens=int(meta["prompt_tokens"]) if meta.get("prompt_tokens") is not None else None,
    )


def _parse_chunk(chunk: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    meta = chunk.get("meta_info") or {}
    return int(meta.get("completion_tokens", 0)), meta


def _reap() -> None:
    """Shutdown leaves the engine's children as zombies until the parent reaps them."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
