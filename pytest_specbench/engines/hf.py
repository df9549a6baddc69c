"""Backend ``hf``: transformers on the CPU, with real speculative decoding counted exactly.

Methods: plain autoregressive, ``ngram`` (prompt lookup: the longest suffix n-gram that
occurred before proposes the tokens that followed it) and ``draft`` (a draft model
proposes K tokens). Every proposal is verified by ONE target forward pass over
``[last token] + drafts`` with a KV cache, and the cache is cropped back to what was
accepted. Greedy (temperature 0): the longest prefix matching the target's argmax plus the
target's bonus token, so outputs equal plain greedy decoding. Temperature > 0: speculative
sampling (a draft token x drawn from q is kept with probability min(1, p(x)/q(x)), else the
token is drawn from max(0, p - q) renormalised; an n-gram proposal is a one-hot q), so every
output token is distributed as the target's own sampling at that temperature.

Acceptance bookkeeping is SGLang's: ``verify_steps`` counts target forward passes after
prefill (spec_verify_ct); accept length = output tokens / verify_steps; the histogram
counts verify steps by number of accepted drafts. Concurrency is served by one thread
per in-flight request (no continuous batching): this backend exercises the plugin on a
CPU; it does not model a serving engine's batching. A prompt that starts with tokens an earlier
request's sequence had reuses that part of its KV cache (prefix_cache.py; ``cached_tokens``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..inputs import tinymodel
from ..matrix.algorithms import algorithm, hf_algorithms
from ..matrix.cells import EngineGroup
from ..planning import plan
from .base import EngineStartError, Request, RequestRecord, guard
from .prefix_cache import PrefixCache

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


def _probs(logits: Any, temperature: float) -> Any:
    import torch

    return torch.softmax(logits.float() / temperature, dim=-1)


def _pick(logits: Any, temperature: float, gen: Any) -> int:
    """The next token from one position's logits: argmax, or a sample at ``temperature``."""
    import torch

    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(_probs(logits, temperature), 1, generator=gen))


def speculative_sample(p: Any, drafts: list[int], q: list[Any] | None, gen: Any) -> tuple[int, int]:
    """Speculative sampling over one verify step: (drafts accepted, the token after them).

    ``p``: the target's probabilities at every verified position ([len(drafts) + 1, V]);
    ``q``: the draft's probability row for each draft token, or None for a deterministic
    proposal (n-gram: q is one-hot at the token). Draft i is kept with probability
    min(1, p(x)/q(x)); at the first rejection the token is drawn from max(0, p - q)
    renormalised; when every draft is kept, the bonus token is drawn from p. Each emitted
    token is then distributed exactly as a sample from p (Leviathan et al. 2023).
    """
    import torch

    for i, x in enumerate(drafts):
        qx = float(q[i][x]) if q is not None else 1.0
        if float(torch.rand((), generator=gen)) * qx < float(p[i, x]):
            continue
        if q is not None:
            residual = (p[i] - q[i]).clamp(min=0)
        else:
            residual = p[i].clone()
            residual[x] = 0.0
        if float(residual.sum()) <= 0:  # p == q up to rounding: nothing left to correct
            residual = p[i]
        return i, int(torch.multinomial(residual, 1, generator=gen))
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=gen))


def _crop(cache: Any, keep: int) -> None:
    """Keep the first ``keep`` positions; negative crop means "remove N" in every version."""
    remove = cache.get_seq_length() - keep
    if remove > 0:
        cache.crop(-remove)


def _share_cores(torch: Any) -> None:
    """Under ``pytest -n K`` each worker's engine gets cores // K threads (each would otherwise
    take every core, and K of them oversubscribe the machine), unless OMP_NUM_THREADS is set."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1 and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


class HFEngine:
    backend = "hf"
    deadline: float | None = None

    def __init__(self, group: EngineGroup):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if group.tp != 1:
            raise ValueError(f"{group.id}: the hf backend runs one CPU process; TP={group.tp} needs sglang")
        _share_cores(torch)
        m = group.method
        self.group = group
        self.spec = m.speculative
        path = tinymodel.resolve(m.model.path)
        try:
            self._tok = AutoTokenizer.from_pretrained(m.model.tokenizer or path)
        except (
            OSError
        ) as e:  # a hub id without network, a path without a tokenizer: one line, not a traceback
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise EngineStartError(
                f"{group.id}: cannot load model {m.model.tokenizer or path!r}: {first.strip()} "
                "(no network here? give a local path, or download it first)"
            ) from None
        # the context the cells need; beyond the config's max_position_embeddings it is
        # overridden (RoPE extrapolates; what it means for quality is the user's call)
        self.context = plan.engine_context(group)
        self._ctx_kw = {"max_position_embeddings": self.context.length} if self.context.override else {}
        self.target = self._load(AutoModelForCausalLM, path, torch, self._ctx_kw)
        self.draft = None
        draft_path = None
        # how this engine drafts for the algorithm: its declaration's hf (matrix/algorithms.py)
        decl = algorithm(self.spec.algorithm) if self.spec else None
        drafter = decl.hf if decl is not None else None
        if self.spec and drafter == "draft":
            assert m.draft_model is not None
            draft_path = tinymodel.resolve(m.draft_model.path)
            self.draft = (
                self.target
                if draft_path == path
                else self._load(AutoModelForCausalLM, draft_path, torch, self._ctx_kw)
            )
        elif self.spec and drafter != "ngram":
            *most, last = hf_algorithms()
            raise ValueError(
                f"method {m.name!r}: the hf backend implements speculative algorithms "
                f"{', '.join(most)} and {last}; {self.spec.algorithm!r} needs the sglang backend"
            )
        self.k = (self.spec.num_draft_tokens or 4) if self.spec else 0
        self.max_ngram = (self.spec.max_ngram or 3) if self.spec else 0
        self.forced = self.spec.simulate_accept_length if self.spec else None
        if self.forced is not None and self.forced > self.k + 1:
            raise ValueError(
                f"method {m.name!r}: a forced accept length of {self.forced:g} needs at least "
                f"{math.ceil(self.forced) - 1} draft tokens per step; num_draft_tokens is {self.k}"
            )
        # engine_args disable_radix_cache (SGLang's name for its own): no prefix cache
        self._prefixes = PrefixCache(enabled=not dict(m.engine_args).get("disable_radix_cache"))
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="hf-engine")
        self._closing = False  # close(): requests still decoding in the pool stop at their next step
        self._loop = asyncio.new_event_loop()
        self.info: dict[str, Any] = {
            "backend": "hf",
            "model_path": path,
            "draft_model_path": draft_path,
            "algorithm": self.spec.algorithm if self.spec else None,
            "num_draft_tokens": self.k or None,
            "max_ngram": self.max_ngram or None,
            "simulate_accept_length": self.forced,
            "dtype": "float32",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
            "context_length": self.context.length,
            "native_context_length": self.context.native,
            "context_override": self.context.override,
            "prefix_cache": self._prefixes.enabled,
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
        """Empties the prefix cache: the next request prefills its whole prompt."""
        self._prefixes.clear()

    def close(self) -> None:
        self._closing = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._loop.close()
        self.target = self.draft = None

    # ------------------------------------------------------------------ decoding
    def generate(self, request: Request, t0: float | None = None) -> RequestRecord:
        """Exactly ``max_new_tokens`` tokens (EOS ignored), greedy or sampled at the request's
        temperature (seeded by ``request.seed``), timed per chunk."""
        import torch
        from transformers import DynamicCache

        t0 = time.perf_counter() if t0 is None else t0
        temp = request.temperature
        gen = torch.Generator().manual_seed(request.seed) if temp > 0 else None
        max_new = request.max_new_tokens
        seq = list(request.input_ids)
        n_prompt = len(seq)
        chunks: list[tuple[float, int]] = []
        hist = [0] * (self.k + 1)
        reached = [0] * self.k  # per draft position: steps that proposed it with every earlier one accepted
        verify = draft_steps = draft_tokens = 0
        carry = 0.0  # forced acceptance: accepted drafts owed by a fractional length
        with torch.inference_mode():
            cached, hit = self._prefixes.lookup(seq, _crop)
            cache = hit if hit is not None else DynamicCache()
            seq.append(_pick(_prefill(self.target, seq[cached:], cache), temp, gen))
            prefilled = cache.get_seq_length()  # what the model consumed: the engine's own count
            chunks.append((time.perf_counter() - t0, 1))
            self._prefixes.store(seq[:prefilled], cache)  # after the first token's time
            drafter = _Drafter(self.draft, n_prompt) if self.draft is not None else None
            while len(seq) - n_prompt < max_new:
                if self._closing:
                    raise RuntimeError("engine closed while the request was decoding")
                remaining = max_new - (len(seq) - n_prompt)
                k = min(self.k, remaining - 1)
                q: list[Any] | None = None  # the draft's probability rows (sampled drafts only)
                if k <= 0 or self.spec is None:
                    drafts: list[int] = []
                elif drafter is not None:
                    drafts, q = drafter.propose(seq, k, temp, gen)
                else:
                    drafts = ngram_propose(seq, k, self.max_ngram)
                if self.forced is not None and len(drafts) < k:
                    # forced: a full proposal whatever the n-gram found (the verify costs k + 1)
                    drafts = drafts + [seq[-1]] * (k - len(drafts))
                # one target forward verifies [last committed token] + drafts
                past = cache.get_seq_length()
                logits = _forward(self.target, [seq[-1], *drafts], cache)
                if self.forced is not None and drafts:
                    # forced: accept the set number whatever the drafts say (a cost measurement;
                    # the output is not the target's own), error-diffused for a fractional length
                    carry += self.forced - 1
                    n_acc = min(int(carry + 1e-9), len(drafts))
                    carry -= n_acc
                    nxt = int(logits[n_acc].argmax()) if temp == 0 else _pick(logits[n_acc], temp, gen)
                elif temp == 0:
                    preds_l = [int(x) for x in logits.argmax(-1)]
                    n_acc = 0
                    while n_acc < len(drafts) and drafts[n_acc] == preds_l[n_acc]:
                        n_acc += 1
                    nxt = preds_l[n_acc]
                else:
                    n_acc, nxt = speculative_sample(_probs(logits, temp), drafts, q, gen)
                new = drafts[:n_acc] + [nxt]
                if drafts:
                    draft_steps += 1
                    draft_tokens += len(drafts)
                    for pos in range(min(len(drafts), n_acc + 1)):
                        reached[pos] += 1
                _crop(cache, past + 1 + n_acc)
                if drafter is not None:
                    drafter.accepted(len(seq) + n_acc)
                seq.extend(new[:remaining])
                verify += 1
                if self.spec is not None and n_acc < len(hist):
                    hist[n_acc] += 1
                chunks.append((time.perf_counter() - t0, len(seq) - n_prompt))
        latency = time.perf_counter() - t0
        self._prefixes.store(seq[: cache.get_seq_length()], cache)  # after the request's clock
        return RequestRecord(
            prompt_tokens=n_prompt,
            output_tokens=len(seq) - n_prompt,
            latency_s=latency,
            ttft_s=chunks[0][0],
            verify_steps=verify if self.spec is not None else None,
            accept_histogram=tuple(hist) if self.spec is not None else (),
            draft_steps=draft_steps if self.spec is not None else None,
            draft_tokens=draft_tokens if self.spec is not None else None,
            position_reached=tuple(reached) if self.spec is not None else (),
            chunks=tuple(chunks),
            output_ids=tuple(seq[n_prompt:]),
            tag=request.tag,
            meta=(("thread", threading.current_thread().name),),
            engine_prompt_tokens=prefilled,
            cached_tokens=cached,
        )


class _Drafter:
    """Greedy proposals from a draft model with its own KV cache kept in step with ``seq``."""

    def __init__(self, model: Any, n_prompt: int):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache()
        self.valid = 0  # tokens of seq whose K/V are in the draft cache

    def propose(
        self, seq: list[int], k: int, temperature: float, gen: Any
    ) -> tuple[list[int], list[Any] | None]:
        """K draft tokens (argmax, or sampled at ``temperature``) and, when sampled, the
        draft's probability row each was drawn from."""
        import torch

        _crop(self.cache, self.valid)
        feed = seq[self.valid :]
        out: list[int] = []
        rows: list[Any] = []
        for _ in range(k):
            logits = _prefill(self.model, feed, self.cache)
            if temperature == 0:
                tok = int(logits.argmax())
            else:
                rows.append(_probs(logits, temperature))
                tok = int(torch.multinomial(rows[-1], 1, generator=gen))
            out.append(tok)
            feed = [tok]
        self._proposed_from = len(seq)
        self._k = k
        return out, (rows if temperature else None)

    def accepted(self, committed_before_bonus: int) -> None:
        """``committed_before_bonus`` = len(seq) + accepted drafts, before the bonus token.

        The cache holds seq + the first k-1 drafts; what stays valid is seq plus the accepted
        drafts it actually fed (at most k-1 of them).
        """
        n_acc = committed_before_bonus - self._proposed_from
        self.valid = self._proposed_from + min(n_acc, self._k - 1)
