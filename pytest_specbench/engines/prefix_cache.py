"""The hf engine's prefix cache: the KV cache of earlier sequences, for a prompt that starts with
the same tokens, so that only the rest is prefilled (what SGLang's radix cache does for shared
system prompts, agentic histories and traces with shared blocks).

After a request's prefill its prompt is stored, and after its decode the whole sequence (the
model's own reply included: the next agentic turn starts with it). A lookup takes the entry with
the longest common prefix, copies its cache and cuts it there; at least one prompt token is
always computed (the next token's logits need it). Shared prefixes shorter than MIN_TOKENS are
prefilled again. Least recently used entries go first once the entries hold more than
MAX_TOKENS. ``clear`` (the engine's flush_cache) empties it. A method's ``engine_args:
{disable_radix_cache: true}`` (SGLang's name for its own) turns it off. No pytest.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

MIN_TOKENS = 16  # a copy of a shorter prefix costs about what its prefill would
# tokens held over all entries (the embedded model: 4 KiB of KV a token; entries of one sequence
# share their tensors, so this bounds what the cache keeps alive, not what it copied)
MAX_TOKENS = 1 << 17


def snapshot(cache: Any) -> Any:
    """A copy of ``cache`` that later appends and crops of either side leave alone. A transformers
    DynamicCache of DynamicLayers shares its tensors (a layer appends with torch.cat, a new tensor,
    and crops by slicing, a view: it never writes into a tensor it holds), so storing and reusing
    an entry costs no copy of its KV; other cache types are deep-copied."""
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list) and all(type(x).__name__ == "DynamicLayer" for x in layers):
        new = copy.copy(cache)
        new.layers = [copy.copy(x) for x in layers]
        return new
    return copy.deepcopy(cache)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i, step = 0, 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    def __init__(self, max_tokens: int = MAX_TOKENS, min_tokens: int = MIN_TOKENS, enabled: bool = True):
        self.enabled = enabled  # off: every lookup misses and nothing is stored
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def lookup(self, ids: Sequence[int], crop: Any) -> tuple[int, Any | None]:
        """(tokens reused, a copy of the cache cut to them) for a prompt ``ids``; (0, None) when
        no entry shares at least ``min_tokens``. ``crop(cache, n)`` cuts a cache to n positions."""
        if not self.enabled:
            return 0, None
        ids = tuple(ids)
        with self._lock:  # the scan holds the lock: an entry replaced meanwhile is not missed
            best, n = None, 0
            for key in self._entries:
                k = common_prefix(key, ids)
                if k > n:
                    best, n = key, k
            n = min(n, len(ids) - 1)
            if best is None or n < self.min_tokens:
                return 0, None
            self._entries.move_to_end(best)
            out = snapshot(self._entries[best])
        crop(out, n)
        return n, out

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """A copy of ``cache`` (holding exactly the positions of ``ids``) under ``ids``; an entry
        that is a prefix of ``ids`` is replaced (the longer one serves both)."""
        key = tuple(ids)
        if not self.enabled or len(key) < self.min_tokens or len(key) > self.max_tokens:
            return
        snap = snapshot(cache)
        with self._lock:
            for k in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
                del self._entries[k]
            self._entries[key] = snap
            total = sum(len(k) for k in self._entries)
            while total > self.max_tokens and len(self._entries) > 1:
                old, _ = self._entries.popitem(last=False)
                total -= len(old)
