"""Prompts with exact token counts for the model's own tokenizer.

Prompts are built from real text in ``fixtures/text`` (written for the project), encoded
once per tokenizer, and cut into windows of exactly N token ids. Every request gets a
different window (seeded offsets into a per-request shuffle of the passages), so no two
requests share a long prefix and no prefix cache makes prefill free. Engines receive token
ids, so the count the engine sees is the count asked for.
"""

from __future__ import annotations

import os
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

FIXTURES_ENV = "SPECBENCH_FIXTURES"


def fixtures_dir() -> Path:
    env = os.environ.get(FIXTURES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[1] / "fixtures"


@lru_cache(maxsize=None)
def passages(text_dir: str | None = None) -> tuple[str, ...]:
    """Paragraphs of the corpus, in a stable order."""
    d = Path(text_dir) if text_dir else fixtures_dir() / "text"
    files = sorted(p for p in d.iterdir() if p.is_file())
    if not files:
        raise FileNotFoundError(f"{d}: no text files for prompts (set {FIXTURES_ENV} to the fixtures dir)")
    out: list[str] = []
    for f in files:
        out += [p.strip() for p in f.read_text().split("\n\n") if p.strip()]
    return tuple(out)


_ENCODED: dict[int, list[list[int]]] = {}


def _encoded_passages(tokenizer: Any) -> list[list[int]]:
    key = id(tokenizer)
    if key not in _ENCODED:
        _ENCODED[key] = [tokenizer.encode(p + "\n\n", add_special_tokens=False) for p in passages()]
    return _ENCODED[key]


def exact_prompt(tokenizer: Any, n_tokens: int, seed: int) -> tuple[int, ...]:
    """Exactly ``n_tokens`` ids: passages in a seed-specific order, from a seed-specific offset."""
    enc = _encoded_passages(tokenizer)
    rng = random.Random(seed)
    ids: list[int] = []
    order = list(range(len(enc)))
    offset = rng.randrange(sum(len(e) for e in enc))
    while len(ids) < n_tokens + offset:
        rng.shuffle(order)
        for i in order:
            ids.extend(enc[i])
    return tuple(ids[offset:offset + n_tokens])


def make_prompts(tokenizer: Any, n_tokens: int, count: int, seed: int = 0) -> list[tuple[int, ...]]:
    """``count`` distinct prompts of exactly ``n_tokens`` ids each."""
    return [exact_prompt(tokenizer, n_tokens, seed * 1_000_003 + i) for i in range(count)]
