"""What a cell's fingerprint hashes (Cell.fingerprint): the fields that define a measurement, per
matrix class, and the text they are hashed as. tests/test_fingerprints.py fails when a field is
added to a matrix class without being listed here or in NOT_FINGERPRINTED."""

from __future__ import annotations

from typing import Any

# What defines a measurement, per object, in the order the fields are hashed. A field left out
# does not enter any fingerprint: adding a field to a class changes no fingerprint until it is
# listed here, and tests/test_fingerprints.py fails until it is listed here or in NOT_FINGERPRINTED.
# The text hashed is what repr() of these frozen classes printed before their fields were listed,
# so results written by earlier versions of the plugin still resume.
FINGERPRINT_FIELDS: dict[str, tuple[str, ...]] = {
    "Model": ("name", "path", "tokenizer", "load_format", "context_length"),
    "Speculative": (
        "algorithm",
        "draft_model",
        "num_steps",
        "topk",
        "num_draft_tokens",
        "max_ngram",
        "block_size",
    ),
    "Method": (
        "name",
        "backend",
        "model",
        "speculative",
        "draft_model",
        "tp",
        "engine_args",
        "env",
        "sweep",
        "setting",
    ),
    "Workload": (
        "name",
        "kind",
        "concurrency",
        "output_tokens",
        "context_tokens",
        "prompt_tokens",
        "requests",
        "waves",
        "rounds",
        "warmup",
        "timeout_s",
        "methods",
        "options",
        "request_rate",
        "scenarios",
        "categories",
        "questions",
    ),
}
# The fields outside FINGERPRINT_FIELDS, and why.
NOT_FINGERPRINTED: dict[tuple[str, str], str] = {
    ("Method", "url"): "Cell.fingerprint adds ('endpoint', url, api) when a url is set",
    ("Method", "api"): "Cell.fingerprint adds ('endpoint', url, api) when a url is set",
    ("Method", "api_key_env"): "names the variable holding the API key; no measurement depends on it",
    ("Workload", "temperature"): "a temperature > 0 is the cell's axis (Cell.extra); greedy adds nothing",
    ("Workload", "slo"): "Cell.fingerprint adds ('slo', ...) when set; a workload without SLOs keeps its own",
    ("Speculative", "simulate_accept_length"): "Cell.fingerprint adds ('forced', length, method) when set",
    ("Speculative", "simulate_accept_method"): "Cell.fingerprint adds ('forced', length, method) when set",
    (
        "Speculative",
        "expect_accept_length",
    ): "planning only: the plan's ETA, never the engine or the measurement",
    ("Method", "tune"): "where --specbench-race decides a sweep, how many settings it keeps: which cells run",
    ("Method", "labels"): "only names the swept settings; the name itself is fingerprinted",
    ("Method", "hooks"): "shell commands run around the engine group, outside its cells' timed rounds",
    ("Workload", "max_rounds"): "Cell.fingerprint adds ('max_rounds', n) when set; without it, unchanged",
    ("Workload", "precision"): "Cell.fingerprint adds ('precision', p) when set; without it, unchanged",
    **{
        ("Workload", f): "Cell.fingerprint adds ('trace', digest, cuts, block size, cap) for a trace"
        for f in ("trace", "cut_requests", "cut_s", "block_tokens", "max_output_tokens", "trace_digest")
    },
    ("Workload", "speed"): "the cell's axis (Cell.extra)",
    ("Workload", "trace_rate"): "follows from the trace's digest and cuts",
    ("Workload", "trace_max_tokens"): "follows from the trace's digest, cuts and cap",
    ("Workload", "trace_requests"): "follows from the trace's digest and cuts",
    ("Workload", "chat_template"): "Cell.fingerprint adds ('chat_template', True) when set",
    ("Workload", "enable_thinking"): "the cell's axis (Cell.extra)",
}


def fingerprint_text(value: Any) -> str:
    """The text a fingerprint hashes: an object of FINGERPRINT_FIELDS as ``Name(field=value, ...)``
    over its listed fields, a tuple element by element, anything else (the str, int, float, bool
    and None of the YAML file, or a date YAML read) as repr()."""
    fields = FINGERPRINT_FIELDS.get(type(value).__name__)
    if fields is not None:
        inner = ", ".join(f"{f}={fingerprint_text(getattr(value, f))}" for f in fields)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, tuple):
        items = [fingerprint_text(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(value)
