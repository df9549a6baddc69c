"""A fake engine for the plugin's own tests: instant, deterministic, counts its starts."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pytest_specbench.engines.base import Request, RequestRecord, guard

STARTS_FILE_ENV = "FAKE_ENGINE_STARTS"

# a pytester project's conftest.py that registers FakeEngine as the backend "fake"
CONFTEST = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from fake_engine import FakeEngine
from pytest_specbench.engines import register_backend
register_backend("fake", FakeEngine, max_tp=4)
"""


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace")


class FakeEngine:
    """Behaviour by method name prefix: ``broken`` refuses to start; ``flaky`` fails the request
    tagged round1/req1; ``tmo`` raises TimeoutError for 13-token requests; ``short`` reports one
    prompt token fewer than it got; ``child`` starts a child process (its pid appended to
    $FAKE_CHILD_PIDS) that close() ends; a name containing ``slow`` takes $FAKE_SLOW_S seconds per
    request."""

    backend = "fake"
    deadline: float | None = None
    hung = False

    def __init__(self, group: Any):
        self.group = group
        name = group.method.name
        if name.startswith("broken"):
            raise RuntimeError(f"fake engine {group.id} refuses to start")
        self.info = {"backend": "fake", "group": group.id}
        if os.environ.get("FAKE_UVLOOP"):  # SGLang's event loop: Python signal handlers wait there
            import uvloop

            self._loop = uvloop.new_event_loop()
        else:
            self._loop = asyncio.new_event_loop()
        self.child = None
        if name.startswith("child"):
            import subprocess
            import sys

            self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(os.environ["FAKE_CHILD_PIDS"], "a") as f:
                f.write(f"{self.child.pid}\n")
        path = os.environ.get(STARTS_FILE_ENV)
        if path:  # one line per start, also from xdist workers
            with open(path, "a") as f:
                f.write(
                    f"{group.id} {os.environ.get('PYTEST_XDIST_WORKER', 'main')} "
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', '-')} "
                    f"probe={os.environ.get('FAKE_ENV_PROBE', '-')}\n"
                )

    def tokenizer(self) -> FakeTokenizer:
        return FakeTokenizer()

    def _event(self, what: str) -> None:
        path = os.environ.get(STARTS_FILE_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{what} {self.group.id}\n")

    def hang_for_test(self) -> None:
        self.hung = True

    def abandon(self, why: str) -> None:
        self._event("abandon")

    async def agenerate(self, request: Request) -> RequestRecord:
        if self.hung:  # an engine that stopped making progress
            await asyncio.Event().wait()
        name = self.group.method.name
        if name.startswith("flaky") and request.tag == "round1/req1":
            raise RuntimeError("flaky request")
        if name.startswith("tmo") and request.max_new_tokens == 13:
            raise TimeoutError("read timed out")
        if "slow" in name:
            await asyncio.sleep(float(os.environ.get("FAKE_SLOW_S", "1")))
        spec = self.group.method.speculative
        k = (spec.num_draft_tokens or 1) if spec else 0
        n = request.max_new_tokens
        # speculative: first token from prefill, then chunks of k+1 tokens
        sizes = [1] + [k + 1] * ((n - 1) // (k + 1)) if spec else [1] * n
        if sum(sizes) < n:
            sizes.append(n - sum(sizes))
        chunks, total = [], 0
        for i, s in enumerate(sizes):
            total += s
            chunks.append((0.001 * (i + 1), total))
        await asyncio.sleep(0)
        return RequestRecord(
            prompt_tokens=len(request.input_ids),
            output_tokens=n,
            latency_s=chunks[-1][0],
            ttft_s=chunks[0][0],
            verify_steps=len(sizes) - 1 if spec else None,
            chunks=tuple(chunks),
            tag=request.tag,
            engine_prompt_tokens=len(request.input_ids) - (1 if name.startswith("short") else 0),
        )

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(guard(coro, self.deadline))

    def flush_cache(self) -> None:
        pass

    def close(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child.wait()
        self._loop.close()


class FakeTimedEngine(FakeEngine):
    """Streams one token every ``FAKE_TOKEN_S`` seconds (default 2 ms), whatever the method:
    two methods on it are the same engine, so every comparison between them must read 1.00.
    With FAKE_REQUEST_LOG set, each request's "group tag temperature sha256(input ids)" is
    appended there when the engine closes (no file I/O while requests are timed)."""

    backend = "fake-timed"

    def __init__(self, group: Any):
        super().__init__(group)
        self.seen: list[str] = []

    def close(self) -> None:
        log = os.environ.get("FAKE_REQUEST_LOG")
        if log:
            with open(log, "a") as f:
                f.writelines(f"{self.group.id} {line}\n" for line in self.seen)
        super().close()

    def token_s(self) -> float:
        return float(os.environ.get("FAKE_TOKEN_S", "0.002"))

    async def agenerate(self, request: Request) -> RequestRecord:
        import hashlib

        digest = hashlib.sha256(repr(request.input_ids).encode()).hexdigest()[:16]
        self.seen.append(f"{request.tag} {request.temperature:g} {digest}")
        step = self.token_s()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        chunks = []
        for i in range(request.max_new_tokens):
            due = t0 + step * (i + 1)
            # the event loop's timers fire up to a millisecond late (epoll's resolution): sleep
            # to just before the token is due, then yield until it is, so every token comes on time
            await asyncio.sleep(max(0.0, due - loop.time() - 0.0015))
            while loop.time() < due:
                await asyncio.sleep(0)
            chunks.append((loop.time() - t0, i + 1))
        out = tuple((sum(request.input_ids[-4:]) + 7 * i) % 200 + 32 for i in range(request.max_new_tokens))
        return RequestRecord(
            prompt_tokens=len(request.input_ids),
            output_tokens=request.max_new_tokens,
            latency_s=loop.time() - t0,
            ttft_s=chunks[0][0] if chunks else None,
            chunks=tuple(chunks),
            output_ids=out,
            tag=request.tag,
            engine_prompt_tokens=len(request.input_ids),
        )


class FakeDriftingEngine(FakeTimedEngine):
    """FakeTimedEngine on a machine that slows down as the run goes on: each token takes
    FAKE_TOKEN_S x (1 + (now - FAKE_DRIFT_T0) x FAKE_DRIFT_PER_S), the same for every engine in
    the process (the machine's drift, not the engine's). Two methods on it are the same engine:
    measured minutes (here: seconds) apart, the later one reads slower."""

    backend = "fake-drifting"

    def token_s(self) -> float:
        import time

        t0 = float(os.environ.get("FAKE_DRIFT_T0", "0")) or time.monotonic()
        drift = float(os.environ.get("FAKE_DRIFT_PER_S", "0.5"))
        return super().token_s() * (1.0 + (time.monotonic() - t0) * drift)


class FakeArgsEngine(FakeEngine):
    """FakeEngine that reports what it was started with, as SGLang's engine does: its method's
    algorithm and engine arguments as resolved server arguments (info["server_args"]), and it
    appends "group algorithm engine_args SGLANG_* env" to $FAKE_ARGS_LOG at start."""

    backend = "fake-args"

    def __init__(self, group: Any):
        super().__init__(group)
        import json

        m = group.method
        args = {k: v for k, v in m.engine_args}
        spec = m.speculative
        self.info["server_args"] = {
            "speculative_algorithm": spec.algorithm.upper() if spec else None,
            **args,
        }
        log = os.environ.get("FAKE_ARGS_LOG")
        if log:
            env = {k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}
            with open(log, "a") as f:
                f.write(json.dumps([group.id, spec.algorithm if spec else None, args, env]) + "\n")


_STEP_STARTS: dict[str, int] = {}  # FAKE_STEP_RUN -> engines started so far in this process


class FakeStepDriftEngine(FakeTimedEngine):
    """FakeTimedEngine on a machine that gets slower with every engine start of the run: the
    n-th start (from 0, counted per $FAKE_STEP_RUN) takes FAKE_TOKEN_S x (1 + n x
    FAKE_DRIFT_PER_START) per token; a method whose name starts with ``fast`` takes a quarter of that.
    A baseline, a method and the baseline again measure the drift between groups."""

    backend = "fake-step"

    def __init__(self, group: Any):
        super().__init__(group)
        run = os.environ.get("FAKE_STEP_RUN", "")
        self.nth = _STEP_STARTS.get(run, 0)
        _STEP_STARTS[run] = self.nth + 1

    def token_s(self) -> float:
        per = float(os.environ.get("FAKE_DRIFT_PER_START", "0.1"))
        fast = 0.25 if self.group.method.name.startswith("fast") else 1.0
        return super().token_s() * (1.0 + self.nth * per) * fast


class FakeRacingEngine(FakeEngine):
    """Instant, but each request reports a latency of 2 ms per token divided by the method's speed:
    FAKE_RACE_SPEED holds "name=factor,..." (factor 2: twice as fast; methods not named: 1). With
    a round's rate read from those latencies (the tests patch rounds._round_rate), every round of
    a method has the same speed, however loaded the machine is."""

    backend = "fake-racing"

    async def agenerate(self, request: Request) -> RequestRecord:
        import dataclasses

        speeds = dict(kv.split("=") for kv in os.environ.get("FAKE_RACE_SPEED", "").split(",") if "=" in kv)
        rec = await super().agenerate(request)
        virtual = 0.002 * rec.output_tokens / float(speeds.get(self.group.method.name, 1))
        spec = self.group.method.speculative
        if spec is not None and spec.simulate_accept_length is not None:  # a forced length honoured
            steps = -(-(rec.output_tokens - 1) // int(spec.simulate_accept_length))
            return dataclasses.replace(rec, latency_s=virtual, verify_steps=steps, accept_histogram=())
        return dataclasses.replace(rec, latency_s=virtual)


class FakeSlowingEngine(FakeRacingEngine):
    """FakeRacingEngine on a machine that slows down: every engine started before this one (lines
    in $FAKE_ENGINE_STARTS) takes $FAKE_DRIFT_PER_START of its speed (0.02: 2 % a start), and the
    first start after $FAKE_DRIFT_STEP_AT starts takes $FAKE_DRIFT_STEP more, once; each request's
    latency carries log-normal noise of $FAKE_NOISE_CV, seeded by its tag."""

    backend = "fake-slowing"

    def __init__(self, group: Any):
        path = os.environ.get(STARTS_FILE_ENV)
        before = (  # engine starts so far (lines "GROUP WORKER GPUS probe=..."), not other events
            sum(1 for ln in open(path) if " probe=" in ln) if path and os.path.exists(path) else 0
        )
        super().__init__(group)
        step_at = int(os.environ.get("FAKE_DRIFT_STEP_AT", "0") or 0)
        self.level = (1 - float(os.environ.get("FAKE_DRIFT_PER_START", "0"))) ** before * (
            1 - float(os.environ.get("FAKE_DRIFT_STEP", "0")) if step_at and before >= step_at else 1.0
        )

    async def agenerate(self, request: Request) -> RequestRecord:
        import dataclasses
        import math
        import random

        rec = await super().agenerate(request)
        noise = math.exp(
            random.Random(f"{self.group.id}/{request.tag}").gauss(
                0, float(os.environ.get("FAKE_NOISE_CV", "0"))
            )
        )
        return dataclasses.replace(rec, latency_s=rec.latency_s / self.level * noise)
