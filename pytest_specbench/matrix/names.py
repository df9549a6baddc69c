"""Readable names in cell ids: a swept setting's method name (``ngram-d8``), an axis value's
label (``rate8``, ``t0.7``, ``speed2x``, ``nothink``) and token counts (``3k``). No heavy imports, no I/O."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# a swept knob's letter in its setting's method name (ngram-d8, eagle3-s3-k4)
SWEEP_LABELS = {
    "num_steps": "s",
    "topk": "k",
    "num_draft_tokens": "d",
    "block_size": "b",
    "max_ngram": "n",
    "simulate_accept_length": "a",
}


def fmt_tokens(n: int) -> str:
    """3000 -> '3k', 100000 -> '100k', 256 -> '256' (ids stay short and greppable)."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def setting_name(
    sweep: str, varying: tuple[tuple[str, Any], ...], labels: tuple[tuple[str, str], ...] = ()
) -> str:
    """The method name of one setting of a sweep: ``ngram`` with num_draft_tokens 8 -> ``ngram-d8``;
    a forced accept length 3.5 -> ``eagle3-a3.5``; a swept engine argument or variable by its
    label (``labels: {speculative_ddtree_budget: b}`` -> ``ddtree-b64``), else by its name
    shortened (``SGLANG_ENABLE_SPEC_V2`` 1 -> ``enable-spec-v2-1``)."""
    named = dict(labels)
    parts = []
    for k, v in varying:
        label = named.get(k) or SWEEP_LABELS.get(k) or _short(k) + "-"
        parts.append(f"{label}{_value_text(v)}")
    return "-".join([sweep, *parts])


def _short(key: str) -> str:
    k = key.lower()
    for prefix in ("sglang_", "speculative_"):
        k = k.removeprefix(prefix)
    return k.replace("_", "-")


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "x".join(_value_text(x) for x in v)
    return re.sub(r"[^A-Za-z0-9.+_-]+", "_", str(v))  # ids that -k can select: no spaces or slashes


def axis_label(key: str, value: Any) -> str:
    if key == "request_rate":
        return f"rate{value:g}"
    if key == "temperature":
        return f"t{value:g}"
    if key == "scenario":
        return Path(str(value)).stem
    if key == "speed":
        return f"speed{value:g}x"  # -k speed1x does not select speed10x
    if key == "thinking":
        return "think" if value else "nothink"
    return str(value)
