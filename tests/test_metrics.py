"""Pure metric functions against hand-computed numbers."""

from __future__ import annotations

import pytest

from pytest_specbench.engines.base import RequestRecord
from pytest_specbench.report.metrics import accept_length, cell_metrics, itl_gaps, percentile, summarize, tpot
from pytest_specbench.report.paired import compare_all


def rec(**kw):
    base = dict(prompt_tokens=8, output_tokens=9, latency_s=1.0)
    base.update(kw)
    return RequestRecord(**base)


def test_percentile_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 99) == 10.0
    assert percentile([], 50) is None
    assert percentile(list(map(float, range(101))), 90) == 90.0


def test_itl_spreads_multi_token_chunks_over_their_tokens() -> None:
    # first chunk 1 token at 0.1 s, then a 4-token chunk after 0.4 s, then 4 more after 0.2 s
    chunks = ((0.1, 1), (0.5, 5), (0.7, 9))
    gaps = itl_gaps(chunks)
    assert gaps == pytest.approx([0.1] * 4 + [0.05] * 4)  # 8 gaps for 8 tokens, not 2 gaps


def test_tpot_and_ttft() -> None:
    r = rec(ttft_s=0.1, latency_s=0.9, chunks=((0.1, 1), (0.5, 5), (0.9, 9)))
    assert tpot(r) == pytest.approx(0.1)  # (0.9 - 0.1) / (9 - 1)
    assert tpot(rec(ttft_s=0.1, output_tokens=1)) is None


def test_accept_length_weights_by_verify_steps() -> None:
    # 256 tokens / 64 steps and 10 tokens / 9 steps: the cell's length is 266 / 73, not the mean
    recs = [rec(output_tokens=256, verify_steps=64), rec(output_tokens=10, verify_steps=9)]
    assert accept_length(recs) == pytest.approx(266 / 73)
    assert accept_length([rec()]) is None  # autoregressive: nothing to accept


def test_summarize_counts_errors_and_throughput() -> None:
    recs = [
        rec(output_tokens=10, ttft_s=0.1, chunks=((0.1, 1), (1.0, 10))),
        RequestRecord(8, 0, 0.0, error="boom"),
    ]
    m = summarize(recs, wall_s=2.0)
    assert m["requests"] == 2 and m["errors"] == 1 and m["first_error"] == "boom"
    assert m["output_tokens_per_s"] == 5.0
    assert m["ttft_ms_p50"] == pytest.approx(100.0)
    assert m["itl_ms_p50"] == pytest.approx(100.0)


def test_speedups_match_axes() -> None:
    def r(method, c, tps):
        return {
            "params": {"method": method, "concurrency": c},
            "round_times": [1.0],
            "metrics": {"output_tokens_per_s": tps, "round_tokens_per_s": [tps]},
        }

    def speedups(res, base):
        return {i: f.get("speedup_vs_ar") for i, f in compare_all(res, base).items()}

    res = [r("ar", 1, 100.0), r("ngram", 1, 150.0), r("ngram", 4, 300.0)]
    assert speedups(res, "ar") == {0: 1.0, 1: pytest.approx(1.5), 2: None}
    # per target model: the hybrid's methods divide by the hybrid's AR, not the dense one's
    res += [r("hybrid-ar", 1, 200.0), r("hybrid-ngram", 1, 500.0)]
    base = {"ar": "ar", "ngram": "ar", "hybrid-ar": "hybrid-ar", "hybrid-ngram": "hybrid-ar"}
    assert speedups(res, base) == {0: 1.0, 1: pytest.approx(1.5), 2: None, 3: 1.0, 4: pytest.approx(2.5)}
    assert speedups(res, {**base, "hybrid-ngram": None})[4] is None


def test_cell_metrics_hand_computed() -> None:
    """Two rounds: 2 s with 30 tokens, 3 s with 20 tokens (one failed request excluded)."""
    recs = [
        rec(output_tokens=10, latency_s=1.0, tag="round1/req0"),
        rec(output_tokens=20, latency_s=2.0, tag="round1/req1"),
        rec(output_tokens=20, latency_s=3.0, tag="round2/req0"),
        RequestRecord(8, 0, 0.0, tag="round2/req1", error="boom"),
    ]
    m = cell_metrics(recs, [2.0, 3.0], [30, 20], request_digests=["d1", "d2"], slo={"e2e_s": 1.5})
    assert m["output_tokens"] == 50 and m["wall_s"] == 5.0
    assert m["output_tokens_per_s"] == 10.0  # 50 tokens / (2 + 3) s, not / max(2, 3)
    assert m["round_tokens_per_s"] == [15.0, 20 / 3]
    mean = (15 + 20 / 3) / 2
    sd = ((15 - mean) ** 2 + (20 / 3 - mean) ** 2) ** 0.5
    assert m["rounds_cv"] == pytest.approx(sd / mean)
    assert m["requests"] == 4 and m["errors"] == 1
    assert m["prompt_tokens_mean"] == 8.0
    assert m["latency_s_p50"] == 2.0
    assert m["slo_attainment"] == 0.25  # only the 1.0 s request met e2e 1.5 s
    assert m["goodput_tokens_per_s"] == 2.0  # its 10 tokens / 5 s
    assert m["request_digests"] == ["d1", "d2"] and len(m["request_digest"]) == 16
    assert m["per_request"]["tag"] == ["round1/req0", "round1/req1", "round2/req0"]
    assert "offered_request_rate" not in m
    ol = cell_metrics(recs, [2.0, 3.0], [30, 20], request_rate=4.0)
    assert ol["offered_request_rate"] == 4.0 and ol["achieved_request_rate"] == 3 / 5
    assert ol["saturated"] is False


def test_planned_vs_engine_line() -> None:
    from pytest_specbench.report.summary import planned_vs_engine

    ev = {
        "group": "ar-tp2",
        "planned": {"kv_tokens_capacity": 2073162, "mem_fraction_static": 0.8},
        "info": {
            "scheduler_info": {"max_total_num_tokens": 2000000},
            "server_args": {"mem_fraction_static": 0.8},
        },
    }
    assert planned_vs_engine(ev) == (
        "ar-tp2: KV tokens planned 2,073,162 (mem_fraction_static 0.8), engine "
        "2,000,000 (mem_fraction_static 0.8): planned/engine = 1.037"
    )
    assert planned_vs_engine({"group": "x", "planned": {}, "info": {}}) is None
    ev["planned"]["budget_bytes_per_gpu"] = 115_016 * 2**20
    ev["gpu_used_mib_before"] = {"0": 618, "1": 618}
    ev["gpu_used_mib_after_start"] = {"0": 121_000, "1": 120_500}
    assert planned_vs_engine(ev).endswith(
        "; GPU memory held after start 120,382 MiB per GPU (NVML), planned static 115,016 MiB "
        "(weights + KV + state; the rest is CUDA graphs, context, activations)"
    )


def test_slo_attainment_and_goodput() -> None:
    from pytest_specbench.report.metrics import slo_metrics

    recs = [
        rec(ttft_s=0.100, latency_s=0.900),  # TTFT 100 ms, TPOT (0.9 - 0.1) / 8 = 100 ms: meets both
        rec(ttft_s=0.300, latency_s=0.900),  # TTFT 300 ms > 200: misses
        rec(ttft_s=0.100, latency_s=1.700),  # TPOT 200 ms > 150: misses
        rec(ttft_s=0.050, latency_s=0.050, output_tokens=1),  # one token: no TPOT, meets
        rec(ttft_s=None, latency_s=0.5, error="boom"),  # failed: misses
    ]
    m = slo_metrics(recs, 2.0, {"ttft_ms": 200, "tpot_ms": 150})
    assert m["slo"] == {"ttft_ms": 200, "tpot_ms": 150}
    assert m["slo_attainment"] == 2 / 5
    assert m["goodput_requests_per_s"] == 1.0  # 2 requests / 2 s
    assert m["goodput_tokens_per_s"] == (9 + 1) / 2.0
    # E2E only: 0.9, 0.9, 0.05 are within 1 s; 1.7 is not; the failed one never counts
    assert slo_metrics(recs, 2.0, {"e2e_s": 1.0})["slo_attainment"] == 3 / 5


def test_accept_rate_by_position_from_the_histogram() -> None:
    from pytest_specbench.report.metrics import accept_rate_by_position

    # 10 steps accepted 0 drafts, 30 accepted 1, 20 accepted 2, 40 accepted all 3:
    # position 1: 90 of 100; position 2: 60 of 90; position 3: 40 of 60
    assert accept_rate_by_position([10, 30, 20, 40]) == pytest.approx([0.9, 60 / 90, 40 / 60])
    assert accept_rate_by_position([0, 0, 0, 4096]) == [1.0, 1.0, 1.0]  # draft = target
    assert accept_rate_by_position([16320]) == []  # nothing proposed beyond position 0
    assert accept_rate_by_position([5, 0, 0]) == [0.0, None]  # position 2 never reached
