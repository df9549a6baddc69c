"""SGLang's server arguments that take a list: in a method's ``engine_args`` a flat list for one
of them is its value, not a sweep. No pytest, no I/O."""

from __future__ import annotations

from typing import Any

# SGLang 0.5.17's server arguments that take a list (srt/server_args.py): a flat list given for one
# of these is the argument's value, and a list of lists sweeps it
LIST_ARGS = frozenset(
    {
        "cuda_graph_bs",
        "cuda_graph_bs_decode",
        "cuda_graph_bs_prefill",
        "lora_paths",
        "lora_target_modules",
        "bucket_e2e_request_latency",
        "bucket_inter_token_latency",
        "bucket_time_to_first_token",
        "generation_tokens_buckets",
        "prompt_tokens_buckets",
        "prefill_delayer_forward_passes_buckets",
        "prefill_delayer_wait_seconds_buckets",
        "debug_tensor_dump_layers",
        "flashinfer_autotune_skip_ops",
        "forward_hooks",
        "gc_threshold",
        "numa_node",
        "encoder_urls",
        "encoder_register_urls",
        "decoupled_spec_connect_endpoints",
        "sidecar_args",
        "custom_weight_loader",
        "log_requests_target",
        "tokenizer_metrics_allowed_custom_labels",
        "uvicorn_access_log_exclude_prefixes",
        "remote_instance_weight_loader_send_weights_group_ports",
    }
)


def one_list_value(where: str, key: str, v: list[Any]) -> bool:
    """Whether a list in engine_args is one value, not a sweep: [[...]] (one list, nested), or a
    flat list for an argument SGLang takes as a list (LIST_ARGS)."""
    if where != "engine_args":
        return False
    nested = all(isinstance(x, list) for x in v) and bool(v)
    return (len(v) == 1 and nested) or (key in LIST_ARGS and not nested)
