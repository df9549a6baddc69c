"""Feasibility planner: memory, KV cache, TP and context checks before any engine starts.

From a model's config.json (no weights needed) this sizes, per GPU at a TP size:
- weights: the safetensors index's ``total_size`` when present, else counted from the
  config (embeddings, attention, MLP or MoE experts, LM head), split the way SGLang splits
  them (column/row parallel by TP; KV projections replicated when KV heads < TP);
- KV bytes per token = 2 (K and V) x full-attention layers x KV heads per GPU x head_dim x
  dtype bytes. Hybrid models (``layer_types``, ``full_attention_interval``,
  ``hybrid_override_pattern``) count only their full-attention layers, plus a fixed
  per-request state for the linear-attention (Gated DeltaNet) layers;
- TP as SGLang applies it: attention heads must divide by TP; KV heads must divide by TP
  or TP by KV heads, and when KV heads < TP every GPU holds one replicated KV head.
Architectures it cannot size (MLA: ``kv_lora_rank``) are reported as such, never sized.

SGLang 0.5.17 sizes the same way (read in its source): KV cell = KV heads per GPU x (head_dim +
v_head_dim) x full-attention layers x bytes (model_executor/pool_configurator.py; EAGLE/STANDALONE
scale it by the draft's layers, i.e. target + draft); KV budget = free memory after loading the
weights (target + draft) - memory before loading x (1 - mem_fraction_static)
(mem_cache/kv_cache_configurator.py). The plan ignores the CUDA context and NCCL buffers (about a
GiB per GPU), so its capacity is slightly optimistic; for hybrid models SGLang first splits
that budget between a pool of linear-attention state slots and the KV cache
(``sglang_state_pool``), and the plan does the same.

A cell needs concurrency x (context + output) KV tokens: it fits, queues (fewer requests
in flight than asked), or is skipped with a reason that names the numbers. Context beyond
the config's max_position_embeddings gets an engine override unless the model's
``context_length`` in the YAML caps it. No pytest and no heavy imports here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .matrix import Cell, EngineGroup, Model

GiB = 1024**3
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "fp8": 1,
    "int8": 1,
}
DEFAULT_MEM_FRACTION = 0.85  # backends other than sglang that set no mem_fraction_static
# HBM bandwidth (bytes/s) by GPU name fragment, for the roofline (vendor datasheets)
HBM_BANDWIDTH = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
    ("H20", 4.0e12),
    ("B200", 8.0e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100", 1.555e12),
    ("L40S", 0.864e12),
    ("A10G", 0.6e12),
)
PEAK_FLOPS = 989e12  # dense bf16, H100/H200 class: prefill bound for the ETA
ENGINE_START_S = {"sglang": 60.0, "hf": 2.0}  # ETA of a start without previous results (H200: 30-90 s)


KNOWN_LAYER_TYPES = {"full_attention", "attention", "sliding_attention", "linear_attention"}


class Unsupported(ValueError):
    """A model the planner cannot size; the message says why."""


# ------------------------------------------------------------------------------ shapes


@dataclass(frozen=True)
class Shape:
    """What the planner needs from a config.json."""

    arch: str
    layers: int
    full_attn_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    tied: bool
    dtype_bytes: int
    max_position: int | None
    linear_layers: int = 0
    linear_state_bytes: int = 0  # per request, all linear layers, whole model (split by TP)
    experts: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    q_gate: bool = False  # attn_output_gate: q_proj twice as wide
    index_weight_bytes: int | None = None  # safetensors index total_size
    linear_shape: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # k heads, v heads, k dim, v dim, conv
    mtp_layers: int = 0  # mtp_num_hidden_layers / num_nextn_predict_layers: the model's own MTP draft

    def mtp_draft(self) -> Shape:
        """The draft SGLang builds when a model with MTP layers is its own draft (Qwen3.5 ->
        Qwen3_5ForCausalLMMTP): those layers, full attention, no linear-attention state.
        Embeddings and LM head are counted though the MTP module shares them (conservative)."""
        return dataclasses.replace(
            self,
            layers=self.mtp_layers,
            full_attn_layers=self.mtp_layers,
            linear_layers=0,
            linear_state_bytes=0,
            index_weight_bytes=None,
            mtp_layers=0,
        )

    def kv_heads_per_gpu(self, tp: int) -> int:
        return max(1, self.kv_heads // tp)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """Per GPU: 2 (K and V) x full-attention layers x KV heads on that GPU x head_dim x bytes."""
        return 2 * self.full_attn_layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes

    def state_bytes_per_request(self, tp: int = 1) -> int:
        return math.ceil(self.linear_state_bytes / tp)

    def tp_error(self, tp: int) -> str | None:
        """SGLang 0.5.17's QKVParallelLinear (layers/linear.py): heads = divide(heads, tp); with
        tp >= KV heads each GPU holds 1 KV head and divide(tp, KV heads), else divide(KV heads, tp);
        ModelConfig.get_num_kv_heads = max(1, KV heads // tp)."""
        if self.heads % tp:
            return f"{self.heads} attention heads do not divide by TP={tp}"
        if self.kv_heads % tp and tp % self.kv_heads:
            return f"{self.kv_heads} KV heads: neither KV heads divide by TP={tp} nor TP by KV heads"
        return None

    def kv_note(self, tp: int) -> str | None:
        if self.kv_heads < tp:
            return (
                f"KV heads ({self.kv_heads}) < TP ({tp}): SGLang replicates them, each GPU holds 1 "
                f"KV head, so the KV cache per GPU is {tp // self.kv_heads}x what an even split gives"
            )
        return None

    def param_counts(self) -> dict[str, int]:
        """Parameters by how they split under TP (norms and biases ignored: < 0.1%)."""
        h, d = self.hidden, self.head_dim
        q = self.heads * d * (2 if self.q_gate else 1)
        attn_q_o = self.full_attn_layers * (h * q + self.heads * d * h)
        attn_kv = self.full_attn_layers * 2 * h * self.kv_heads * d
        if self.experts:
            mlp = self.layers * (
                self.experts * 3 * h * self.moe_intermediate
                + 3 * h * self.shared_intermediate
                + h * self.experts
            )
        else:
            mlp = self.layers * 3 * h * self.intermediate
        linear = self.linear_layers * self._linear_params()
        emb = self.vocab * h
        return {"split": attn_q_o + mlp + linear + emb + (0 if self.tied else emb), "kv_proj": attn_kv}

    def _linear_params(self) -> int:
        kh, vh, kd, vd, conv = self.linear_shape
        key, val = kh * kd, vh * vd
        # in_proj_qkvz + in_proj_ba + conv1d + out_proj (Gated DeltaNet)
        return (
            self.hidden * (2 * key + 2 * val)
            + self.hidden * 2 * vh
            + (2 * key + val) * conv
            + val * self.hidden
        )

    def weight_bytes(self) -> int:
        if self.index_weight_bytes:
            return self.index_weight_bytes
        c = self.param_counts()
        return (c["split"] + c["kv_proj"]) * self.dtype_bytes

    def weight_bytes_per_gpu(self, tp: int) -> int:
        """Split parameters / TP; KV projections by the KV heads each GPU holds."""
        c = self.param_counts()
        counted = (c["split"] + c["kv_proj"]) * self.dtype_bytes
        scale = self.weight_bytes() / counted if counted else 1.0  # index total vs counted
        kv = c["kv_proj"] * self.kv_heads_per_gpu(tp) / self.kv_heads
        return int((c["split"] / tp + kv) * self.dtype_bytes * scale)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    tc = cfg.get("text_config")
    return {**cfg, **tc} if isinstance(tc, dict) else cfg


def shape_from_config(cfg: dict[str, Any], index_total: int | None = None) -> Shape:
    """Size a model from its config dict; :class:`Unsupported` when it cannot be sized right."""
    c = _text_config(cfg)
    arch = (c.get("architectures") or [c.get("model_type", "?")])[0]
    if c.get("kv_lora_rank") or c.get("q_lora_rank"):
        raise Unsupported(
            f"{arch}: multi-head latent attention (MLA, kv_lora_rank={c.get('kv_lora_rank')}) "
            "caches a compressed latent, not K and V per head; the planner does not size it"
        )
    try:
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        hidden = int(c["hidden_size"])
        vocab = int(c["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise Unsupported(f"{arch}: config lacks {e}; cannot size it") from None
    kv = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16").removeprefix("torch.")
    if dtype not in DTYPE_BYTES:
        raise Unsupported(f"{arch}: dtype {dtype!r} unknown; known: {', '.join(DTYPE_BYTES)}")
    full, linear = layers, 0
    if isinstance(c.get("layer_types"), list):
        types = c["layer_types"]
        full = sum(1 for t in types if t in ("full_attention", "attention", "sliding_attention"))
        linear = sum(1 for t in types if t in ("linear_attention",))
        other = len(types) - full - linear
        if other:
            raise Unsupported(
                f"{arch}: layer_types holds {other} layers of kinds the planner does not size "
                f"({sorted(set(types) - KNOWN_LAYER_TYPES)})"
            )
    elif c.get("full_attention_interval"):
        k = int(c["full_attention_interval"])
        full = sum(1 for i in range(layers) if (i + 1) % k == 0)
        linear = layers - full
    elif isinstance(c.get("hybrid_override_pattern"), str):
        pat = c["hybrid_override_pattern"]
        full = pat.count("*")
        if pat.count("M"):
            raise Unsupported(
                f"{arch}: Mamba-2 layers ({pat.count('M')}) have a state the planner does not size"
            )
    kh = int(c.get("linear_num_key_heads") or 0)
    vh = int(c.get("linear_num_value_heads") or 0)
    kd = int(c.get("linear_key_head_dim") or 0)
    vd = int(c.get("linear_value_head_dim") or 0)
    conv = int(c.get("linear_conv_kernel_dim") or 0)
    if linear and not (kh and vh and kd and vd):
        raise Unsupported(
            f"{arch}: {linear} linear-attention layers without linear_num_*_heads / "
            "linear_*_head_dim; cannot size their state"
        )
    # Gated DeltaNet state per request and layer: recurrent state (v heads x k dim x v dim, in
    # mamba_ssm_dtype, float32 by default) + conv state ((2 k + v) channels x (kernel - 1))
    ssm_bytes = DTYPE_BYTES.get(str(c.get("mamba_ssm_dtype") or "float32"), 4)
    per_layer = vh * kd * vd * ssm_bytes + (2 * kh * kd + vh * vd) * max(conv - 1, 0) * DTYPE_BYTES[dtype]
    shape = Shape(
        arch=arch,
        layers=layers,
        full_attn_layers=full,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        hidden=hidden,
        intermediate=int(c.get("intermediate_size") or 0),
        vocab=vocab,
        tied=bool(c.get("tie_word_embeddings", False)),
        dtype_bytes=DTYPE_BYTES[dtype],
        max_position=int(c["max_position_embeddings"]) if c.get("max_position_embeddings") else None,
        linear_layers=linear,
        linear_state_bytes=linear * per_layer,
        experts=int(c.get("num_experts") or c.get("n_routed_experts") or 0),
        moe_intermediate=int(c.get("moe_intermediate_size") or 0),
        shared_intermediate=int(c.get("shared_expert_intermediate_size") or 0),
        q_gate=bool(c.get("attn_output_gate", False)),
        index_weight_bytes=index_total,
        linear_shape=(kh, vh, kd, vd, conv),
        mtp_layers=int(c.get("mtp_num_hidden_layers") or c.get("num_nextn_predict_layers") or 0),
    )
    return shape


def read_config(model: Model) -> tuple[dict[str, Any], int | None, str]:
    """(config dict, safetensors index total_size or None, where it came from)."""
    from . import tinymodel

    if tinymodel.is_embedded(model.path):
        cfg = tinymodel.embedded_config(model.path)
        return cfg, None, model.path
    p = Path(model.path)
    if p.is_dir():
        cfg = json.loads((p / "config.json").read_text())
        idx = p / "model.safetensors.index.json"
        total = None
        if idx.is_file():
            total = (json.loads(idx.read_text()).get("metadata") or {}).get("total_size")
        return cfg, int(total) if total else None, str(p / "config.json")
    # a hub id: its config.json from the local hub cache (collection never downloads or
    # imports transformers)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model.path, "config.json")
    except Exception:
        cached = None
    if not isinstance(cached, str):
        raise Unsupported(f"{model.path}: no config.json (not a directory, not in the hub cache)")
    return json.loads(Path(cached).read_text()), None, cached


_SHAPES: dict[str, Shape | str] = {}


def model_shape(model: Model) -> Shape:
    """Cached per model path; raises :class:`Unsupported` (with the reason) when unsizable."""
    if model.path not in _SHAPES:
        try:
            cfg, total, _ = read_config(model)
            _SHAPES[model.path] = shape_from_config(cfg, total)
        except Unsupported as e:
            _SHAPES[model.path] = str(e)
        except Exception as e:  # no config readable: say so, do not guess
            _SHAPES[model.path] = f"cannot read the config of {model.path}: {type(e).__name__}: {e}"
    v = _SHAPES[model.path]
    if isinstance(v, str):
        raise Unsupported(v)
    return v


# ------------------------------------------------------------------------------ context


@dataclass(frozen=True)
class EngineContext:
    length: int | None  # what the engine gets (None: its own default)
    native: int | None  # the config's max_position_embeddings
    override: bool  # length > native: max_position_embeddings overridden


def engine_context(group: EngineGroup) -> EngineContext:
    """The context length an engine gets: the model's cap from the YAML when set, else what
    its cells need, overriding max_position_embeddings when that is more than the config's."""
    m = group.method.model
    try:
        native = model_shape(m).max_position
    except Unsupported:
        native = None
    if m.context_length:
        return EngineContext(m.context_length, native, bool(native and m.context_length > native))
    need = group.context_needed
    if native and need > native:
        return EngineContext(need, native, True)
    return EngineContext(None, native, False)


def context_reason(cell: Cell) -> str | None:
    m = cell.method.model
    need = cell.context_tokens + cell.output_tokens
    if m.context_length and need > m.context_length:
        return (
            f"needs {need} tokens of context ({cell.context_tokens} prompt + {cell.output_tokens} output); "
            f"models.{m.name}.context_length caps it at {m.context_length} (remove the cap to let the "
            "engine override max_position_embeddings)"
        )
    return None


# ------------------------------------------------------------------------------ memory


@dataclass(frozen=True)
class GPUBudget:
    memory_bytes: int
    bandwidth: float | None  # bytes/s; None: unknown (no roofline, no decode ETA)
    name: str = "assumed"
    bandwidth_source: str = ""


def bandwidth_for(name: str) -> float | None:
    """HBM bandwidth of a GPU by its name (HBM_BANDWIDTH), None for a GPU not in the table."""
    for frag, bw in HBM_BANDWIDTH:
        if frag.lower() in name.lower():
            return bw
    return None


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


@dataclass
class CellPlan:
    cell: str
    group: str
    feasible: bool
    reason: str | None = None
    note: str | None = None
    kv_tokens_needed: int | None = None
    roofline_tokens_per_s: float | None = None
    eta_s: float | None = None


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


def _mem_fraction(group: EngineGroup, gpu: GPUBudget) -> tuple[float, str]:
    v = dict(group.method.engine_args).get("mem_fraction_static")
    if isinstance(v, (int, float)):
        return float(v), "set in engine_args"
    if group.method.backend == "sglang":
        return sglang_mem_fraction(gpu.memory_bytes, group.tp), "SGLang's default for this GPU size"
    return DEFAULT_MEM_FRACTION, "assumed"


def plan_group(
    group: EngineGroup, gpu: GPUBudget | None, gpu_backends: frozenset[str] = frozenset({"sglang"})
) -> GroupPlan:
    m = group.method
    gp = GroupPlan(group.id, m.name, m.backend, group.tp, m.model.name)
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
    gp.kv_bytes_per_token = t.kv_bytes_per_token(group.tp) + (d.kv_bytes_per_token(group.tp) if d else 0)
    gp.state_bytes_per_request = t.state_bytes_per_request(group.tp) + (
        d.state_bytes_per_request(group.tp) if d else 0
    )
    gp.weight_bytes_per_gpu = t.weight_bytes_per_gpu(group.tp) + (
        d.weight_bytes_per_gpu(group.tp) if d else 0
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
    if m.backend == "sglang":
        args = dict(m.engine_args)
        if args.get("max_running_requests"):
            gp.max_running, gp.max_running_why = int(args["max_running_requests"]), "max_running_requests"
        elif m.speculative is not None:
            gp.max_running = SGLANG_SPEC_MAX_RUNNING
            gp.max_running_why = "SGLang's default with speculative decoding; set max_running_requests"
    if gp.state_bytes_per_request and m.backend == "sglang":
        state, slots, how = sglang_state_pool(group, free, gp.state_bytes_per_request, gp.max_running)
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
        if gp.max_running is None or cap < gp.max_running:
            gp.max_running = cap
            gp.max_running_why = (
                f"the state pool's {slots} slots, {SGLANG_STATE_SLOTS_PER_REQUEST} per running request; "
                "raise mamba_full_memory_ratio or max_mamba_cache_size"
            )
    gp.kv_tokens_capacity = free // gp.kv_bytes_per_token if gp.kv_bytes_per_token else None
    return gp


# SGLang 0.5.17 (mem_cache/kv_cache_configurator.py): state slots per running request, and the
# max running requests its speculative hooks set when none is given
SGLANG_STATE_SLOTS_PER_REQUEST = 3
SGLANG_SPEC_MAX_RUNNING = 48
NGRAM_DEFAULT_DRAFT_TOKENS = 12


def sglang_state_pool(
    group: EngineGroup, free: int, per_req: int, running: int | None
) -> tuple[int, int, str]:
    """Bytes per GPU SGLang 0.5.17 gives a hybrid model's linear-attention (GDN/Mamba) state pool
    out of the memory left after the weights; the KV cache gets the rest. Without speculation
    the pool is free x r / (1 + r), r = mamba_full_memory_ratio (0.9): the KV cache gets
    1 / 1.9 of it. With speculation the same budget also holds D draft-token states per running
    request (``running``: the group's max running requests), so fewer slots are made and the
    unused part goes back to the KV cache. Returns (bytes, slots, note)."""
    args = dict(group.method.engine_args)
    r = float(args.get("mamba_full_memory_ratio", 0.9))
    spec = group.method.speculative
    slots = args.get("max_mamba_cache_size")
    budget = free * r / (1 + r)
    if spec is None:
        k = int(slots) if slots else int((budget - per_req) // per_req)
        note = f"state pool: {k + 1} slots of {per_req / 2**20:.1f} MiB (SGLang's split)"
        return (k + 1) * per_req, k, note
    d = spec.num_draft_tokens or (
        NGRAM_DEFAULT_DRAFT_TOKENS if spec.algorithm == "ngram" else (spec.num_steps or 3) + 1
    )
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


def plan_cell(cell: Cell, gp: GroupPlan, gpu: GPUBudget | None) -> CellPlan:
    cp = CellPlan(cell.id, cell.group.id, True)
    reason = gp.error or context_reason(cell)
    if reason:
        cp.feasible, cp.reason = False, reason
        return cp
    per_req = cell.tokens_per_request
    cp.kv_tokens_needed = cell.concurrency * per_req
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
            cp.note = (
                f"queues: needs {cp.kv_tokens_needed} KV tokens for {cell.concurrency} requests, holds "
                f"{gp.kv_tokens_capacity}: about {fit} of {cell.concurrency} in flight at once"
            )
    if gp.max_running is not None and cell.concurrency > gp.max_running:
        cap = (
            f"queues: SGLang runs at most {gp.max_running} of {cell.concurrency} requests at once "
            f"({gp.max_running_why})"
        )
        cp.note = f"{cp.note}; {cap}" if cp.note else cap
    if (
        gpu is not None
        and gpu.bandwidth
        and gp.budget_bytes_per_gpu
        and gp.roofline_kv_bytes_per_token is not None
    ):
        cp.roofline_tokens_per_s = roofline_tokens_per_s(gp, cell, gpu)
        cp.eta_s = _eta(cell, gp, cp.roofline_tokens_per_s)
    return cp


def roofline_tokens_per_s(gp: GroupPlan, cell: Cell, gpu: GPUBudget) -> float:
    """Decode bound without speculation: C tokens per step, a step reads every weight of the
    target on a GPU once plus the batch's KV cache (mean length: prompt + half the output). A draft
    model's weights are not in it (a draft = target oracle would otherwise halve the bound)."""
    assert gp.roofline_bytes_per_step is not None and gp.roofline_kv_bytes_per_token is not None
    assert gpu.bandwidth
    kv = cell.concurrency * (cell.context_tokens + cell.output_tokens / 2) * gp.roofline_kv_bytes_per_token
    step = (gp.roofline_bytes_per_step + kv) / gpu.bandwidth
    return cell.concurrency / step


def _eta(cell: Cell, gp: GroupPlan, bound: float | None) -> float | None:
    if not bound:
        return None
    w = cell.workload
    n = w.requests_per_round(cell.concurrency) * (w.rounds + w.warmup)
    turns = 5 if w.kind == "agentic" else 1
    decode = n * turns * cell.output_tokens / bound
    prefill = 2 * (gp.weight_bytes_per_gpu or 0) / 2 * n * turns * cell.context_tokens / PEAK_FLOPS
    return decode + prefill


# ------------------------------------------------------------------------------ the plan


@dataclass
class Plan:
    gpu: GPUBudget | None
    groups: dict[str, GroupPlan]
    cells: dict[str, CellPlan]

    def skip_reason(self, cell: Cell) -> str | None:
        cp = self.cells.get(cell.id)
        return None if cp is None or cp.feasible else cp.reason

    def as_dict(self, selected: list[str] | None = None) -> dict[str, Any]:
        import dataclasses

        cells = [c for c in self.cells.values() if selected is None or c.cell in selected]
        used = {c.group for c in cells if c.feasible}
        return {
            "gpu": None if self.gpu is None else dataclasses.asdict(self.gpu),
            "engine_starts": len(used),
            "eta_s": sum(c.eta_s or 0 for c in cells if c.feasible)
            + sum(ENGINE_START_S.get(g.backend, 60.0) for g in self.groups.values() if g.group in used),
            "groups": [dataclasses.asdict(g) | {"starts": g.group in used} for g in self.groups.values()],
            "cells": [dataclasses.asdict(c) for c in cells],
        }


def make_plan(
    cells: list[Cell],
    gpu: GPUBudget | None,
    previous: dict[str, Any] | None = None,
    gpu_backends: frozenset[str] = frozenset({"sglang"}),
) -> Plan:
    groups: dict[str, GroupPlan] = {}
    out: dict[str, CellPlan] = {}
    for c in cells:
        if c.group.id not in groups:
            groups[c.group.id] = plan_group(c.group, gpu, gpu_backends)
        out[c.id] = plan_cell(c, groups[c.group.id], gpu)
    if previous:
        apply_previous(out, previous)
    return Plan(gpu, groups, out)


def apply_previous(cells: dict[str, CellPlan], doc: dict[str, Any]) -> None:
    """ETA from a previous results JSON: each cell's measured rounds, scaled to all rounds."""
    for b in doc.get("benchmarks", []):
        cp = cells.get(b.get("param"))
        if cp is None:
            continue
        data = (b.get("stats") or {}).get("data") or []
        warm = (b.get("options") or {}).get("warmup", 0) or 0
        if data:
            cp.eta_s = sum(data) * (len(data) + warm) / len(data)


def format_plan(plan: Plan, selected: list[str] | None = None) -> list[str]:
    d = plan.as_dict(selected)
    g = d["gpu"]
    lines = [
        f"GPU: {g['name']}, {g['memory_bytes'] / GiB:.1f} GiB, "
        + (
            f"{g['bandwidth'] / 1e12:.2f} TB/s ({g.get('bandwidth_source') or 'given'})"
            if g.get("bandwidth")
            else "bandwidth unknown (--specbench-gpu-bandwidth TB/s gives a roofline and decode ETAs)"
        )
        if g
        else "GPU: unknown (no NVML, no --specbench-gpu-memory)"
    ]
    for gp in d["groups"]:
        head = f"group {gp['group']} ({gp['backend']}, TP={gp['tp']}, model {gp['model']})"
        if gp["error"]:
            lines.append(f"{head}: CANNOT RUN: {gp['error']}")
        else:
            parts = []
            if gp["weight_bytes_per_gpu"] is not None:
                parts.append(f"weights {gp['weight_bytes_per_gpu'] / GiB:.2f} GiB/GPU")
            if gp["kv_bytes_per_token"] is not None:
                parts.append(f"KV {gp['kv_bytes_per_token'] / 1024:.1f} KiB/token/GPU")
            if gp["kv_tokens_capacity"] is not None:
                parts.append(f"KV capacity {gp['kv_tokens_capacity']:,} tokens")
            if gp["context_length"]:
                parts.append(f"context {gp['context_length']}")
            lines.append(
                f"{head}: {', '.join(parts) or '-'}{'' if gp['starts'] else ' (no start: nothing runs)'}"
            )
        lines += [f"    note: {n}" for n in gp["notes"]]
    for c in d["cells"]:
        if not c["feasible"]:
            lines.append(f"  SKIP {c['cell']}: {c['reason']}")
        else:
            eta = (
                ("eta <1 s" if c["eta_s"] < 0.5 else f"eta {c['eta_s']:.0f} s")
                if c["eta_s"] is not None
                else "eta ?"
            )
            bound = (
                f", roofline {c['roofline_tokens_per_s']:,.0f} tok/s" if c["roofline_tokens_per_s"] else ""
            )
            lines.append(f"  run  {c['cell']}: {eta}{bound}{'; ' + c['note'] if c['note'] else ''}")
    n_run = sum(1 for c in d["cells"] if c["feasible"])
    unknown = sum(1 for c in d["cells"] if c["feasible"] and c["eta_s"] is None)
    eta = f"ETA {d['eta_s'] / 60:.1f} min"
    if unknown:
        eta += (
            f" plus {unknown} cells without an estimate (no GPU roofline for them; "
            "--specbench-plan-from a previous results JSON gives measured times)"
        )
    lines.append(
        f"cells: {n_run} to run, {len(d['cells']) - n_run} skipped; "
        f"engine starts: {d['engine_starts']}; {eta}"
    )
    return lines
