"""Interleaved comparisons under load simulated through the project's own rule (stats/paired.py's
compare_all: the load gate, the paired ratios' CV, the t-interval, the x0.78..x1.28 bar), with the
pairs' spread drawn from what load did to real pairs: the residuals of the paired log ratios of
every disturbed interleaved cell of the committed busy runs (docs/results), taken from the pairs
whose two halves bore the load alike (within paired.LOAD_GAP), each around its own cell's mean.
Not a test module: tests/test_load_pairs_sim.py and scripts/load_pairs.py use it."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_specbench.report.summary import result_of_entry
from pytest_specbench.stats import paired

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
# runs beside busy loops (or -n 2 on 2 cores) that recorded others' share per round of both halves
BUSY_RUNS = (
    "cpu-default-tour/fresh-busy.json",
    "cpu-default-tour/fresh-busy5.json",
    "cpu-race-n2/race-n2.json",
)
# scripts/load_summary.py's summaries of two further busy runs (their full JSONs are not committed)
BUSY_SUMMARIES = ("cpu-busy/throughput-busy.json", "cpu-busy/twins-busy.json")
DISTURBED = "other processes took 64% of the 2 cores over the timed rounds (more than 10%): python: 9.1 s"


def _alike(ratios: Sequence[float | None], a: Sequence[Any], b: Sequence[Any]) -> list[float]:
    """The log ratios of the pairs whose halves' shares were both measured and within LOAD_GAP."""
    if len(a) < len(ratios) or len(b) < len(ratios):
        return []
    return [
        math.log(r)
        for r, x, y in zip(ratios, a, b, strict=False)
        if r and x is not None and y is not None and abs(x - y) <= paired.LOAD_GAP
    ]


def busy_cells() -> list[list[float]]:
    """Per disturbed interleaved cell of the busy runs (not saturated, no GPU process): the log
    ratios of its pairs that bore the load alike, where it has two or more."""
    out = []
    for name in BUSY_RUNS:
        doc = json.loads((RESULTS / name).read_text())
        for b in doc["benchmarks"]:
            r = result_of_entry(b, b.get("group", ""), {})
            m, ref = r["metrics"], r["metrics"].get("reference")
            if not ref or not paired._cpu_load_only(m):
                continue
            logs = _alike(
                paired._speeds(r, ref),
                m.get("round_other_cpu_share") or [],
                ref.get("round_other_cpu_share") or [],
            )
            if len(logs) >= 2:
                out.append(logs)
    for name in BUSY_SUMMARIES:
        for c in json.loads((RESULTS / name).read_text())["cells"]:
            if "saturated" in str(c.get("verdict")):
                continue
            logs = _alike(c["paired_ratios"], c["round_other_cpu_share"], c["baseline_round_other_cpu_share"])
            if len(logs) >= 2:
                out.append(logs)
    return out


def residuals(cells: list[list[float]] | None = None) -> list[float]:
    """Each cell's log ratios around its own mean, scaled by sqrt(n / (n - 1)) so that every
    residual has the spread of one pair (the mean of n took 1/n of it)."""
    out = []
    for logs in busy_cells() if cells is None else cells:
        n, mean = len(logs), statistics.fmean(logs)
        out += [(x - mean) * math.sqrt(n / (n - 1)) for x in logs]
    return out


class Spread:
    """Draws of a pair's log-ratio noise with standard deviation ``sigma`` and the shape of the
    measured residuals: a smoothed bootstrap (a residual plus Gaussian noise of Silverman's
    bandwidth, rescaled so that the draws' variance is the residuals'), so that two draws are
    never one residual twice."""

    def __init__(self, pool: Sequence[float]) -> None:
        self.pool = list(pool)
        self.sd = statistics.pstdev(self.pool)
        self.h = 0.9 * self.sd * len(self.pool) ** -0.2
        self.scale = 1 / math.sqrt(1 + (self.h / self.sd) ** 2)

    def draw(self, rng: random.Random, sigma: float) -> float:
        return (rng.choice(self.pool) + rng.gauss(0, self.h)) * self.scale * sigma / self.sd


def comparison(logs: Sequence[float]) -> dict[str, Any]:
    """The comparison paired.compare_all makes of a disturbed cell whose paired log ratios over
    its interleaved baseline are ``logs``, the load alike on both halves of every pair (others
    took 60 % of the cores in each, 2 points apart)."""
    n = len(logs)
    base = [100.0] * n
    own = [100.0 * math.exp(x) for x in logs]
    digests = [f"d{i}" for i in range(n)]
    params = {"workload": "throughput", "tp": 1, "concurrency": 4}
    ar = {
        "params": {"method": "ar", **params},
        "round_times": [1.0] * n,
        "metrics": {"output_tokens_per_s": 100.0, "round_tokens_per_s": base, "request_digests": digests},
    }
    cell = {
        "params": {"method": "draft", **params},
        "round_times": [1.0] * n,
        "metrics": {
            "output_tokens_per_s": sum(own) / n,
            "round_tokens_per_s": own,
            "request_digests": digests,
            "disturbed": DISTURBED,
            "round_other_cpu_share": [0.6] * n,
            "reference": {
                "method": "ar",
                "round_tokens_per_s": base,
                "round_latency_s_p50": [None] * n,
                "round_other_cpu_share": [0.62] * n,
                "errors": 0,
                "saturated": False,
            },
        },
    }
    return paired.compare_all([ar, cell], "ar")[1]


def false_rate(spread: Spread, pairs: int, bias: float, sigma: float, trials: int, seed: int) -> float:
    """How often a cell whose ratio load alone shifts by ``bias`` (the methods equal when quiet),
    its pairs spread by ``sigma`` (log sd), keeps a "faster" or "slower" verdict from ``pairs``
    pairs."""
    rng = random.Random(seed)
    false = 0
    for _ in range(trials):
        c = comparison([math.log(bias) + spread.draw(rng, sigma) for _ in range(pairs)])
        false += c["speedup_verdict"] in ("faster", "slower")
    return false / trials
