"""A fake engine for the plugin's own tests: instant, deterministic, counts its starts."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pytest_specbench.engines.base import Request, RequestRecord, guard

STARTS_FILE_ENV = "FAKE_ENGINE_STARTS"


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace")


class FakeEngine:
    backend = "fake"
    deadline: float | None = None
    hung = False

    def __init__(self, group: Any):
        self.group = group
        if group.method.name.startswith("broken"):
            raise RuntimeError(f"fake engine {group.id} refuses to start")
        self.info = {"backend": "fake", "group": group.id}
        self._loop = asyncio.new_event_loop()
        path = os.environ.get(STARTS_FILE_ENV)
        if path:  # one line per start, also from xdist workers
            with open(path, "a") as f:
                f.write(
                    f"{group.id} {os.environ.get('PYTEST_XDIST_WORKER', 'main')} "
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', '-')}\n"
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
        )

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(guard(coro, self.deadline))

    def flush_cache(self) -> None:
        pass

    def close(self) -> None:
        self._loop.close()
