"""The embedded default model: a tiny Qwen3-architecture LM built here, never downloaded.

``resolve("embedded:tiny")`` returns a directory holding config.json, a byte-level BPE
tokenizer trained on a seeded synthetic corpus, and seeded float32 weights
(model.safetensors). ``embedded:tiny-draft`` is the target's first layer with the
target's own embeddings, norm and head (a self-speculative "layer-skip" draft), so its
guesses agree with the target often but not always. Builds are deterministic (a rebuild
is byte-identical) and land atomically in a cache dir, so xdist workers may race safely.
torch/transformers/tokenizers are imported only when a model must be built.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

RECIPE_VERSION = "1"
PREFIX = "embedded:"
VOCAB = 8192
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
EOS_ID = 0
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    # Qwen3's switch: thinking off opens the reply with an empty think block
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{% endif %}{% endif %}"
)
TARGET_SHAPE: dict[str, Any] = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    tie=False,
)
DRAFT_LAYERS = 1
HEAD_PRIOR = 0.6
SEED = 0


def qwen3_config(
    *,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    vocab_size: int = VOCAB,
    context_length: int = 32768,
    tie: bool = True,
    dtype: str = "float32",
) -> dict[str, Any]:
    """A Qwen3ForCausalLM config in the format of the public checkpoints."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": EOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": context_length,
        "max_window_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_hidden_layers": num_hidden_layers,
        "num_key_value_heads": num_key_value_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": tie,
        "torch_dtype": dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }


def synthetic_corpus(n_lines: int = 6000, seed: int = 0):
    """Seeded pseudo-English lines; the tokenizer is trained on these (no downloads)."""
    rng = random.Random(seed)
    onsets = [
        "",
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "st",
        "tr",
        "ch",
        "sh",
        "th",
    ]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "ng", "st"]
    words = [
        "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
        for _ in range(3000)
    ]
    words += [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "with",
        "as",
        "on",
        "def",
        "return",
        "import",
        "class",
        "self",
        "print",
        "if",
        "else",
        "for",
        "while",
        "data",
    ]
    punct = [".", ".", ".", "?", "!", ",", ":", ";"]
    for _ in range(n_lines):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
        yield (
            s[0].upper()
            + s[1:]
            + rng.choice(punct)
            + (f" {rng.randint(0, 9999)}" if rng.random() < 0.2 else "")
        )


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_tokenizer(out: Path, vocab: int = VOCAB) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1 << 20,
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "mask_token": "<|mask|>",
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )


def _seeded_weights(cfg: dict[str, Any]) -> dict[str, Any]:
    """Weights drawn from one seeded generator in a fixed (sorted) parameter order."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    gen = torch.Generator().manual_seed(SEED)
    std = cfg["initializer_range"]
    state = {}
    for name, p in sorted(model.state_dict().items()):
        if name == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        if "norm" in name:
            t = torch.ones(p.shape)
        else:
            # Unit-scale embeddings, small layers: the model is close to a random bigram map
            # (greedy output walks a cycle, so n-gram lookup has something to find) that the
            # layers perturb (so a one-layer draft is often, not always, right).
            scale = 1.0 if "embed_tokens" in name else std
            t = torch.randn(p.shape, generator=gen) * scale
            if name == "lm_head.weight":
                # a frequency prior (low ids are "common words"): greedy text repeats itself
                # within ~30 tokens, as small real models do, so prompt lookup accepts ~1.5-2
                prior = 1 + HEAD_PRIOR * torch.exp(-torch.arange(p.shape[0], dtype=torch.float32) / 256)
                t = t * prior[:, None]
        state[name] = t.to(torch.float32).contiguous()
    return state


def _save(out: Path, cfg: dict[str, Any], state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    write_json(out / "config.json", cfg)
    write_json(
        out / "generation_config.json", {"bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "do_sample": False}
    )
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def build(out: Path) -> None:
    """Write the target to ``out/tiny`` and its one-layer draft to ``out/tiny-draft``."""
    target = out / "tiny"
    draft = out / "tiny-draft"
    for d in (target, draft):
        d.mkdir(parents=True, exist_ok=True)
    cfg = embedded_config(PREFIX + "tiny")
    state = _seeded_weights(cfg)
    _save(target, cfg, state)
    write_tokenizer(target)
    dcfg = embedded_config(PREFIX + "tiny-draft")
    keep = {f"model.layers.{i}." for i in range(DRAFT_LAYERS)}
    dstate = {
        k: v
        for k, v in state.items()
        if not k.startswith("model.layers.") or any(k.startswith(p) for p in keep)
    }
    _save(draft, dcfg, dstate)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(target / f, draft / f)


def cache_root() -> Path:
    env = os.environ.get("SPECBENCH_CACHE")
    base = (
        Path(env)
        if env
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-specbench"
    )
    return base


def recipe_key() -> str:
    import torch
    import transformers

    src = Path(__file__).read_bytes()
    h = hashlib.sha256(src + f"{torch.__version__}|{transformers.__version__}".encode()).hexdigest()
    return f"v{RECIPE_VERSION}-{h[:12]}"


def ensure_built(root: Path | None = None) -> Path:
    """Build once per recipe into the cache; concurrent builders race to an atomic rename."""
    final = (root or cache_root()) / recipe_key()
    if (final / "tiny" / "model.safetensors").exists() and (
        final / "tiny-draft" / "model.safetensors"
    ).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished first: use its (identical) build
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def embedded_config(path: str) -> dict[str, Any]:
    """config.json of an embedded model, without building it (the planner reads this)."""
    cfg = qwen3_config(**TARGET_SHAPE)
    if _embedded_name(path) == "tiny-draft":
        return dict(cfg, num_hidden_layers=DRAFT_LAYERS, max_window_layers=DRAFT_LAYERS)
    return cfg


def _embedded_name(path: str) -> str:
    name = path[len(PREFIX) :]
    if name not in ("tiny", "tiny-draft"):
        raise ValueError(f"unknown embedded model {path!r}; available: embedded:tiny, embedded:tiny-draft")
    return name


def is_embedded(path: str) -> bool:
    return path.startswith(PREFIX)


def resolve(path: str) -> str:
    """Map ``embedded:NAME`` to a built directory; other paths pass through unchanged."""
    if not is_embedded(path):
        return path
    return str(ensure_built() / _embedded_name(path))
