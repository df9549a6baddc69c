"""Cell results -> one pytest-benchmark-format JSON document and a terminal table.

Each cell becomes one entry of ``benchmarks``: ``stats`` from the timed rounds' wall
times (pytest-benchmark's own Stats class, so ``pytest-benchmark compare`` reads it),
``params`` from the cell's axes, ``extra_info`` with throughput, acceptance, latency
percentiles and speedup vs the baseline method. Run-level facts (engine starts, failed
cells, provenance) go under ``machine_info["specbench"]`` and a top-level ``specbench`` key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .metrics import speedups

EXTRA_KEYS_FIRST = (
    "output_tokens_per_s",
    "accept_length",
    "speedup_vs_ar",
    "requests",
    "output_tokens",
    "latency_s_p50",
    "latency_s_p99",
)


def _stats(round_times: Sequence[float]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    s = Stats()
    for t in round_times:
        s.update(t)
    d = s.as_dict()
    d["data"] = list(round_times)
    d["iterations"] = 1
    return d


def benchmark_entry(result: dict[str, Any], speedup: float | None) -> dict[str, Any]:
    m = dict(result["metrics"])
    extra = {k: m.get(k) for k in EXTRA_KEYS_FIRST if k != "speedup_vs_ar"}
    extra["speedup_vs_ar"] = speedup
    extra.update({k: v for k, v in m.items() if k not in extra})
    extra["engine_group"] = result["group"]
    extra.update(result.get("extra_info") or {})
    return {
        "group": result["params"]["workload"],
        "name": result["name"],
        "fullname": result["nodeid"],
        "params": result["params"],
        "param": result["cell_id"],
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(result["round_times"]),
            "max_time": 0,
            "min_time": 0,
            "warmup": result.get("warmup", 0),
        },
        "stats": _stats(result["round_times"]),
    }


def build(
    results: Sequence[dict[str, Any]],
    *,
    baseline: str,
    machine_info: dict[str, Any],
    commit_info: dict[str, Any],
    specbench: dict[str, Any],
    version: str,
) -> dict[str, Any]:
    ordered = sorted(results, key=lambda r: r["nodeid"])
    sp = speedups(ordered, baseline)
    return {
        "machine_info": machine_info,
        "commit_info": commit_info,
        "benchmarks": [benchmark_entry(r, sp[i]) for i, r in enumerate(ordered)],
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": version,
        "specbench": specbench,
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str, sort_keys=False)


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(doc: dict[str, Any]) -> list[str]:
    """Rows for the terminal summary: one per cell, grouped by workload."""
    head = (
        f"{'cell':<48} {'tok/s':>10} {'accept':>7} {'vs ar':>6} {'ttft p50 ms':>12} "
        f"{'lat p50 s':>10} {'err':>4}"
    )
    lines = [head, "-" * len(head)]
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        lines.append(
            f"{b['param']:<48} {_fmt(e.get('output_tokens_per_s'), '10.1f')} "
            f"{_fmt(e.get('accept_length'), '7.3f')} {_fmt(e.get('speedup_vs_ar'), '6.2f')} "
            f"{_fmt(e.get('ttft_ms_p50'), '12.1f')} {_fmt(e.get('latency_s_p50'), '10.3f')} "
            f"{e.get('errors', 0):>4}"
        )
    return lines


def planned_vs_engine(event: dict[str, Any]) -> str | None:
    """The planner's KV capacity and memory fraction next to what the engine sized at start."""
    planned = event.get("planned") or {}
    info = event.get("info") or {}
    engine_tokens = (info.get("scheduler_info") or {}).get("max_total_num_tokens")
    if not planned.get("kv_tokens_capacity") or not engine_tokens:
        return None
    frac = (info.get("server_args") or {}).get("mem_fraction_static")
    return (
        f"{event['group']}: KV tokens planned {planned['kv_tokens_capacity']:,} (mem_fraction_static "
        f"{planned.get('mem_fraction_static')}), engine {engine_tokens:,} (mem_fraction_static {frac}): "
        f"planned/engine = {planned['kv_tokens_capacity'] / engine_tokens:.3f}"
    )
