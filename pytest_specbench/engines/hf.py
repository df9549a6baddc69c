"""Backend ``hf``: transformers on the CPU, with real speculative decoding counted exactly.

Methods: plain autoregressive, ``ngram`` (prompt lookup: the longest suffix n-gram that
occurred before proposes the tokens that followed it) and ``draft`` (a draft model
proposes K tokens greedily). Every proposal is verified by ONE target forward pass over
``[last token] + drafts`` with a KV cache, greedy acceptance of the longest matching
prefix plus the target's bonus token, and the cache cropped back to what was accepted:
lossless by construction (outputs equal plain greedy decoding).

Acceptance bookkeeping is SGLang's: ``verify_steps`` counts target forward passes after
prefill (spec_verify_ct); accept length = output tokens / verify_steps; the histogram
counts verify steps by number of accepted drafts. Concurrency is served by one thread
per in-flight request (no continuous batching): this backend exercises the plugin on a
CPU; it does not model a serving engine's batching.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .. import plan, tinymodel
from ..matrix import EngineGroup
from .base import Request, RequestRecord, guard

T = TypeVar("T")


def ngram_propose(seq: list[int], k: int, max_ngram: int, min_ngram: int = 1) -> list[int]:
    """Prompt lookup: the longest suffix n-gram's latest earlier occurrence proposes its continuation."""
    n_seq = len(seq)
    for n in range(min(max_ngram, n_seq - 1), min_ngram - 1, -1):
        pattern = seq[n_seq - n :]
        # scan right-to-left for the latest earlier occurrence that has a continuation
        for i in range(n_seq - n - 1, -1, -1):
            if seq[i : i + n] == pattern:
                return seq[i + n : i + n + k]
    return []


def _call(model: Any, ids: list[int], cache: Any, **kw: Any) -> Any:
    """``ids`` appended to ``cache`` through the model (transformers >= 5.2x renamed the kwarg)."""
    import torch

    cache_kw = "cache" if getattr(model, "_specbench_cache_kw", False) else "past_key_values"
    return model(input_ids=torch.tensor([ids]), use_cache=True, **{cache_kw: cache}, **kw)


def _forward(model: Any, ids: list[int], cache: Any) -> Any:
    """Logits of every position of ``ids`` appended to ``cache``."""
    return _call(model, ids, cache).logits[0]


PREFILL_CHUNK = 4096


def _prefill(model: Any, ids: list[int], cache: Any) -> Any:
    """Last-position logits of a prompt, prefilled in chunks (bounded attention-mask memory)."""
    logits = None
    for s in range(0, len(ids), PREFILL_CHUNK):
        logits = _call(model, ids[s : s + PREFILL_CHUNK], cache, logits_to_keep=1).logits[0, -1]
    return logits


def _crop(cache: Any, keep: int) -> None:
    """Keep the first ``keep`` positions; negative crop means "remove N" in every version."""
    remove = cache.get_seq_length() - keep
    if remove > 0:
        cache.crop(-remove)


class HFEngine:
    backend = "hf"
    deadline: float | None = None

    def __init__(self, group: EngineGroup):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if group.tp != 1:
            raise ValueError(f"{group.id}: the hf backend runs one CPU process; TP={group.tp} needs sglang")
        m = group.method
        self.group = group
        self.spec = m.speculative
        path = tinymodel.resolve(m.model.path)
        self._tok = AutoTokenizer.from_pretrained(m.model.tokenizer or path)
        # the context the cells need; beyond the config's max_position_embeddings it is
        # overridden (RoPE extrapolates; what it means for quality is the user's call)
        self.context = plan.engine_context(group)
        self._ctx_kw = {"max_position_embeddings": self.context.length} if self.context.override else {}
        self.target = self._load(AutoModelForCausalLM, path, torch, self._ctx_kw)
        self.draft = None
        draft_path = None
        if self.spec and self.spec.algorithm == "draft":
            assert m.draft_model is not None
            draft_path = tinymodel.resolve(m.draft_model.path)
            self.draft = (
                self.target
                if draft_path == path
                else self._load(AutoModelForCausalLM, draft_path, torch, self._ctx_kw)
            )
        elif self.spec and self.spec.algorithm != "ngram":
            raise ValueError(
                f"method {m.name!r}: the hf backend implements speculative algorithms "
                f"ngram and draft; {self.spec.algorithm!r} needs the sglang backend"
            )
        self.k = (self.spec.num_draft_tokens or 4) if self.spec else 0
        self.max_ngram = (self.spec.max_ngram or 3) if self.spec else 0
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="hf-engine")
        self._loop = asyncio.new_event_loop()
        self.info: dict[str, Any] = {
            "backend": "hf",
            "model_path": path,
            "draft_model_path": draft_path,
            "algorithm": self.spec.algorithm if self.spec else None,
            "num_draft_tokens": self.k or None,
            "max_ngram": self.max_ngram or None,
            "dtype": "float32",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
            "context_length": self.context.length,
            "native_context_length": self.context.native,
            "context_override": self.context.override,
        }

    @staticmethod
    def _load(cls: Any, path: str, torch: Any, config_kw: dict[str, Any]) -> Any:
        import inspect

        model = cls.from_pretrained(path, dtype=torch.float32, **config_kw)
        model.eval()
        model._specbench_cache_kw = "cache" in inspect.signature(model.forward).parameters
        return model

    # ------------------------------------------------------------------ Engine protocol
    def tokenizer(self) -> Any:
        return self._tok

    def run(self, coro: Awaitable[T]) -> T:
        return self._loop.run_until_complete(guard(coro, self.deadline))

    async def agenerate(self, request: Request) -> RequestRecord:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        return await loop.run_in_executor(self._pool, self.generate, request, t0)

    def flush_cache(self) -> None:
        """No cache survives a request here: every request prefills from scratch."""

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._loop.close()
        self.target = self.draft = None

    # ------------------------------------------------------------------ decoding
    def generate(self, request: Request, t0: float | None = None) -> RequestRecord:
        """Greedy decoding of exactly ``max_new_tokens`` tokens (EOS ignored), timed per chunk."""
        import torch
        from transformers import DynamicCache

        t0 = time.perf_counter() if t0 is None else t0
        max_new = request.max_new_tokens
        seq = list(request.input_ids)
        n_prompt = len(seq)
        chunks: list[tuple[float, int]] = []
        hist = [0] * (self.k + 1)
        verify = 0
        with torch.inference_mode():
            cache = DynamicCache()
            seq.append(int(_prefill(self.target, seq, cache).argmax()))
            chunks.append((time.perf_counter() - t0, 1))
            drafter = _Drafter(self.draft, n_prompt) if self.draft is not None else None
            while len(seq) - n_prompt < max_new:
                remaining = max_new - (len(seq) - n_prompt)
                k = min(self.k, remaining - 1)
                if k <= 0 or self.spec is None:
                    drafts: list[int] = []
                elif drafter is not None:
                    drafts = drafter.propose(seq, k)
                else:
                    drafts = ngram_propose(seq, k, self.max_ngram)
                # one target forward verifies [last committed token] + drafts
                past = cache.get_seq_length()
                preds_l = [int(x) for x in _forward(self.target, [seq[-1], *drafts], cache).argmax(-1)]
                n_acc = 0
                while n_acc < len(drafts) and drafts[n_acc] == preds_l[n_acc]:
                    n_acc += 1
                new = drafts[:n_acc] + [preds_l[n_acc]]
                _crop(cache, past + 1 + n_acc)
                if drafter is not None:
                    drafter.accepted(len(seq) + n_acc)
                seq.extend(new[:remaining])
                verify += 1
                if self.spec is not None and n_acc < len(hist):
                    hist[n_acc] += 1
                chunks.append((time.perf_counter() - t0, len(seq) - n_prompt))
        latency = time.perf_counter() - t0
        return RequestRecord(
            prompt_tokens=n_prompt,
            output_tokens=len(seq) - n_prompt,
            latency_s=latency,
            ttft_s=chunks[0][0],
            verify_steps=verify if self.spec is not None else None,
            accept_histogram=tuple(hist) if self.spec is not None else (),
            chunks=tuple(chunks),
            output_ids=tuple(seq[n_prompt:]),
            tag=request.tag,
            meta=(("thread", threading.current_thread().name),),
        )


class _Drafter:
    """Greedy proposals from a draft model with its own KV cache kept in step with ``seq``."""

    def __init__(self, model: Any, n_prompt: int):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache()
        self.valid = 0  # tokens of seq whose K/V are in the draft cache

    def propose(self, seq: list[int], k: int) -> list[int]:
        _crop(self.cache, self.valid)
        feed = seq[self.valid :]
        out: list[int] = []
        for _ in range(k):
            tok = int(_prefill(self.model, feed, self.cache).argmax())
            out.append(tok)
            feed = [tok]
        self._proposed_from = len(seq)
        self._k = k
        return out

    def accepted(self, committed_before_bonus: int) -> None:
        """``committed_before_bonus`` = len(seq) + accepted drafts, before the bonus token.

        The cache holds seq + the first k-1 drafts; what stays valid is seq plus the accepted
        drafts it actually fed (at most k-1 of them).
        """
        n_acc = committed_before_bonus - self._proposed_from
        self.valid = self._proposed_from + min(n_acc, self._k - 1)
