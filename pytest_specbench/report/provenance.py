"""What the engines of a run actually ran with, and what differs between them: per engine group,
the settings SGLang reports (its resolved server arguments in process, /get_server_info for a
server) that decide speed (speculative algorithm and its arguments, overlap scheduling, page
size, attention backend, CUDA-graph sizes, memory fraction), every argument a method set, and
every SGLANG_* variable the engine started with and every variable its method set (``env``).
Pure: no pytest."""

from __future__ import annotations

from typing import Any

KEYS = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_dflash_block_size",
    "disable_overlap_schedule",
    "page_size",
    "attention_backend",
    "cuda_graph_max_bs",
    "cuda_graph_bs",
    "mem_fraction_static",
)


# an engine's own info that differs between groups without being a setting (paths, timings)
HF_NOISE = frozenset({"model_path", "draft_model_path", "torch_threads", "log", "group"})


def engine_settings(event: dict[str, Any]) -> dict[str, Any]:
    """One engine start event -> {setting: value}: KEYS and every speculative_* argument from
    what the engine reported, the method's own arguments (kwargs) as the engine resolved them,
    and ``env SGLANG_...`` for its variables."""
    info = event.get("info") or {}
    # SGLang: its resolved arguments; an engine without them (hf): the scalars of its own info
    args = (
        info.get("server_args")
        or info.get("server_info")
        or {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool)) and k not in HF_NOISE}
    )
    asked = info.get("kwargs") or {}
    out: dict[str, Any] = {}
    for k in sorted(set(KEYS) | {k for k in args if k.startswith("speculative_")} | set(asked)):
        if k in args:
            out[k] = args[k]
        elif k in asked:
            out[k] = asked[k]
    for k, v in (event.get("sglang_env") or {}).items():
        out[f"env {k}"] = v
    return out


def differences(doc: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The settings whose values differ between the run's started engine groups (unset where a
    group has no value), and per group its values of those: the columns of the report's table."""
    groups = {
        e["group"]: engine_settings(e)
        for e in (doc.get("specbench") or {}).get("engine_groups") or []
        if e.get("ok")
    }
    if len(groups) < 2:
        return [], {}
    keys = sorted({k for s in groups.values() for k in s})
    differ = [k for k in keys if len({repr(s.get(k)) for s in groups.values()}) > 1]
    noise = ("model_path", "tokenizer_path", "speculative_draft_model_path", "log", "port")
    differ = [k for k in differ if not any(k == n or k.endswith("." + n) for n in noise)]
    return differ, {g: {k: s.get(k) for k in differ} for g, s in groups.items()}


def markdown(doc: dict[str, Any]) -> list[str]:
    """The table of the settings that differ between engine groups (empty when none do)."""
    keys, rows = differences(doc)
    if not keys:
        return []
    out = [
        "",
        "Engine settings that differ between groups (as the engines reported them; `env`: SGLANG_* "
        "variables at start; `-`: not set):",
        "",
        "| group | " + " | ".join(keys) + " |",
        "|---" * (len(keys) + 1) + "|",
    ]
    for g, vals in rows.items():
        out.append(f"| {g} | " + " | ".join("-" if vals[k] is None else str(vals[k]) for k in keys) + " |")
    return out
