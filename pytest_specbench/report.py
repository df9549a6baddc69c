"""Cell results -> one pytest-benchmark-format JSON document and a terminal table.

Each cell becomes one entry of ``benchmarks``: ``stats`` from the timed rounds' wall
times (pytest-benchmark's own Stats class, so ``pytest-benchmark compare`` reads it),
``params`` from the cell's axes, ``extra_info`` with throughput, acceptance, latency
percentiles and speedup vs the baseline method. Run-level facts (engine starts, failed
cells, provenance) go under ``machine_info["specbench"]`` and a top-level ``specbench`` key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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


def benchmark_entry(
    result: dict[str, Any], speedup: float | None, baseline: str | None = None
) -> dict[str, Any]:
    m = dict(result["metrics"])
    extra = {k: m.get(k) for k in EXTRA_KEYS_FIRST if k != "speedup_vs_ar"}
    extra["speedup_vs_ar"] = speedup
    extra["speedup_baseline"] = baseline  # the AR method of the same target model
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


def result_of_entry(b: dict[str, Any], group: str, extra_info: dict[str, Any]) -> dict[str, Any]:
    """``benchmark_entry`` backwards: a cell's result from its JSON entry (``--specbench-resume``).
    The speedup and its baseline are left out: the run that copies the entry recomputes them."""
    metrics = dict(b.get("extra_info") or {})
    group = metrics.pop("engine_group", group)
    metrics.pop("speedup_vs_ar", None)
    metrics.pop("speedup_baseline", None)
    return {
        "nodeid": b.get("fullname", ""),
        "name": b.get("name", ""),
        "cell_id": b["param"],
        "group": group,
        "params": b["params"],
        "round_times": list((b.get("stats") or {}).get("data") or []),
        "warmup": (b.get("options") or {}).get("warmup", 0),
        "metrics": metrics,
        "extra_info": extra_info,
    }


def build(
    results: Sequence[dict[str, Any]],
    *,
    baseline: str | Mapping[str, str | None],
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
        "benchmarks": [
            benchmark_entry(
                r, sp[i], baseline if isinstance(baseline, str) else baseline.get(r["params"]["method"])
            )
            for i, r in enumerate(ordered)
        ],
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": version,
        "specbench": specbench,
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str, sort_keys=False)


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


# per-cell columns of the terminal table and the Markdown report: (header, extra_info key,
# format, terminal width; None: Markdown only)
COLUMNS = (
    ("tok/s", "output_tokens_per_s", ".1f", 10),
    ("accept", "accept_length", ".3f", 7),
    ("vs ar", "speedup_vs_ar", ".2f", 6),
    ("ttft p50 ms", "ttft_ms_p50", ".1f", 12),
    ("tpot p50 ms", "tpot_ms_p50", ".2f", None),
    ("lat p50 s", "latency_s_p50", ".3f", 10),
)


def table(doc: dict[str, Any]) -> list[str]:
    """Rows for the terminal summary: one per cell, grouped by workload."""
    cols = [(h, k, f, w) for h, k, f, w in COLUMNS if w is not None]
    head = f"{'cell':<48} " + " ".join(f"{h:>{w}}" for h, _, _, w in cols) + f" {'err':>4}"
    lines = [head, "-" * len(head)]
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        vals = " ".join(_fmt(e.get(k), f"{w}{f}") for _, k, f, w in cols)
        lines.append(f"{b['param']:<48} {vals} {e.get('errors', 0):>4}")
    return lines


def planned_vs_engine(event: dict[str, Any]) -> str | None:
    """The planner's KV capacity and memory fraction next to what the engine sized at start."""
    planned = event.get("planned") or {}
    info = event.get("info") or {}
    engine_tokens = (info.get("scheduler_info") or {}).get("max_total_num_tokens")
    if not planned.get("kv_tokens_capacity") or not engine_tokens:
        return None
    frac = (info.get("server_args") or {}).get("mem_fraction_static")
    line = (
        f"{event['group']}: KV tokens planned {planned['kv_tokens_capacity']:,} (mem_fraction_static "
        f"{planned.get('mem_fraction_static')}), engine {engine_tokens:,} (mem_fraction_static {frac}): "
        f"planned/engine = {planned['kv_tokens_capacity'] / engine_tokens:.3f}"
    )
    after, before = event.get("gpu_used_mib_after_start") or {}, event.get("gpu_used_mib_before") or {}
    if after and planned.get("budget_bytes_per_gpu"):
        held = max(after[k] - before.get(k, 0) for k in after)
        line += (
            f"; GPU memory held after start {held:,} MiB per GPU (NVML), planned static "
            f"{planned['budget_bytes_per_gpu'] >> 20:,} MiB (weights + KV + state; the rest is "
            "CUDA graphs, context, activations)"
        )
    return line


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["param"]: b["extra_info"] for b in doc.get("benchmarks", [])}


def markdown(doc: dict[str, Any]) -> list[str]:
    """One results JSON as a Markdown table, then its failed cells (with the engine's reason)."""
    from .results import failure_headline

    lines = [
        "| cell | " + " | ".join(h for h, _, _, _ in COLUMNS) + " | err |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for cell, e in _rows(doc).items():
        cols = [cell, *(_fmt(e.get(k), f) for _, k, f, _ in COLUMNS), str(e.get("errors", 0))]
        lines.append(f"| {' | '.join(cols)} |")
    spec = doc.get("specbench") or {}
    for f in spec.get("failed_cells") or []:
        lines.append(f"- failed `{f['cell']}` ({f['phase']}): {failure_headline(f)}")
    if "engine_starts" in spec:
        lines.append(f"- engine starts: {spec['engine_starts']}")
    return lines


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Two results JSONs cell by cell: throughput (and new/old) and acceptance length, which
    ``pytest-benchmark compare`` (round times only) does not show."""
    a, b = _rows(old), _rows(new)
    lines = [
        "| cell | tok/s old | tok/s new | new/old | accept old | accept new |",
        "|---|---|---|---|---|---|",
    ]
    for cell in list(a) + [c for c in b if c not in a]:
        ea, eb = a.get(cell, {}), b.get(cell, {})
        ta, tb = ea.get("output_tokens_per_s"), eb.get("output_tokens_per_s")
        ratio = tb / ta if ta and tb else None
        cols = [
            cell,
            _fmt(ta, ".1f") if cell in a else "absent",
            _fmt(tb, ".1f") if cell in b else "absent",
            _fmt(ratio, ".3f"),
            _fmt(ea.get("accept_length"), ".3f"),
            _fmt(eb.get("accept_length"), ".3f"),
        ]
        lines.append(f"| {' | '.join(cols)} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_specbench.report RUN.json`` (a Markdown table) or
    ``python -m pytest_specbench.report OLD.json NEW.json`` (cell by cell)."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m pytest_specbench.report", description=main.__doc__)
    ap.add_argument("json", nargs="+", help="one results JSON, or two to compare (old, new)")
    args = ap.parse_args(argv)
    if len(args.json) > 2:
        ap.error(f"give one results JSON or two (old new); got {len(args.json)}")
    docs = []
    for p in args.json:
        try:
            doc = json.loads(Path(p).read_text())
            doc["benchmarks"]  # noqa: B018 - a results JSON has it
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"{p}: not a results JSON ({type(e).__name__}: {e})")
        docs.append(doc)
    print("\n".join(markdown(docs[0]) if len(docs) == 1 else compare(docs[0], docs[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
