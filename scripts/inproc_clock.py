"""The in-process sglang backend's TTFT beside SGLang's own histogram, cell by cell.

    python3 scripts/inproc_clock.py benches/gpu/h200-clock-inproc.yaml OUT.json [LOG_DIR]

Starts the matrix's one engine group as the plugin does (engines/sglang.py: ``sglang.Engine`` in
this process), warms it at its cells' shapes, and runs each cell's workload (warm-up round,
timed rounds: workloads/kinds.py) with a meter that reads SGLang's latency histograms
(``sglang:time_to_first_token_seconds``, ``sglang:e2e_request_latency_seconds``) before and after
the timed rounds. With ``enable_metrics`` the Engine sets PROMETHEUS_MULTIPROC_DIR before
prometheus_client is imported, so its tokenizer manager (in this process) and its scheduler
write their samples to that directory; the meter reads them with prometheus_client's
multiprocess collector, and from the process's default registry where the directory holds no
TTFT histogram. Each cell's metrics come from stats/metrics.py's ``cell_metrics``, as in a run:
the client's mean TTFT and the server's (``server_clock``). Writes OUT.json: one row per cell.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def scrape() -> tuple[dict[str, float], str]:
    """The latency histograms' sums and counts now, and where they were read."""
    from pytest_specbench.engines.httpclient import histogram_sums, parse_prometheus

    text, where = "", "none"
    try:
        import prometheus_client  # noqa: F401  (SGLang's own dependency, imported after its Engine)
    except ImportError:
        return {}, "nowhere: prometheus_client is not installed"
    d = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if d and os.path.isdir(d):
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg, path=d)
        text, where = generate_latest(reg).decode(), f"multiprocess dir {d}"
    if "time_to_first_token_seconds_count" not in text:
        from prometheus_client import REGISTRY, generate_latest

        text, where = generate_latest(REGISTRY).decode(), "this process's default registry"
    return histogram_sums(parse_prometheus(text)), where


class HistogramMeter:
    """The meter protocol of workloads/rounds.py: the histograms over a cell's timed rounds."""

    def __init__(self) -> None:
        self.before: dict[str, float] = {}
        self.where = ""

    def start(self) -> None:
        self.before, self.where = scrape()

    def stop(self) -> dict[str, Any]:
        from pytest_specbench.engines.httpclient import latency_delta

        after, _ = scrape()
        return {"server_latency": latency_delta(self.before, after), "histograms_from": self.where}


def main(matrix: str, out: str, log_dir: str = ".") -> int:
    from pytest_specbench.engines.sglang import SGLangEngine
    from pytest_specbench.matrix.schema import load
    from pytest_specbench.stats import metrics
    from pytest_specbench.workloads import kinds

    cells = load(matrix).cells()
    t0 = time.perf_counter()
    engine = SGLangEngine(cells[0].group, log_dir=log_dir)
    rows: list[dict[str, Any]] = []
    try:
        start_s = time.perf_counter() - t0
        warm = kinds.warm_engine(engine, cells)
        for cell in cells:
            engine.deadline = time.monotonic() + cell.workload.timeout_s
            run = kinds.run(engine, cell, HistogramMeter())
            engine.deadline = None
            m = metrics.cell_metrics(
                run.records,
                run.round_times,
                run.round_output_tokens,
                request_digests=run.round_digests,
                server_latency=run.extra.get("server_latency") or None,
                round_windows=run.round_windows,
                one_wave=run.one_wave,
            )
            row = {
                "cell": cell.id,
                "concurrency": cell.concurrency,
                "requests": m["requests"],
                "errors": m["errors"],
                "output_tokens_per_s": m.get("output_tokens_per_s"),
                "client_ttft_ms_mean": m.get("client_ttft_ms_mean"),
                "server_ttft_ms_mean": m.get("server_ttft_ms_mean"),
                "client_e2e_ms_mean": m.get("client_e2e_ms_mean"),
                "server_e2e_ms_mean": m.get("server_e2e_ms_mean"),
                "server_latency": run.extra.get("server_latency"),
                "server_latency_exclusive": m.get("server_latency_exclusive", True),
                "client_bound": m.get("client_bound"),
                "histograms_from": run.extra.get("histograms_from"),
                "ttft_ms_p50": m.get("ttft_ms_p50"),
                "request_digest": m.get("request_digest"),
            }
            if row["client_ttft_ms_mean"] is None:  # no histogram: the client's own mean alone
                ttfts = [r.ttft_s for r in run.records if not r.error and r.ttft_s is not None]
                row["client_ttft_ms_mean"] = sum(ttfts) / len(ttfts) * 1e3 if ttfts else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        engine.close()
    doc = {"matrix": matrix, "engine_start_s": start_s, "engine_warm": warm, "cells": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return 0 if rows and all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
