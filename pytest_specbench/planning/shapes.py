"""Model shapes from a config.json (no weights needed): what the planner and the time model size.

Per GPU at a TP size:
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
No pytest and no heavy imports here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..matrix.cells import Model

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

    def _index_scale(self) -> float:
        c = self.param_counts()
        counted = (c["split"] + c["kv_proj"]) * self.dtype_bytes
        return self.weight_bytes() / counted if counted else 1.0  # index total vs counted

    def embedding_bytes_per_gpu(self, tp: int) -> int:
        """The embedding table on a GPU (vocab-parallel: split by TP); the LM head is as large."""
        return int(self.vocab * self.hidden / tp * self.dtype_bytes * self._index_scale())

    def weight_bytes_per_gpu(self, tp: int) -> int:
        """Split parameters / TP; KV projections by the KV heads each GPU holds."""
        c = self.param_counts()
        kv = c["kv_proj"] * self.kv_heads_per_gpu(tp) / self.kv_heads
        return int((c["split"] / tp + kv) * self.dtype_bytes * self._index_scale())


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
    from ..inputs import tinymodel

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
