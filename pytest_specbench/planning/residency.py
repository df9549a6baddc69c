"""Whether a member group's baseline can stay resident beside it on the member's GPUs
(docs/metrics.md "Interleaved baseline"), sized as the planner sizes any group: the one rule the
plan prints and the run starts baseline servers by (plugin/references.py).

Each engine beside another gets its share of every GPU: the fraction it would take alone (its
engine_args' ``mem_fraction_static``, else the plan's) halved, at most ``MAX_SHARE``. SGLang's
``mem_fraction_static`` counts memory other processes hold (its KV pool is total x fraction -
memory in use - weights), so an engine started beside another gets ``used / total + share`` and
its pools come out of ``total x share``: the planner sizes each engine with its share as its
fraction (weights, a hybrid's state pool, KV cache) and checks every cell the two share: the
member's KV cache and the baseline's must each hold the cell's concurrency x (context + output)
tokens. Where they do not, the member is bracketed (deciding/families.py): the baseline runs
before and after it on the same GPUs, and its intervals are widened by the drift the two
brackets bound (report/brackets.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..matrix.cells import Cell, EngineGroup
from .records import GPUBudget
from .shapes import GiB

MAX_SHARE = 0.42  # two engines and their CUDA graphs and contexts within ~0.92 of the GPU
DEFAULT_FRACTION = 0.85  # when the plan knows no fraction for the group


def share_of(planned_fraction: float | None, given: Any = None) -> float:
    """An engine's own share of each GPU beside the other: the fraction it would have alone
    (``given`` in its engine_args, else the plan's), halved, at most MAX_SHARE."""
    alone = float(given) if given is not None else (planned_fraction or DEFAULT_FRACTION)
    return round(min(alone / 2, MAX_SHARE), 4)


def with_engine_args(group: EngineGroup, args: Mapping[str, Any]) -> EngineGroup:
    """The group with ``args`` set in its engine args, each replacing the method's own (same id)."""
    kept = tuple((k, v) for k, v in group.method.engine_args if k not in args)
    method = dataclasses.replace(group.method, engine_args=(*kept, *args.items()))
    return dataclasses.replace(group, method=method)


def with_fraction(group: EngineGroup, fraction: float) -> EngineGroup:
    """The group with ``mem_fraction_static`` set in its engine args (same id)."""
    return with_engine_args(group, {"mem_fraction_static": fraction})


@dataclass
class Residency:
    """A member group and its baseline's group, side by side on the member's GPUs."""

    member: str
    baseline: str
    fits: bool
    member_share: float | None = None
    baseline_share: float | None = None
    why: str = ""  # what does not fit (or why it is assumed to)
    kv_tokens: dict[str, int | None] = field(default_factory=dict)  # group -> KV tokens at its share

    def note(self) -> str:
        """The plan's line for the member group."""
        if self.fits and self.member_share is not None:
            return (
                f"baseline resident beside it: {self.baseline} on the same GPUs (shares "
                f"{self.member_share:g}/{self.baseline_share:g} of each GPU), rounds interleaved"
                + (f"; {self.why}" if self.why else "")
            )
        if self.fits:
            return f"baseline resident beside it: {self.baseline} (shares not planned: {self.why})"
        return (
            f"does not fit beside the baseline {self.baseline}: bracketed ({self.why}); its "
            "baseline runs one round of its first shape before and after it on the same GPUs, and "
            "its intervals are widened by the drift the two bound"
        )


def _sized(group: EngineGroup, gpu: GPUBudget, gpu_backends: frozenset[str]) -> tuple[float, Any]:
    """(its share, its GroupPlan with the share as its mem_fraction_static)."""
    from .plan import _mem_fraction, _size_group

    alone, _ = _mem_fraction(group, gpu)
    share = share_of(alone)
    return share, _size_group(with_fraction(group, share), gpu, gpu_backends)


def residency(
    member: EngineGroup,
    baseline: EngineGroup,
    cells: Iterable[Cell],
    gpu: GPUBudget | None,
    gpu_backends: frozenset[str],
) -> Residency:
    """Whether ``baseline`` fits beside ``member`` for ``cells`` (the member's cells compared with
    it): both engines' weights (and a hybrid's state slots) within their shares, and each KV cache
    holding every cell's concurrency x tokens per request. Without a GPU memory plan (no NVML,
    no --specbench-gpu-memory; a backend without GPU memory) or a model the planner cannot
    size, it is assumed to fit (what the run then finds is in the engine event)."""
    r = Residency(member.id, baseline.id, True)
    if gpu is None:
        r.why = "GPU memory unknown"
        return r
    if member.method.backend not in gpu_backends:
        r.why = f"backend {member.method.backend} has no GPU memory plan"
        return r
    r.member_share, mp = _sized(member, gpu, gpu_backends)
    r.baseline_share, bp = _sized(baseline, gpu, gpu_backends)
    for gp in (mp, bp):
        if gp.unsized:
            r.why = f"{gp.group} not sized: {gp.unsized}"
            return r
    r.kv_tokens = {mp.group: mp.kv_tokens_capacity, bp.group: bp.kv_tokens_capacity}
    for gp, share in ((mp, r.member_share), (bp, r.baseline_share)):
        if gp.error:
            r.fits, r.why = False, f"{gp.group} at share {share:g}: {gp.error}"
            return r
    for c in cells:
        need = c.concurrency * c.tokens_per_request
        for gp, share in ((mp, r.member_share), (bp, r.baseline_share)):
            cap = gp.kv_tokens_capacity
            if cap is not None and cap < need:
                held = cap * (gp.kv_bytes_per_token or 0) / GiB
                r.fits = False
                r.why = (
                    f"{gp.group}'s KV cache at share {share:g} of {gpu.memory_bytes / GiB:.1f} GiB holds "
                    f"{cap} tokens ({held:.1f} GiB per GPU), {c.id} needs {c.concurrency} x "
                    f"{c.tokens_per_request} = {need}"
                )
                return r
            if gp.max_running is not None and gp.state_pool_bytes_per_gpu and gp.max_running < c.concurrency:
                r.fits = False
                r.why = (
                    f"{gp.group}'s state pool at share {share:g} admits {gp.max_running} running "
                    f"requests, {c.id} runs {c.concurrency}"
                )
                return r
    return r


def resident_members(
    cells: Iterable[Cell],
    baselines: Mapping[str, str | None],
    resident_backends: frozenset[str] | set[str],
    gpu: GPUBudget | None,
    gpu_backends: frozenset[str],
) -> dict[str, Residency]:
    """Member group id -> its Residency, for every group of ``cells`` whose baseline (another
    method, running the member's workload) could be resident beside it: both on
    ``resident_backends``."""
    from ..matrix.interleave import interleaves

    cells = list(cells)
    by_name = {c.method.name: c.method for c in cells}
    groups = {c.group.id: c.group for c in cells}
    members: dict[str, list[Cell]] = {}
    base_of: dict[str, EngineGroup] = {}
    for c in cells:
        name = baselines.get(c.method.name)
        base = by_name.get(name) if name else None
        if base is None or not interleaves(c, base, resident_backends):
            continue
        members.setdefault(c.group.id, []).append(c)
        gid = f"{base.name}-tp{c.tp}"
        base_of[c.group.id] = groups.get(gid) or EngineGroup(base, c.tp)
    return {g: residency(groups[g], base_of[g], cs, gpu, gpu_backends) for g, cs in members.items()}
