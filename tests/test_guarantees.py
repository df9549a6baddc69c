"""Guarantees the rest of the suite relies on without saying so, each pinned here: what a round's
request digest covers, that rounds get their own seeds, the open loop's saturation and round CV,
and the "(across runs)" mark on a speedup whose baseline or cell was resumed."""

from __future__ import annotations

import pytest

from pytest_specbench.engines.base import Request, RequestRecord
from pytest_specbench.matrix.schema import parse
from pytest_specbench.stats import paired
from pytest_specbench.stats.metrics import SATURATION_QUEUE_S, cell_metrics, open_loop_metrics
from pytest_specbench.workloads import kinds

DOC = {
    "models": {"m": "embedded:tiny"},
    "methods": {"ar": {"backend": "hf", "model": "m"}},
    "workloads": {"throughput": {"concurrency": [2], "output_tokens": [8], "prompt_tokens": 8}},
}


def test_the_request_digest_covers_every_input_id_and_the_arrivals() -> None:
    reqs = [Request((1, 2, 3), 8, tag="round0/req0"), Request((4, 5, 6), 8, tag="round0/req1")]
    d = kinds.request_digest(reqs)
    other_id = [reqs[0], Request((4, 5, 7), 8, tag="round0/req1")]  # one input id differs
    assert kinds.request_digest(other_id) != d
    assert kinds.request_digest(reqs, [0.0, 0.5]) != kinds.request_digest(reqs, [0.0, 0.6])
    assert kinds.request_digest([reqs[0], Request((4, 5, 6), 9, tag="round0/req1")]) != d  # output length
    assert kinds.request_digest(list(reqs)) == d


def test_every_round_has_its_own_seed_and_every_method_of_a_shape_the_same() -> None:
    (cell,) = parse(DOC, "m.yaml").cells()
    seeds = [kinds.request_seed(cell, r) for r in range(5)]
    assert len(set(seeds)) == 5
    doc = {
        **DOC,
        "methods": {
            **DOC["methods"],
            "ng": {"backend": "hf", "model": "m", "speculative": {"algorithm": "ngram"}},
        },
    }
    a, b = parse(doc, "m.yaml").cells()
    assert [kinds.request_seed(a, r) for r in range(3)] == [kinds.request_seed(b, r) for r in range(3)]


def test_saturation_is_a_request_that_waited_for_a_slot() -> None:
    ok = [RequestRecord(1, 8, 0.1, queue_s=0.0), RequestRecord(1, 8, 0.1, queue_s=SATURATION_QUEUE_S)]
    assert open_loop_metrics(ok, 1.0, 2.0)["saturated"] is False  # at the threshold: not saturated
    waited = [*ok, RequestRecord(1, 8, 0.2, queue_s=SATURATION_QUEUE_S * 2)]
    m = open_loop_metrics(waited, 1.5, 2.0)
    assert m["saturated"] is True and m["queued_requests"] == 1
    assert m["achieved_request_rate"] == pytest.approx(3 / 1.5) and m["offered_request_rate"] == 2.0


def test_an_open_loops_round_cv_is_over_its_rounds_p50_latency() -> None:
    recs = [
        RequestRecord(1, 8, lat, tag=f"round{r}/req{i}")
        for r, lats in enumerate([(1.0, 3.0), (2.0, 2.0)])
        for i, lat in enumerate(lats)
    ]
    m = cell_metrics(recs, [4.0, 4.0], [16, 16], request_rate=1.0)
    assert m["rounds_cv"] == pytest.approx(0.0)  # both rounds' p50 is 2.0 s, though tok/s and spread differ
    assert m["tok_s_estimator"] == "open loop"


def test_a_speedup_against_a_resumed_baseline_is_marked_across_runs() -> None:
    def result(method: str, rates: list[float], resumed: str | None) -> dict:
        return {
            "params": {"method": method, "workload": "throughput", "tp": 1, "concurrency": 1},
            "round_times": [1.0] * len(rates),
            "metrics": {
                "output_tokens_per_s": sum(rates) / len(rates),
                "round_tokens_per_s": rates,
                "request_digests": ["a", "b"],
            },
            "extra_info": {"resumed_from": resumed} if resumed else {},
        }

    out = paired.compare_all(
        [result("ar", [100.0, 100.0], "old.json"), result("ng", [150.0, 160.0], None)], "ar"
    )
    assert out[1]["speedup_across_runs"] is True
    assert out[1]["speedup_verdict"].endswith("(across runs: the baseline or the cell was resumed)")
    same = paired.compare_all([result("ar", [100.0, 100.0], None), result("ng", [150.0, 160.0], None)], "ar")
    assert "speedup_across_runs" not in same[1]
