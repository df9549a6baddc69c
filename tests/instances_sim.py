"""A run's verdicts with two levels of variance, simulated through the project's report code
(stats/paired.py's compare_all, report/control.py, report/instances.py): every engine start carries
its own level (log sd ``tau``), every round its noise (log sd ``cv`` per cell, the paired ratio's).
Not a test module: tests/test_instances.py and scripts/instance_power.py use it."""

from __future__ import annotations

import math
import random
from typing import Any

from pytest_specbench.report import control, instances
from pytest_specbench.stats.paired import compare_all


def cell(method: str, own: list[float], ref: list[float], worker: str = "gw0") -> dict[str, Any]:
    return {
        "cell_id": f"{method}-c1",
        "nodeid": f"t::{method}",
        "worker": worker,
        "params": {"method": method, "concurrency": 1},
        "metrics": {
            "output_tokens_per_s": sum(own) / len(own),
            "round_tokens_per_s": own,
            "reference": {"method": "ar", "round_tokens_per_s": ref},
        },
        "round_times": [1.0] * len(own),
    }


def run(
    seed: int,
    tau: float,
    cv: float,
    rounds: int = 5,
    members: tuple[str, ...] = ("m1", "m2", "m3"),
    twins: bool = True,
    control_twin: bool = True,
    offsets: dict[str, float] | None = None,
    speeds: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """One run at one shape: AR (the baseline, one instance beside every member), its A/A control
    ``ar2`` (``control_twin``), each member and, with ``twins``, a second start of it (``m1~2``).
    ``offsets``: a start's own fixed level on top of its random one; ``speeds``: a member's true
    speed over AR (1.0: equal). Returns each cell's comparison fields after the report's rules."""
    rng = random.Random(seed)
    e = cv / math.sqrt(2)
    base_u = rng.gauss(0, tau)
    names = [*(["ar2"] if control_twin else []), *members, *([f"{m}~2" for m in members] if twins else [])]
    results = []
    for name in names:
        true = (speeds or {}).get(name.split("~")[0], 1.0)
        u = rng.gauss(0, tau) + math.log((offsets or {}).get(name, 1.0))
        own = [100 * true * math.exp(u + rng.gauss(0, e)) for _ in range(rounds)]
        ref = [100 * math.exp(base_u + rng.gauss(0, e)) for _ in range(rounds)]
        results.append(cell(name, own, ref))
    baseline = {n: "ar" for n in names}
    comparisons = compare_all(results, baseline)
    specbench: dict[str, Any] = {
        "controls": {"ar2": "ar"} if control_twin else {},
        "twins": {f"{m}~2": m for m in members} if twins else {},
        "separate_instances": ["ar", *names],
    }
    control.apply(results, comparisons, specbench, baseline)
    instances.apply(results, comparisons, specbench)
    return {r["params"]["method"]: comparisons[i] for i, r in enumerate(results)}


def decided(f: dict[str, Any]) -> bool:
    """A faster or slower verdict."""
    return f.get("speedup_verdict") in ("faster", "slower")
