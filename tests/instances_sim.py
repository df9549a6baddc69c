"""A run's verdicts with two levels of variance, simulated through the project's report code
(report/summary.py's judged: stats/paired.py's comparisons, then report/instances.py's
start level, then report/control.py's A/A control): every engine start carries
its own level (log sd ``tau``), every round its noise (log sd ``cv`` per cell, the paired ratio's).
Not a test module: tests/test_instances.py and scripts/instance_power.py use it."""

from __future__ import annotations

import math
import random
from typing import Any

from pytest_specbench.report.summary import judged


def cell(method: str, own: list[float], ref: list[float], worker: str = "gw0", c: int = 1) -> dict[str, Any]:
    return {
        "cell_id": f"{method}-c{c}",
        "nodeid": f"t::{method}-c{c}",
        "worker": worker,
        "params": {"method": method, "concurrency": c},
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
    shapes: int = 1,
) -> dict[str, dict[str, Any]]:
    """One run at one shape: AR (the baseline, one instance beside every member), its A/A control
    ``ar2`` (``control_twin``), each member and, with ``twins``, a second start of it (``m1~2``).
    ``offsets``: a start's own fixed level on top of its random one; ``speeds``: a member's true
    speed over AR (1.0: equal); ``shapes``: concurrencies 1..shapes, each start serving all of them.
    Returns each cell's comparison fields after the report's rules (by method, or by cell id where
    there are several shapes)."""
    rng = random.Random(seed)
    e = cv / math.sqrt(2)
    base_u = rng.gauss(0, tau)
    names = [*(["ar2"] if control_twin else []), *members, *([f"{m}~2" for m in members] if twins else [])]
    results = []
    for name in names:  # one start per method: its level serves every shape
        true = (speeds or {}).get(name.split("~")[0], 1.0)
        u = rng.gauss(0, tau) + math.log((offsets or {}).get(name, 1.0))
        for c in range(1, shapes + 1):
            own = [100 * true * math.exp(u + rng.gauss(0, e)) for _ in range(rounds)]
            ref = [100 * math.exp(base_u + rng.gauss(0, e)) for _ in range(rounds)]
            results.append(cell(name, own, ref, c=c))
    baseline = {n: "ar" for n in names}
    specbench: dict[str, Any] = {
        "controls": {"ar2": "ar"} if control_twin else {},
        "twins": {f"{m}~2": m for m in members} if twins else {},
        "separate_instances": ["ar", *names],
    }
    comparisons = judged(results, baseline, specbench)
    return {
        r["cell_id"].removesuffix("-c1") if shapes == 1 else r["cell_id"]: comparisons[i]
        for i, r in enumerate(results)
    }


def decided(f: dict[str, Any]) -> bool:
    """A faster or slower verdict."""
    return f.get("speedup_verdict") in ("faster", "slower")
