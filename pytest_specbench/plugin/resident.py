"""The baseline beside every member on GPUs (docs/metrics.md "Interleaved baseline"): on a backend
registered ``resident`` (sglang-server: a launched server, so two fit in one process), the
baseline's engine is started on the member group's own GPUs and its rounds alternate with the
member's, as on the CPU; drift between engine groups then cancels in every ratio.

Memory: SGLang's ``mem_fraction_static`` is a fraction of the whole GPU that counts what other
processes hold (KV pool = total x fraction - memory in use - weights), so each engine started
beside another gets ``used / total + share``: its own share on top of what is already taken.
Each engine's share is the group's planned fraction (its engine_args' or SGLang's default)
halved, at most ``MAX_SHARE`` (planning/residency.py: the rule the plan checks both engines'
memory by; a member they do not fit beside is bracketed instead); the engine event records it.
Each engine started beside another also gets its backend's ``beside_args`` (sglang-server:
``sleep_on_idle``): an idle SGLang scheduler otherwise spins one CPU core at 100 %, beside the
server whose round is running, and which instance it slows depends on where the OS placed the
two: an instance effect the alternation of rounds does not cancel.
One process keeps the baseline resident across its member groups while they lease the same
GPUs; under -n it stops with the member's lease (another worker may lease those GPUs next).
"""

from __future__ import annotations

from typing import Any

from ..engines import BACKENDS
from ..matrix.cells import EngineGroup
from ..planning.residency import (  # noqa: F401
    DEFAULT_FRACTION,
    MAX_SHARE,
    share_of,
    with_engine_args,
    with_fraction,
)


def is_resident(group: EngineGroup) -> bool:
    b = BACKENDS.get(group.method.backend)
    return b is not None and b.resident and b.gpu


def fraction_beside(used_mib: dict[int, int], total_mib: dict[int, int], share: float) -> float:
    """``mem_fraction_static`` for an engine started on GPUs where ``used_mib`` is already
    taken (by the engine beside it, other processes): the largest used fraction plus its share."""
    used = max((used_mib.get(i, 0) / total_mib[i] for i in total_mib if total_mib[i]), default=0.0)
    return round(min(used + share, 0.95), 4)


def sized(
    group: EngineGroup, gpus: tuple[int, ...], planned_fraction: float | None
) -> tuple[EngineGroup, dict[str, Any]]:
    """The group as it starts beside another engine on ``gpus``: its fraction from what NVML
    reads as used now, and what the engine event records of it."""
    from ..gpus.inventory import inventory

    inv = {g.index: g for g in inventory() if g.index in gpus}
    used = {i: g.memory_used_mib for i, g in inv.items()}
    total = {i: g.memory_total_mib for i, g in inv.items()}
    share = share_of(planned_fraction, dict(group.method.engine_args).get("mem_fraction_static"))
    frac = fraction_beside(used, total, share)
    group, added = with_beside_args(with_fraction(group, frac))
    return group, {
        "share": share,
        "mem_fraction_static": frac,
        "used_mib_before": {str(k): v for k, v in used.items()},
        **({"beside_args": added} if added else {}),
    }


def with_beside_args(group: EngineGroup) -> tuple[EngineGroup, dict[str, Any]]:
    """The group with its backend's ``beside_args`` (engines/__init__.py) added where its method
    does not set them, and those added: an engine that shares its GPUs with another waits idle
    without spinning a CPU core the busy one may need (an instance effect rounds cannot cancel)."""
    b = BACKENDS.get(group.method.backend)
    given = dict(group.method.engine_args)
    added = {k: v for k, v in (b.beside_args if b is not None else ()) if k not in given}
    return (with_engine_args(group, added), added) if added else (group, {})
