"""The plan's records: the GPU it sizes against (``GPUBudget``), per engine group its sizes, caps
and planned start (``GroupPlan``), per cell whether it runs and its ETA (``CellPlan``). Plain
data, filled by plan.py and previous.py (which import this module, not each other). No pytest."""

from __future__ import annotations

from dataclasses import dataclass, field

from .eta import GroupCosts
from .interconnect import Link


@dataclass(frozen=True)
class GPUBudget:
    memory_bytes: int
    bandwidth: float | None  # bytes/s; None: unknown (no roofline, no decode ETA)
    name: str = "assumed"
    bandwidth_source: str = ""
    flops: float | None = None  # dense BF16 FLOP/s; None: by the name, else eta.PEAK_FLOPS (said so)
    flops_source: str = ""
    link: Link | None = None  # the GPUs' interconnect; None: NVLink (what the calibration ran on)
    link_source: str = ""
    memory_source: str = ""


@dataclass
class GroupPlan:
    group: str
    method: str
    backend: str
    tp: int
    model: str
    error: str | None = None  # the group cannot run at all (TP, weights larger than the budget)
    unsized: str | None = None  # why the planner could not size the model (MLA, no config)
    notes: list[str] = field(default_factory=list)
    kv_bytes_per_token: int | None = None  # per GPU, target (+ draft)
    state_bytes_per_request: int | None = None
    weight_bytes_per_gpu: int | None = None  # target (+ draft)
    budget_bytes_per_gpu: int | None = None  # GPU memory x mem_fraction_static
    mem_fraction_static: float | None = None
    kv_tokens_capacity: int | None = None
    state_pool_bytes_per_gpu: int | None = None  # hybrid models: SGLang's linear-attention state pool
    max_running: int | None = None  # requests SGLang runs at once (None: no cap the plan knows)
    max_running_why: str | None = None
    context_length: int | None = None
    native_context_length: int | None = None
    context_override: bool = False
    roofline_bytes_per_step: int | None = None  # the target's weights read per decode step (per GPU)
    roofline_kv_bytes_per_token: int | None = None  # the target's KV bytes per token (per GPU)
    start_s: float = 0.0  # planned engine start, when it is not the first start of its process
    first_start_extra_s: float = 0.0  # what the first start of a process adds (import, cold caches)
    start_from: str = "model"  # model | measured | fallback (a start the model cannot size)
    accept_length: float | None = None  # tokens per verify step the cells' ETAs assume
    accept_from: str | None = None  # forced | expected | measured | oracle | upper bound
    step_why: str | None = None  # how the verify width was found
    costs: GroupCosts | None = field(default=None, repr=False)  # the time model's inputs


@dataclass
class CellPlan:
    cell: str
    group: str
    feasible: bool
    reason: str | None = None
    note: str | None = None
    kv_tokens_needed: int | None = None
    roofline_tokens_per_s: float | None = None
    eta_s: float | None = None  # warm-up and timed rounds (None: no estimate)
    eta_from: str | None = None  # model | measured
    round_s: float | None = None
    ttft_s: float | None = None  # planned TTFT p50 of a round
    in_flight: int | None = None  # requests the engine runs at once (concurrency, or a cap)
