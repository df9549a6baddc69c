"""Request traces: timestamped JSONL replayed at its times (``kind: trace``).

The format is Mooncake's (kvcache-ai/Mooncake FAST25-release traces), read by SGLang's and
vLLM's serving benchmarks too: one JSON object per line with

- ``timestamp``: the arrival time in milliseconds (any origin: replay starts at the first one),
- ``input_length`` and ``output_length``: tokens,
- ``hash_ids`` (optional): one id per fixed-size block of the prompt (512 tokens in Mooncake's
  traces, ``block_tokens`` here); a block id is a hash of the whole prefix up to and including
  that block, so two requests whose ids agree up to block k share their first k blocks.

A request's prompt is its blocks' token ids (each block id always stands for the same tokens of
real text, exact_prompt seeded by the id), cut to ``input_length`` exactly; positions beyond the
listed blocks, or a trace without ``hash_ids``, get tokens of their own. Requests that share ids
then share prefix tokens, and a prefix cache sees the trace's own reuse. No pytest, no heavy
imports.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DEFAULT_BLOCK_TOKENS = 512  # Mooncake's block size
# the longest input or output a trace line may ask for: beyond any engine's context (the
# matrix's own bound on token counts); more is a typo that would fail building prompts after
# the engines started
MAX_TOKENS = 10_000_000


@dataclass(frozen=True)
class TraceRequest:
    offset_s: float  # arrival, seconds after the trace's first request (at speed 1)
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    path: str
    requests: tuple[TraceRequest, ...]

    @property
    def duration_s(self) -> float:
        return self.requests[-1].offset_s if self.requests else 0.0

    def rate(self) -> float:
        """Mean arrival rate at speed 1 (req/s): the arrivals after the first over the span from
        the first to the last (a trace's clock starts at its first request). A trace whose
        requests all arrive at once has none (the schema refuses it)."""
        n = len(self.requests)
        return (n - 1) / self.duration_s if n > 1 and self.duration_s > 0 else 0.0

    def mean_input(self) -> int:
        return round(sum(r.input_length for r in self.requests) / max(1, len(self.requests)))

    def output_lengths(self, cap: int | None = None) -> list[int]:
        """Each request's output length, at most ``cap`` (the workload's max_output_tokens)."""
        return [min(r.output_length, cap) if cap else r.output_length for r in self.requests]

    def prefix_reuse(self, block_tokens: int) -> float:
        """The share of prompt tokens a prefix cache that never evicts could serve, given the
        prompts as built (prompt_ids): per request, the longest prefix it shares with an earlier
        request's prompt, which is its leading blocks that the earlier request listed at the same
        positions, but only as far as that earlier prompt went (a block cut short by its
        input_length was not all there), and at least one token of each prompt computed. What a
        measured hit rate can reach at most (replies are not counted: a trace's reply blocks
        stand for the model's own words, which a replay does not reproduce)."""
        longest: dict[tuple[int, ...], int] = {}  # a block prefix -> the longest prompt through it
        hit = total = 0
        for r in self.requests:
            total += r.input_length
            best = 0
            for k in range(1, len(r.hash_ids) + 1):
                held = longest.get(r.hash_ids[:k])
                if held is None:
                    break
                best = max(best, min(k * block_tokens, held))
            hit += min(best, max(0, r.input_length - 1))
            for k in range(1, len(r.hash_ids) + 1):
                key = r.hash_ids[:k]
                longest[key] = max(longest.get(key, 0), r.input_length)
        return hit / total if total else 0.0


def _field(path: Path, n: int, d: dict[str, Any], key: str, kind: type) -> Any:
    v = d.get(key)
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{path}:{n}: {key!r} must be a finite number; got {v!r}")
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
            raise ValueError(f"{path}:{n}: {key!r} must be a whole number >= 1; got {v!r}")
        if v > MAX_TOKENS:
            raise ValueError(
                f"{path}:{n}: {key!r} must be a whole number of tokens from 1 to {MAX_TOKENS:,}; got {v!r}"
            )
        return int(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{path}:{n}: {key!r} must be a number (milliseconds); got {v!r}")
    return float(v)


@cache
def load_trace(path: str, requests: int | None = None, seconds: float | None = None) -> Trace:
    """The trace at ``path``, sorted by arrival, offsets relative to its first request; cut to
    its first ``requests`` arrivals and to those within ``seconds`` of the first (either, both
    or neither). Every error names the file and line."""
    from .prompts import json_lines

    p = Path(path)
    rows: list[tuple[float, int, TraceRequest]] = []
    for n, d in json_lines(p, "trace"):
        if not isinstance(d, dict):
            raise ValueError(f"{p}:{n}: expected an object with timestamp, input_length, output_length")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in d]
        if missing:
            raise ValueError(
                f"{p}:{n}: missing {', '.join(missing)} (a Mooncake trace line: timestamp in ms, "
                "input_length, output_length, optional hash_ids)"
            )
        ts = _field(p, n, d, "timestamp", float)
        inp = _field(p, n, d, "input_length", int)
        out = _field(p, n, d, "output_length", int)
        ids = d.get("hash_ids")
        ids = [] if ids is None else ids
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise ValueError(f"{p}:{n}: hash_ids must be a list of integers; got {ids!r}")
        rows.append((ts, n, TraceRequest(0.0, inp, out, tuple(ids))))
    if not rows:
        raise ValueError(f"{p}: no requests")
    if max(ts for ts, _, _ in rows) - min(ts for ts, _, _ in rows) > 1e3 * 86400 * 365:
        raise ValueError(f"{p}: its timestamps span more than a year: they must be milliseconds")
    rows.sort(key=lambda x: (x[0], x[1]))
    t0 = rows[0][0]
    out_reqs = []
    for ts, _, r in rows:
        off = (ts - t0) / 1000.0
        if seconds is not None and off > seconds:
            break
        out_reqs.append(TraceRequest(off, r.input_length, r.output_length, r.hash_ids))
        if requests is not None and len(out_reqs) >= requests:
            break
    return Trace(str(p), tuple(out_reqs))


def block_seed(trace_name: str, block_id: int) -> int:
    """The seed of a block's tokens: from the trace's file name and the id (stable across runs)."""
    return zlib.crc32(f"{trace_name}/block{block_id}".encode())


def prompt_ids(
    tokenizer: Any,
    trace: Trace,
    index: int,
    block_tokens: int,
    blocks: dict[tuple[int, int], tuple[int, ...]],
) -> tuple[int, ...]:
    """Exactly ``input_length`` ids for request ``index``: its blocks' tokens (``blocks`` caches
    them per (id, size)), then tokens of its own where the ids run out."""
    from . import prompts

    r = trace.requests[index]
    name = Path(trace.path).name
    ids: list[int] = []
    for h in r.hash_ids:
        if len(ids) >= r.input_length:
            break
        key = (h, block_tokens)
        if key not in blocks:
            blocks[key] = prompts.exact_prompt(tokenizer, block_tokens, block_seed(name, h))
        ids += blocks[key]
    if len(ids) < r.input_length:
        own = r.input_length - len(ids)
        ids += prompts.exact_prompt(tokenizer, own, zlib.crc32(f"{name}/request{index}".encode()))
    return tuple(ids[: r.input_length])
