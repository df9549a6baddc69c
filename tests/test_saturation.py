"""One saturation rule: an open-loop request that waited more than SATURATION_QUEUE_S for a free
slot saturates the round, whether it was the cell's own request or one of its baseline's
interleaved rounds; a shorter wait (the client's jitter) saturates neither."""

from __future__ import annotations

import pytest

from pytest_specbench.engines.base import Request, RequestRecord
from pytest_specbench.matrix.schema import parse
from pytest_specbench.stats import paired
from pytest_specbench.stats.metrics import SATURATION_QUEUE_S, open_loop_metrics, queued_requests
from pytest_specbench.workloads import rounds

DOC = {
    "models": {"m": "embedded:tiny"},
    "methods": {"ar": {"backend": "hf", "model": "m"}, "ng": {"backend": "hf", "model": "m"}},
    "workloads": {"throughput": {"concurrency": [1], "request_rate": [1.0], "rounds": 3, "warmup": 0}},
}


def _recs(wait_s: float, latency_s: float, n: int = 2, tag: str = "round0") -> list[RequestRecord]:
    return [
        RequestRecord(2, 4, latency_s, queue_s=wait_s if i == n - 1 else 0.0, tag=f"{tag}/req{i}")
        for i in range(n)
    ]


class FakeScripted:
    """An engine whose rounds are scripted: every request takes ``latency_s`` and the last one of
    each round waited ``wait_s`` for a slot."""

    def __init__(self, wait_s: float, latency_s: float):
        self.wait_s, self.latency_s = wait_s, latency_s

    def flush_cache(self) -> None:
        pass


def _interleaved(cell_wait_s: float, base_wait_s: float) -> tuple[dict, dict]:
    """ng's open-loop cell with ar's rounds interleaved (rounds.timed), ng twice as fast; its
    open-loop metrics and the comparison paired.compare_all makes of it."""
    cell = next(c for c in parse(DOC, "m.yaml").cells() if c.method.name == "ng")
    plans = [
        rounds.RoundPlan([Request((1, 2), 4, tag=f"round{r}/req{i}") for i in range(2)], [0.0, 0.5])
        for r in range(3)
    ]

    def round_fn(eng: FakeScripted, plan: rounds.RoundPlan) -> list[RequestRecord]:
        return _recs(eng.wait_s, eng.latency_s, tag=plan.requests[0].tag.split("/")[0])

    ref = rounds.Reference(FakeScripted(base_wait_s, 0.2), "ar", "ar-tp1")  # type: ignore[arg-type]
    run = rounds.timed(FakeScripted(cell_wait_s, 0.1), cell, plans, round_fn, None, ref)  # type: ignore[arg-type]
    m = open_loop_metrics(run.records, sum(run.round_times) or 1.0, 1.0)
    m["per_request"] = {"tag": [r.tag for r in run.records], "latency_s": [r.latency_s for r in run.records]}
    m["output_tokens_per_s"] = 1.0
    m["reference"] = run.reference
    result = {"params": {"method": "ng", "request_rate": 1.0}, "round_times": run.round_times, "metrics": m}
    return m, paired.compare_all([result], "ar")[0]


def test_a_wait_under_the_threshold_is_not_saturation_for_the_cell_nor_its_baseline() -> None:
    half_ms = 0.0005
    assert queued_requests(_recs(half_ms, 0.1)) == 0
    m, c = _interleaved(half_ms, half_ms)
    assert m["saturated"] is False and m["queued_requests"] == 0
    assert m["reference"]["saturated"] is False
    assert c["speedup_pairing"] == "interleaved" and c["speedup_verdict"] == "faster", c
    assert c["speedup_vs_ar"] == pytest.approx(2.0)


def test_a_wait_over_the_threshold_saturates_the_cell_and_its_baseline_alike() -> None:
    over = SATURATION_QUEUE_S * 1.5
    assert queued_requests(_recs(over, 0.1)) == 1
    assert queued_requests(_recs(SATURATION_QUEUE_S, 0.1)) == 0  # at the threshold: not saturated
    failed = [RequestRecord(2, 0, 0.1, queue_s=over, error="boom")]
    assert queued_requests(failed) == 0  # a failed request is counted as an error, not a wait

    m, c = _interleaved(over, 0.0)  # the cell's own requests waited
    assert m["saturated"] is True and m["queued_requests"] == 3
    assert m["reference"]["saturated"] is False
    assert c["speedup_verdict"].startswith("no verdict: the cell saturated"), c

    m, c = _interleaved(0.0, over)  # its baseline's interleaved requests waited
    assert m["saturated"] is False
    assert m["reference"]["saturated"] is True
    assert c["speedup_verdict"] == (
        "no verdict: a baseline's interleaved rounds saturated (requests waited for a free slot)"
    ), c
