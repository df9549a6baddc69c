"""What SGLang 0.5.17 gives an engine of its GPU memory, as the planner sizes it: the default
mem_fraction_static and, for hybrid models, the split between the linear-attention state pool
and the KV cache (read in its source: server_args.py, mem_cache/kv_cache_configurator.py)."""

from __future__ import annotations

from ..matrix.algorithms import algorithm
from ..matrix.cells import EngineGroup


def sglang_mem_fraction(gpu_bytes: int, tp: int) -> float:
    """SGLang 0.5.17's default mem_fraction_static (server_args.py), without its CUDA-graph
    reserve: (GPU memory - reserved) / GPU memory, reserved = 512 MiB + 1.5 MiB per token of
    the chunked-prefill size (2k/4k/8k/16k by GPU size) + TP/8 GiB, at least 10 GiB above 60 GiB."""
    mib = gpu_bytes / 1024**2
    chunk = 2048 if mib < 35 * 1024 else 4096 if mib < 60 * 1024 else 8192 if mib < 160 * 1024 else 16384
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


# SGLang 0.5.17 (mem_cache/kv_cache_configurator.py): state slots per running request, and the
# max running requests its speculative hooks set when none is given
SGLANG_STATE_SLOTS_PER_REQUEST = 3
SGLANG_SPEC_MAX_RUNNING = 48


def sglang_state_pool(
    group: EngineGroup, free: int, per_req: int, running: int | None, width: int | None = None
) -> tuple[int, int, str]:
    """Bytes per GPU SGLang 0.5.17 gives a hybrid model's linear-attention (GDN/Mamba) state pool
    out of the memory left after the weights; the KV cache gets the rest. Without speculation
    the pool is free x r / (1 + r), r = mamba_full_memory_ratio (0.9): the KV cache gets
    1 / 1.9 of it. With speculation the same budget also holds D draft-token states per running
    request (``running``: the group's max running requests; D = ``width``, the verify width,
    else num_draft_tokens / num_steps + 1), so fewer slots are made and the unused part goes back
    to the KV cache (kv_cache_configurator.py:1920-1947; the pool's intermediate states
    [layers, slots + 1, D, ...] at memory_pool.py:679-703, D its max_speculative_num_draft_tokens,
    kv_cache_configurator.py:713). Returns (bytes, slots, note)."""
    args = dict(group.method.engine_args)
    r = float(args.get("mamba_full_memory_ratio", 0.9))
    spec = group.method.speculative
    slots = args.get("max_mamba_cache_size")
    budget = free * r / (1 + r)
    if spec is None:
        k = int(slots) if slots else int((budget - per_req) // per_req)
        note = f"state pool: {k + 1} slots of {per_req / 2**20:.1f} MiB (SGLang's split)"
        return (k + 1) * per_req, k, note
    decl = algorithm(spec.algorithm)
    default = decl.default_draft_tokens if decl is not None else None  # SGLang's (NGRAM: 12)
    d = width or spec.num_draft_tokens or default or (spec.num_steps or 3) + 1
    ratio = SGLANG_STATE_SLOTS_PER_REQUEST
    k = int(slots) if slots else int((budget - per_req * (1 + d)) // (per_req * (1 + d / ratio)))
    running = running or SGLANG_SPEC_MAX_RUNNING
    inter = per_req * (min(running, k // ratio) + 1) * d
    return (
        (k + 1) * per_req + inter,
        k,
        f"state pool: {k + 1} slots of {per_req / 2**20:.1f} MiB + {d} draft-token states for "
        f"{min(running, k // ratio)} running requests (SGLang's split)",
    )
