#!/usr/bin/env python3
"""Write a model directory for SGLang runs with load_format="dummy" (random weights).

The tokenizer is the project's own recipe (pytest_specbench.inputs.tinymodel).

No weights are written: SGLang's dummy loader fills every parameter from
torch.Generator.manual_seed(1234) with uniform(-1e-3, 1e-3), so two models with the
same config get identical weights.

    python3 scripts/make_dummy_model.py OUT [--preset qwen3-1.7b] [--context-length N]
                                [--tokenizer bpe|none] [--tokenizer-vocab 8192]
                                [--vocab-size N]
                                [--eagle3-draft DIR] [--dflash-draft DIR] [--dspark-draft DIR]

OUT gets config.json (Qwen3ForCausalLM, in the format of the real Qwen3 checkpoints),
generation_config.json and, with --tokenizer bpe (default), a byte-level BPE tokenizer
(tokenizer.json + tokenizer_config.json, ChatML chat template with Qwen3's enable_thinking
switch) trained here on a seeded synthetic corpus; its vocabulary is smaller than the model's
vocab_size, which is allowed.
--eagle3-draft / --dflash-draft / --dspark-draft also write draft-model directories sized for OUT
(the DSpark draft is the DFlash layout with SGLang's Qwen3DSparkModel head: a vanilla Markov head of
rank 64 and a confidence head, gamma 7).

Hybrid presets (qwen3.5-*): a text-only Qwen3.5 config (Qwen3_5ForCausalLM, model_type
qwen3_5_text): Gated DeltaNet (linear attention) layers with every
full_attention_interval-th layer full attention (gated output, partial RoPE), dense MLP,
vocab_size 248320 and max_position_embeddings 262144 unless given. No MTP weights exist
(mtp_num_hidden_layers is only recorded). Their --dflash-draft / --dspark-draft are dense
Qwen3-layer block drafters of the target's width (hidden size, heads, head_dim, vocabulary), as the
public DFlash drafts of Qwen3.5 are: no linear-attention layers, no output gate; SGLang gives them
the target's embedding and LM head, so they hold only their layers and the projection of the
target's hidden states (--dflash-layers of them, 1 by default).

Needs only the `tokenizers` package (and nothing when --tokenizer none).
Usage: python3 scripts/make_dummy_model.py OUT --preset qwen3-1.7b --eagle3-draft D --dflash-draft D
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PRESETS = {
    # hidden, intermediate, layers, heads, kv_heads, head_dim, tie_embeddings
    "tiny": (512, 1536, 4, 8, 4, 64, True),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, 128, True),
    # Qwen3-1.7B with 4 KV heads: at TP8 SGLang replicates them (1 per GPU, 2x the KV of an even split)
    "qwen3-1.7b-kv4": (2048, 6144, 28, 16, 4, 128, True),
    "qwen3-4b": (2560, 9728, 36, 32, 8, 128, True),
    "qwen3-8b": (4096, 12288, 36, 32, 8, 128, False),
}
# Hybrid (Gated DeltaNet + full attention) presets, text-only Qwen3.5 layout.
# "qwen3.5-27b-hybrid" has the shapes of Qwen3.5-27B's language model (dense MLP);
# "qwen3.5-hybrid-small" keeps its layer pattern (3 linear : 1 full) at ~1.2B params.
HYBRID_PRESETS = {
    "qwen3.5-27b-hybrid": dict(
        hidden_size=5120,
        intermediate_size=17408,
        num_hidden_layers=64,
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=48,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
        tie_word_embeddings=False,
    ),
    "qwen3.5-hybrid-small": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
        tie_word_embeddings=True,
    ),
}
HYBRID_VOCAB_SIZE = 248320  # Qwen3.5's embedding rows
HYBRID_CONTEXT = 262144  # Qwen3.5's max_position_embeddings
VOCAB_SIZE = 151936  # Qwen3's embedding rows
EOS_ID, MASK_ID = 0, 3  # ids of <|endoftext|> and <|mask|> in the BPE tokenizer below


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def target_config(preset, context_length, vocab_size=VOCAB_SIZE):
    from pytest_specbench.inputs.tinymodel import qwen3_config

    hidden, inter, layers, heads, kv, head_dim, tie = PRESETS[preset]
    return qwen3_config(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=vocab_size,
        context_length=context_length,
        tie=tie,
        dtype="bfloat16",
    )


def hybrid_config(
    preset, context_length, vocab_size=HYBRID_VOCAB_SIZE, rope_theta=10000000, partial_rotary_factor=0.25
):
    """Text-only Qwen3.5 config as sglang 0.5.17 loads it: model_type qwen3_5_text ->
    sglang.srt.configs.qwen3_5.Qwen3_5TextConfig (a Qwen3NextConfig), architecture
    Qwen3_5ForCausalLM (sglang/srt/models/qwen3_5_text.py). The layer pattern comes from
    full_attention_interval (Qwen3NextConfig.layers_block_type); layer_types is written
    too, as in the real checkpoints. rope_parameters has no mrope_section: text-only 1-D
    RoPE (the real checkpoints' interleaved M-RoPE equals it for text positions)."""
    h = dict(HYBRID_PRESETS[preset])
    n, k = h["num_hidden_layers"], h["full_attention_interval"]
    rope = {"rope_type": "default", "rope_theta": rope_theta, "partial_rotary_factor": partial_rotary_factor}
    cfg = {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,  # q_proj is 2x wide (query + sigmoid output gate)
        "bos_token_id": EOS_ID,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "layer_types": ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)],
        "mamba_ssm_dtype": "float32",  # SSM state dtype, as in the real checkpoints
        "max_position_embeddings": context_length,
        "mlp_only_layers": [],
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "partial_rotary_factor": partial_rotary_factor,
        "rms_norm_eps": 1e-06,
        "rope_theta": rope_theta,
        "rope_parameters": rope,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    cfg.update(h)
    return dict(sorted(cfg.items(), key=lambda kv: (kv[0] not in ("architectures", "model_type"), kv[0])))


def is_hybrid(preset):
    return preset in HYBRID_PRESETS


def eagle3_config(t):
    # Shaped like the public EAGLE3 drafts for Qwen3 (one Llama decoder layer).
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "bos_token_id": t["bos_token_id"],
        "eos_token_id": t["eos_token_id"],
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": t["intermediate_size"],
        "max_position_embeddings": t["max_position_embeddings"],
        "num_attention_heads": t["num_attention_heads"],
        "num_hidden_layers": 1,
        "num_key_value_heads": t["num_key_value_heads"],
        "rms_norm_eps": t["rms_norm_eps"],
        "rope_theta": t["rope_theta"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": t["vocab_size"],
        # == vocab_size: no draft->target token map (d2t) is needed
        "draft_vocab_size": t["vocab_size"],
    }


HYBRID_ONLY_KEYS = (
    "attn_output_gate",
    "full_attention_interval",
    "layer_types",
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "mamba_ssm_dtype",
    "mlp_only_layers",
    "mtp_num_hidden_layers",
    "mtp_use_dedicated_embeddings",
    "partial_rotary_factor",
    "rope_parameters",
)


def dense_draft_base(t):
    """A hybrid target's config as a dense Qwen3 layer stack of its width (what a DFlash draft of a
    Qwen3.5 model is built from); a dense target's config as it is."""
    if t.get("model_type") != "qwen3_5_text":
        return dict(t)
    c = {k: v for k, v in t.items() if k not in HYBRID_ONLY_KEYS}
    c.update({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rope_scaling": None})
    return c


def dflash_config(t, draft_layers=1, block_size=16):
    # Shaped like the public DFlash drafts for Qwen3 (DFlashDraftModel, qwen3 layers).
    c = dense_draft_base(t)
    c.update(
        {
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": draft_layers,
            "max_window_layers": draft_layers,
            "num_target_layers": t["num_hidden_layers"],
            "block_size": block_size,
            "tie_word_embeddings": False,
            "dflash_config": {"mask_token": "<|mask|>", "mask_token_id": MASK_ID},
        }
    )
    return c


def dspark_config(t, draft_layers=1, gamma=7, markov_rank=64):
    # SGLang's DSpark draft (Qwen3DSparkModel): a DFlash backbone plus a Markov head over the block's
    # previous tokens and a confidence head; gamma (block_size) draft tokens, a verify window of gamma + 1.
    c = dflash_config(t, draft_layers, gamma)
    c.update(
        {
            "architectures": ["Qwen3DSparkModel"],
            "markov_rank": markov_rank,
            "markov_head_type": "vanilla",
            "enable_confidence_head": True,
        }
    )
    return c


def write_tokenizer(out, vocab):
    from pathlib import Path

    from pytest_specbench.inputs.tinymodel import write_tokenizer as _write

    _write(Path(out), vocab)
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(out, "tokenizer.json")).get_vocab_size()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--preset", default="qwen3-1.7b", choices=sorted(PRESETS) + sorted(HYBRID_PRESETS))
    ap.add_argument(
        "--context-length",
        type=int,
        default=None,
        help="max_position_embeddings (default 40960; 262144 for qwen3.5-* presets)",
    )
    ap.add_argument("--tokenizer", default="bpe", choices=["bpe", "none"])
    ap.add_argument("--tokenizer-vocab", type=int, default=8192)
    ap.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="model vocab_size (embedding rows), >= the tokenizer's; default Qwen3's "
        "151936 (Qwen3.5's 248320 for qwen3.5-* presets). Generated ids >= the "
        "tokenizer's size decode to ''.",
    )
    ap.add_argument("--eagle3-draft", metavar="DIR")
    ap.add_argument("--dflash-draft", metavar="DIR")
    ap.add_argument("--dflash-layers", type=int, default=1)
    ap.add_argument("--dflash-block-size", type=int, default=16)
    ap.add_argument("--dspark-draft", metavar="DIR")
    a = ap.parse_args()

    hybrid = is_hybrid(a.preset)
    if a.vocab_size is None:
        a.vocab_size = HYBRID_VOCAB_SIZE if hybrid else VOCAB_SIZE
    if a.context_length is None:
        a.context_length = HYBRID_CONTEXT if hybrid else 40960
    if a.tokenizer == "bpe" and a.vocab_size < a.tokenizer_vocab:
        ap.error("--vocab-size must be >= --tokenizer-vocab")
    if hybrid:
        cfg = hybrid_config(a.preset, a.context_length, a.vocab_size)
    else:
        cfg = target_config(a.preset, a.context_length, a.vocab_size)
    dirs = [(a.out, cfg)]
    if a.eagle3_draft:
        dirs.append((a.eagle3_draft, eagle3_config(cfg)))
    if a.dflash_draft:
        dirs.append((a.dflash_draft, dflash_config(cfg, a.dflash_layers, a.dflash_block_size)))
    if a.dspark_draft:
        dirs.append((a.dspark_draft, dspark_config(cfg)))
    for d, c in dirs:
        os.makedirs(d, exist_ok=True)
        write_json(os.path.join(d, "config.json"), c)
        write_json(
            os.path.join(d, "generation_config.json"),
            {"bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "do_sample": False},
        )
        if a.tokenizer == "bpe":
            n = write_tokenizer(d, a.tokenizer_vocab)
        print(
            f"wrote {d} ({c['architectures'][0]}, {c['num_hidden_layers']} layers"
            + (f", tokenizer vocab {n})" if a.tokenizer == "bpe" else ", no tokenizer)")
        )


if __name__ == "__main__":
    main()
