"""Under load, a verdict kept because both halves of every pair bore the load alike must not be the
load's own bias: simulated interleaved pairs whose ratio load alone shifts by the largest shift
docs/metrics.md measured (draft = target against AR beside two busy loops: x0.78), run through
paired.compare_all, keep "slower" (or, shifted the other way, "faster") at most 5 % of the time."""

from __future__ import annotations

import math
import random

import pytest

from pytest_specbench.stats import paired

DISTURBED = "other processes took 64% of the 2 cores over the timed rounds (more than 10%): python: 9.1 s"


def _pair_run(rng: random.Random, rounds: int, bias: float, cv: float) -> dict:
    base = [100.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(rounds)]
    own = [b * bias * math.exp(rng.gauss(0, cv)) for b in base]
    loads = [0.6 + 0.1 * rng.random() for _ in range(rounds)]
    ar = {
        "params": {"method": "ar", "workload": "throughput", "tp": 1, "concurrency": 4},
        "round_times": [1.0] * rounds,
        "metrics": {
            "output_tokens_per_s": 100.0,
            "round_tokens_per_s": [100.0] * rounds,
            "request_digests": [f"d{i}" for i in range(rounds)],
        },
    }
    cell = {
        "params": {"method": "draft", "workload": "throughput", "tp": 1, "concurrency": 4},
        "round_times": [1.0] * rounds,
        "metrics": {
            "output_tokens_per_s": sum(own) / rounds,
            "round_tokens_per_s": own,
            "request_digests": [f"d{i}" for i in range(rounds)],
            "disturbed": DISTURBED,
            "round_other_cpu_share": loads,
            "reference": {
                "method": "ar",
                "round_tokens_per_s": base,
                "round_latency_s_p50": [None] * rounds,
                "round_other_cpu_share": [x + 0.02 for x in loads],
                "errors": 0,
                "saturated": False,
            },
        },
    }
    return paired.compare_all([ar, cell], "ar")[1]


@pytest.mark.parametrize("rounds", [3, 5, 10])
@pytest.mark.parametrize("bias", [0.78, 1 / 0.78])
def test_a_pure_load_bias_keeps_a_verdict_at_most_5_percent_of_the_time(rounds: int, bias: float) -> None:
    """Pairs at 3 % CV around the load's own shift, loads alike (kept under load): a 10 % margin
    kept "slower" in nearly every run; the margin calibrated to x0.78 keeps it at most 5 %."""
    rng = random.Random(rounds)
    trials, kept, judged = 400, 0, 0
    for _ in range(trials):
        c = _pair_run(rng, rounds, bias, 0.03)
        assert c.get("speedup_under_load"), c  # the pairs bore the load alike: judged under load
        judged += 1
        kept += c["speedup_verdict"] in ("faster", "slower")
    assert judged == trials and kept / trials <= 0.05, kept
