"""Feasibility planner: memory, KV cache, TP and context checks before any engine starts, and
the plan's times.

From a model's config.json (no weights needed; shapes.py sizes it) the plan gives per engine
group the weights and KV cache per GPU at its TP size, and per cell whether it fits. SGLang
0.5.17 sizes the same way (read in its source): KV cell = KV heads per GPU x (head_dim +
v_head_dim) x full-attention layers x bytes (model_executor/pool_configurator.py; EAGLE/STANDALONE
scale it by the draft's layers, i.e. target + draft); KV budget = free memory after loading the
weights (target + draft) - memory before loading x (1 - mem_fraction_static)
(mem_cache/kv_cache_configurator.py). The plan ignores the CUDA context and NCCL buffers (about a
GiB per GPU), so its capacity is slightly optimistic; for hybrid models SGLang first splits
that budget between a pool of linear-attention state slots and the KV cache
(sglang_memory.py), and the plan does the same.

A cell needs concurrency x (context + output) KV tokens: it fits, queues (fewer requests
in flight than asked), or is skipped with a reason that names the numbers. Context beyond
the config's max_position_embeddings gets an engine override unless the model's
``context_length`` in the YAML caps it. Times (engine starts, cells) come from the time model
in eta.py, or from a previous results JSON where it has them (``apply_previous``). No pytest
and no heavy imports here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..matrix import algorithms
from ..matrix.cells import Cell, EngineGroup
from ..matrix.schema import ENDPOINT_BACKENDS
from . import eta, structure
from .eta import ENGINE_START_S
from .previous import apply_previous
from .records import CellPlan, GPUBudget, GroupPlan
from .sglang_memory import (
    SGLANG_SPEC_MAX_RUNNING,
    SGLANG_STATE_SLOTS_PER_REQUEST,
    sglang_mem_fraction,
    sglang_state_pool,
)
from .shapes import (
    GiB,
    Unsupported,
    model_shape,
)

DEFAULT_MEM_FRACTION = 0.85  # backends other than sglang that set no mem_fraction_static


# ------------------------------------------------------------------------------ context


@dataclass(frozen=True)
class EngineContext:
    length: int | None  # what the engine gets (None: its own default)
    native: int | None  # the config's max_position_embeddings
    override: bool  # length > native: max_position_embeddings overridden


def _engine_arg_context(method: Any) -> int | None:
    """``context_length`` among a method's engine args (its own, or an include entry's for its
    TP): what the engine is started with, whatever the model says."""
    v = dict(method.engine_args).get("context_length")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def engine_context(group: EngineGroup) -> EngineContext:
    """The context length an engine gets: engine_args' context_length (an include entry's for the
    group's TP too) or the model's cap from the YAML when set, else what its cells need,
    overriding max_position_embeddings when that is more than the config's."""
    m = group.method.model
    try:
        native = model_shape(m).max_position
    except Unsupported:
        native = None
    cap = _engine_arg_context(group.method) or m.context_length
    if cap:
        return EngineContext(cap, native, bool(native and cap > native))
    need = group.context_needed
    if native and need > native:
        return EngineContext(need, native, True)
    return EngineContext(None, native, False)


def context_reason(cell: Cell) -> str | None:
    m = cell.method.model
    need = cell.context_tokens + cell.output_tokens
    given = _engine_arg_context(cell.method)
    if given and need > given:
        return (
            f"needs {need} tokens of context ({cell.context_tokens} prompt + {cell.output_tokens} output); "
            f"methods.{cell.method.sweep or cell.method.name}.engine_args.context_length (its own or an "
            f"include entry's for TP{cell.tp}) starts the engine with {given}"
        )
    if m.context_length and need > m.context_length:
        return (
            f"needs {need} tokens of context ({cell.context_tokens} prompt + {cell.output_tokens} output); "
            f"models.{m.name}.context_length caps it at {m.context_length} (remove the cap to let the "
            "engine override max_position_embeddings)"
        )
    return None


# ------------------------------------------------------------------------------ memory


def parse_memory(value: str) -> int:
    """'80GiB', '141GB', '80g', '81920MiB' -> bytes."""
    s = value.strip().lower().replace(" ", "")
    units = (("gib", GiB), ("gb", 10**9), ("g", GiB), ("mib", 1024**2), ("mb", 10**6), ("tib", 1024**4))
    for suffix, mult in units:
        if s.endswith(suffix):
            try:
                return int(float(s[: -len(suffix)]) * mult)
            except ValueError:
                break
    raise ValueError(f"{value!r}: expected a size like 80GiB, 141GB or 81920MiB")


SGLANG_BACKENDS = ("sglang", "sglang-server")  # SGLang's memory split and running-request caps


def _mem_fraction(group: EngineGroup, gpu: GPUBudget) -> tuple[float, str]:
    v = dict(group.method.engine_args).get("mem_fraction_static")
    if isinstance(v, (int, float)):
        return float(v), "set in engine_args"
    if group.method.backend in SGLANG_BACKENDS:
        return sglang_mem_fraction(gpu.memory_bytes, group.tp), "SGLang's default for this GPU size"
    return DEFAULT_MEM_FRACTION, "assumed"


def plan_group(
    group: EngineGroup,
    gpu: GPUBudget | None,
    gpu_backends: frozenset[str] = frozenset({"sglang"}),
    previous: dict[str, Any] | None = None,
    source: str = "",
) -> GroupPlan:
    """A group's sizes and start; ``previous``: a results JSON whose measured accept lengths
    the ETAs use (``source``: its path, for the note)."""
    gp = _size_group(group, gpu, gpu_backends, previous, source)
    spec = group.method.speculative
    # the declaration of the name as written (the matrix writes a checked algorithm in lower case)
    decl = algorithms.ALGORITHMS.get(spec.algorithm) if spec is not None else None
    if spec is not None and decl is not None and decl.block_drafter and not decl.checked:
        gp.notes.append(
            f"{spec.algorithm}: the matrix checks no settings of it, SGLang validates them at start; "
            "planned as a block drafter (one draft forward over its block; the target's embedding, LM head)"
        )
    elif spec is not None and not (decl is not None and decl.checked):
        import difflib

        near = difflib.get_close_matches(spec.algorithm.lower(), algorithms.names(), n=1, cutoff=0.75)
        gp.notes.append(
            f"no rules known for {spec.algorithm}: SGLang validates it at start (sized and timed as "
            "an EAGLE-like draft of num_steps steps)" + (f"; did you mean {near[0]}?" if near else "")
        )
    if gp.costs is None or (gp.backend not in gpu_backends and gp.backend != "hf"):
        gp.start_s = ENGINE_START_S.get(gp.backend, 60.0)
        gp.start_from = "fallback"
        return gp
    st = eta.engine_start(gp.costs)
    gp.start_s, gp.first_start_extra_s = st.start_s, st.first_extra_s
    if gp.costs.spec is not None:
        c = gp.costs
        gp.accept_length, gp.accept_from = c.accept_length, c.accept_from
        gp.notes.append(
            f"verify: {c.verify_tokens} token(s) a request and step"
            + (f", {c.num_steps} draft forward(s)" if c.num_steps else "")
            + (f" ({gp.step_why})" if gp.step_why else "")
        )
        gp.notes.append(f"ETA at {c.accept_length:g} token(s) per verify step ({c.accept_why})")
    return gp


def _size_group(
    group: EngineGroup,
    gpu: GPUBudget | None,
    gpu_backends: frozenset[str],
    previous: dict[str, Any] | None = None,
    source: str = "",
) -> GroupPlan:
    m = group.method
    gp = GroupPlan(group.id, m.name, m.backend, group.tp, m.model.name)
    if m.backend in ENDPOINT_BACKENDS:  # nothing to start, size or time: someone else's server
        gp.notes.append(
            f"external endpoint {m.url} ({m.api} API): no start and no GPU memory plan; the ETA "
            "comes only from a results JSON (--specbench-plan-from)"
            + (
                "; the engine event records what the server sized (/get_server_info)"
                if m.api == "sglang"
                else ""
            )
        )
        return gp
    ctx = engine_context(group)
    gp.context_length, gp.native_context_length, gp.context_override = ctx.length, ctx.native, ctx.override
    if ctx.override:
        gp.notes.append(
            f"context {ctx.length} > max_position_embeddings {ctx.native}: the engine gets an override"
        )
    try:
        t = model_shape(m.model)
        d = model_shape(m.draft_model) if m.draft_model is not None else None
        if (
            d is not None
            and m.draft_model is not None
            and m.draft_model.path == m.model.path
            and t.mtp_layers
        ):
            d = t.mtp_draft()  # SGLang makes a model with MTP layers its own MTP draft
            gp.notes.append(f"draft: the target's {t.mtp_layers} MTP layer(s), as SGLang builds it")
    except Unsupported as e:  # reported, never sized wrongly; the cells still run
        gp.unsized = str(e)
        gp.notes.append(f"not sized: {e}")
        return gp
    for name, s in (("target", t), ("draft", d)):
        if s is None:
            continue
        err = s.tp_error(group.tp)
        if err and name == "target":
            gp.error = f"TP={group.tp} is impossible for {m.model.name}: {err}"
            return gp
        note = s.kv_note(group.tp)
        if note:
            gp.notes.append(f"{name}: {note}")
    gp.costs = structure.group_costs(group, t, d, previous, source)
    gp.step_why = gp.costs.step_why or None
    gp.kv_bytes_per_token = t.kv_bytes_per_token(group.tp) + (d.kv_bytes_per_token(group.tp) if d else 0)
    gp.state_bytes_per_request = t.state_bytes_per_request(group.tp) + (
        d.state_bytes_per_request(group.tp) if d else 0
    )
    draft_w = gp.costs.draft.weight_bytes if gp.costs.draft is not None else 0
    gp.weight_bytes_per_gpu = t.weight_bytes_per_gpu(group.tp) + draft_w
    if gp.costs.shares_target_head and d is not None:
        gp.notes.append(
            f"draft: {draft_w / GiB:.2f} GiB/GPU, the target's embedding and LM head shared (as SGLang's "
            f"{m.speculative.algorithm.upper()} draft uses them)"
        )
    # the roofline is decode without speculation: the target's weights and KV alone
    gp.roofline_bytes_per_step = t.weight_bytes_per_gpu(group.tp)
    gp.roofline_kv_bytes_per_token = t.kv_bytes_per_token(group.tp)
    if m.backend not in gpu_backends:
        gp.notes.append(f"backend {m.backend}: runs on the CPU; no GPU memory plan")
        return gp
    if gpu is None:
        gp.notes.append("GPU memory unknown (no NVML and no --specbench-gpu-memory): KV capacity not planned")
        return gp
    gp.mem_fraction_static, why = _mem_fraction(group, gpu)
    if why != "set in engine_args":
        gp.notes.append(
            f"mem_fraction_static {gp.mem_fraction_static} ({why}; set it in engine_args to plan "
            "exactly what the engine gets)"
        )
    gp.budget_bytes_per_gpu = int(gpu.memory_bytes * gp.mem_fraction_static)
    free = gp.budget_bytes_per_gpu - gp.weight_bytes_per_gpu
    if free <= 0:
        gp.error = (
            f"needs {gp.weight_bytes_per_gpu / GiB:.1f} GiB per GPU for weights at TP={group.tp}, "
            f"{gp.budget_bytes_per_gpu / GiB:.1f} GiB available ({gpu.memory_bytes / GiB:.1f} GiB x "
            f"mem_fraction_static {gp.mem_fraction_static})"
        )
        return gp
    if m.backend in SGLANG_BACKENDS:
        args = dict(m.engine_args)
        if args.get("max_running_requests"):
            gp.max_running, gp.max_running_why = int(args["max_running_requests"]), "max_running_requests"
        elif m.speculative is not None:
            gp.max_running = SGLANG_SPEC_MAX_RUNNING
            gp.max_running_why = "SGLang's default with speculative decoding; set max_running_requests"
    if gp.state_bytes_per_request and m.backend in SGLANG_BACKENDS:
        width = gp.costs.verify_tokens if gp.costs.spec is not None else None
        state, slots, how = sglang_state_pool(group, free, gp.state_bytes_per_request, gp.max_running, width)
        if slots <= 0:  # SGLang 0.5.17 raises "Not enough GPU memory for hybrid ... state cache"
            gp.error = (
                f"{free / GiB:.2f} GiB per GPU left after the weights at TP={group.tp} hold no "
                f"linear-attention state slot ({gp.state_bytes_per_request / 2**20:.1f} MiB per request): "
                "SGLang refuses to start; raise mem_fraction_static or TP"
            )
            return gp
        free -= state
        gp.state_pool_bytes_per_gpu = state
        gp.notes.append(how)
        cap = slots // SGLANG_STATE_SLOTS_PER_REQUEST
        if cap <= 0:  # kv_cache_configurator.py:1751-1759: "state cache is too small to serve any requests"
            d, per = width or 0, gp.state_bytes_per_request
            gp.error = (
                f"the state pool's {slots} slot(s) serve no request ({SGLANG_STATE_SLOTS_PER_REQUEST} per "
                f"running request) at TP={group.tp}: each running request also reserves {d} draft-token "
                f"states of {per / 2**20:.1f} MiB ({d * per / GiB:.1f} GiB) for the verify; SGLang refuses "
                "to start. Verify fewer tokens, raise TP or mem_fraction_static"
            )
            return gp
        if gp.max_running is None or cap < gp.max_running:
            gp.max_running = cap
            gp.max_running_why = (
                f"the state pool's {slots} slots, {SGLANG_STATE_SLOTS_PER_REQUEST} per running request; "
                "raise mamba_full_memory_ratio or max_mamba_cache_size"
            )
    gp.kv_tokens_capacity = free // gp.kv_bytes_per_token if gp.kv_bytes_per_token else None
    return gp


def plan_cell(cell: Cell, gp: GroupPlan, gpu: GPUBudget | None) -> CellPlan:
    cp = CellPlan(cell.id, cell.group.id, True)
    reason = gp.error or context_reason(cell)
    if reason:
        cp.feasible, cp.reason = False, reason
        return cp
    per_req = cell.tokens_per_request
    cp.kv_tokens_needed = cell.concurrency * per_req
    in_flight = cell.concurrency
    if gp.kv_tokens_capacity is not None and gp.kv_bytes_per_token:
        budget = gp.kv_tokens_capacity * gp.kv_bytes_per_token
        # a hybrid's per-request state has its own pool when SGLang sizes it (max_running below)
        state = 0 if gp.state_pool_bytes_per_gpu else (gp.state_bytes_per_request or 0)
        per_req_bytes = per_req * gp.kv_bytes_per_token + state
        if per_req_bytes > budget:
            cp.feasible = False
            cp.reason = (
                f"one request needs {per_req} KV tokens ({per_req_bytes / GiB:.1f} GiB per GPU), "
                f"the KV cache holds {gp.kv_tokens_capacity} tokens ({budget / GiB:.1f} GiB per GPU)"
            )
            return cp
        fit = int(budget // per_req_bytes)
        if fit < cell.concurrency:
            in_flight = fit
            cp.note = (
                f"queues: needs {cp.kv_tokens_needed} KV tokens for {cell.concurrency} requests, holds "
                f"{gp.kv_tokens_capacity}: about {fit} of {cell.concurrency} in flight at once"
            )
    if gp.max_running is not None and cell.concurrency > gp.max_running:
        in_flight = min(in_flight, gp.max_running)
        cap = (
            f"queues: SGLang runs at most {gp.max_running} of {cell.concurrency} requests at once "
            f"({gp.max_running_why})"
        )
        cp.note = f"{cp.note}; {cap}" if cp.note else cap
    cp.in_flight = in_flight
    if (
        gpu is not None
        and gpu.bandwidth
        and gp.budget_bytes_per_gpu
        and gp.roofline_kv_bytes_per_token is not None
    ):
        cp.roofline_tokens_per_s = roofline_tokens_per_s(gp, cell, gpu)
    est = None
    if gp.costs is not None and gp.backend == "hf":
        est = eta.cpu_round(cell, gp.costs)
    elif gp.costs is not None and gp.budget_bytes_per_gpu and gpu is not None and gpu.bandwidth:
        est = eta.gpu_round(cell, gp.costs, gpu.bandwidth, peak_flops(gpu)[0], in_flight, gpu.link)
    if est is not None:
        cp.round_s, cp.ttft_s = est.round_s, est.ttft_s
        cp.eta_s, cp.eta_from = eta.cell_eta_s(cell, est.round_s), "model"
    return cp


def peak_flops(gpu: GPUBudget) -> tuple[float, str]:
    """(dense BF16 FLOP/s the plan uses, where it comes from): given, by the GPU's name, else
    eta.PEAK_FLOPS, said to be an assumption."""
    if gpu.flops:
        return gpu.flops, gpu.flops_source or "given"
    known = eta.known_peak_flops(gpu.name)
    if known:
        return known, f"datasheet value for {gpu.name}"
    return eta.PEAK_FLOPS, (
        f"ASSUMED {eta.PEAK_FLOPS / 1e12:.0f} TFLOP/s (H100/H200 class): no GPU name to look up; prefill "
        "and compute-bound steps scale with it: give --specbench-gpu-flops or --specbench-gpu NAME"
    )


def roofline_tokens_per_s(gp: GroupPlan, cell: Cell, gpu: GPUBudget) -> float:
    """Decode bound without speculation: C tokens per step, a step reads every weight of the
    target on a GPU once plus the batch's KV cache (mean length: prompt + half the output). A draft
    model's weights are not in it (a draft = target oracle would otherwise halve the bound)."""
    assert gp.roofline_bytes_per_step is not None and gp.roofline_kv_bytes_per_token is not None
    assert gpu.bandwidth
    kv = cell.concurrency * (cell.context_tokens + cell.output_tokens / 2) * gp.roofline_kv_bytes_per_token
    step = (gp.roofline_bytes_per_step + kv) / gpu.bandwidth
    return cell.concurrency / step


# ------------------------------------------------------------------------------ the plan


@dataclass
class Plan:
    gpu: GPUBudget | None
    groups: dict[str, GroupPlan]
    cells: dict[str, CellPlan]
    # the drift sentinels' planned seconds (their baselines' restarts and rounds), set by the
    # schedule that plans them (plugin/sentinel.py); in eta_s
    sentinels_s: float = 0.0
    # their baselines' engine restarts, {"brackets": N, "sentinels": M}: beside the groups' starts
    restarts: dict[str, int] = dataclasses.field(default_factory=dict)
    # the results JSON (--specbench-plan-from) the plan took measured values from; "" for none
    previous_source: str = ""

    def skip_reason(self, cell: Cell) -> str | None:
        cp = self.cells.get(cell.id)
        return None if cp is None or cp.feasible else cp.reason

    def _cells(self, selected: list[str] | None) -> list[CellPlan]:
        want = None if selected is None else set(selected)
        return [c for c in self.cells.values() if want is None or c.cell in want]

    def group_eta_s(self, group: str, selected: list[str] | None = None, first_start: bool = False) -> float:
        """The group's planned engine start plus its (selected, runnable) cells' ETAs; with
        ``first_start`` the start is its process's first (sglang's import, cold kernel caches).
        Cells without an estimate count 0."""
        gp = self.groups[group]
        cells = sum(c.eta_s or 0.0 for c in self._cells(selected) if c.group == group and c.feasible)
        return gp.start_s + (gp.first_start_extra_s if first_start else 0.0) + cells

    def starts_s(self, groups: list[str]) -> float:
        """Engine starts of these groups in one process, in this order: each start, plus the
        first-start extra of the first group of each backend."""
        seen: set[str] = set()
        total = 0.0
        for g in groups:
            gp = self.groups[g]
            total += gp.start_s
            if gp.backend not in seen:
                seen.add(gp.backend)
                total += gp.first_start_extra_s
        return total

    def started_groups(self, selected: list[str] | None = None) -> list[str]:
        """Groups with a runnable selected cell, in the order of their first cell."""
        out: list[str] = []
        for c in self._cells(selected):
            if c.feasible and c.group not in out:
                out.append(c.group)
        return out

    def eta_s(self, selected: list[str] | None = None) -> float:
        """Serial, one process: every runnable cell, every engine start and the drift sentinels."""
        cells = sum(c.eta_s or 0.0 for c in self._cells(selected) if c.feasible)
        return cells + self.starts_s(self.started_groups(selected)) + self.sentinels_s

    def as_dict(self, selected: list[str] | None = None) -> dict[str, Any]:
        cells = self._cells(selected)
        used = self.started_groups(selected)
        groups = []
        for g in self.groups.values():
            d = {k: v for k, v in dataclasses.asdict(g).items() if k != "costs"}
            groups.append(d | {"starts": g.group in used, "eta_s": self.group_eta_s(g.group, selected)})
        return {
            "gpu": None if self.gpu is None else dataclasses.asdict(self.gpu),
            "engine_starts": len(used),
            "eta_s": self.eta_s(selected),
            "cells_eta_s": sum(c.eta_s or 0.0 for c in cells if c.feasible),
            "starts_eta_s": self.starts_s(used),
            "sentinels_eta_s": self.sentinels_s,
            "baseline_restarts": dict(self.restarts),
            "groups": groups,
            "cells": [dataclasses.asdict(c) for c in cells],
        }


def make_plan(
    cells: list[Cell],
    gpu: GPUBudget | None,
    previous: dict[str, Any] | None = None,
    gpu_backends: frozenset[str] = frozenset({"sglang"}),
    timeout_s: float | None = None,
    interleaved: dict[str, str] | None = None,
    previous_source: str = "",
) -> Plan:
    """The plan of ``cells``; ``timeout_s`` overrides every cell's time limit (as
    --specbench-timeout does): a cell planned to run past its limit gets a note saying so.
    ``interleaved``: cell id -> the baseline cell whose rounds run interleaved with it (the
    cell's ETA includes them)."""
    groups: dict[str, GroupPlan] = {}
    out: dict[str, CellPlan] = {}
    for c in cells:
        if c.group.id not in groups:
            groups[c.group.id] = plan_group(c.group, gpu, gpu_backends, previous, previous_source)
        out[c.id] = plan_cell(c, groups[c.group.id], gpu)
    if previous:
        apply_previous(
            out,
            previous,
            groups,
            {c.id: c.fingerprint() for c in cells},
            {c.group.id: (c.method.backend, c.method.model.path) for c in cells},
        )
    for cid, base in (interleaved or {}).items():
        cp, bp = out.get(cid), out.get(base)
        if cp is not None and bp is not None and cp.eta_s is not None and bp.eta_s is not None:
            cp.eta_s += bp.eta_s
            cp.note = ((cp.note + "; ") if cp.note else "") + f"eta includes {base}'s interleaved rounds"
    for c in cells:
        cp, limit = out[c.id], timeout_s or c.workload.timeout_s
        if cp.feasible and cp.eta_s is not None and cp.eta_s > limit:
            over = (
                f"over its time limit: eta {cp.eta_s:.0f} s > {limit:g} s (the cell would fail and its "
                "engine be torn down; raise timeout_s or --specbench-timeout)"
            )
            cp.note = f"{cp.note}; {over}" if cp.note else over
    return Plan(gpu, groups, out, previous_source=previous_source if previous else "")
