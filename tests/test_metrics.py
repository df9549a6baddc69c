"""Pure metric functions against hand-computed numbers."""

from __future__ import annotations

import pytest

from pytest_specbench.engines.base import RequestRecord
from pytest_specbench.stats.metrics import accept_length, cell_metrics, itl_gaps, percentile, summarize, tpot
from pytest_specbench.stats.paired import compare_all


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
    # the headline is what the paired speedup rests on: the rounds' geometric mean
    assert m["output_tokens_per_s"] == pytest.approx((15.0 * 20 / 3) ** 0.5)  # 10.0
    assert m["output_tokens_per_s_total"] == 10.0  # 50 tokens / (2 + 3) s, not / max(2, 3)
    assert m["round_tokens_per_s"] == [15.0, 20 / 3]
    assert m["tok_s_estimator"] == "round wall time" and m["metrics_version"] == 2
    assert cell_metrics(recs, [2.0, 3.0], [30, 20], one_wave=True)["tok_s_estimator"] == "one wave"
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
    from pytest_specbench.stats.metrics import slo_metrics

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
    from pytest_specbench.stats.metrics import accept_rate_by_position

    # 10 steps accepted 0 drafts, 30 accepted 1, 20 accepted 2, 40 accepted all 3:
    # position 1: 90 of 100; position 2: 60 of 90; position 3: 40 of 60
    assert accept_rate_by_position([10, 30, 20, 40]) == pytest.approx([0.9, 60 / 90, 40 / 60])
    assert accept_rate_by_position([0, 0, 0, 4096]) == [1.0, 1.0, 1.0]  # draft = target
    assert accept_rate_by_position([16320]) == []  # nothing proposed beyond position 0
    assert accept_rate_by_position([5, 0, 0]) == [0.0, None]  # position 2 never reached


def _timed(start: float, end: float, out: int, **kw: object) -> RequestRecord:
    return RequestRecord(8, out, end - start, start_s=start, end_s=end, **kw)  # type: ignore[arg-type]


def test_steady_window_cut_by_hand() -> None:
    """C = 2, N = 4: slots are both busy from the 2nd submission (t=0.1) to the 3rd completion
    (t=2.0), the first completion after the last submission (t=1.5)."""
    from pytest_specbench.stats.metrics import steady_window

    recs = [
        _timed(0.0, 1.0, 10),  # 10 tokens over 1 s: 9 of them after 0.1
        _timed(0.1, 1.5, 14),  # all 14 inside
        _timed(1.0, 2.0, 10),  # all 10 inside
        _timed(1.5, 3.5, 20),  # 0.5 s of its 2 s inside: 5 tokens
    ]
    w = steady_window(recs, 2)
    assert (w["start_s"], w["end_s"]) == (0.1, 2.0)
    assert w["tokens"] == pytest.approx(9 + 14 + 10 + 5)
    assert w["tokens_per_s"] == pytest.approx(38 / 1.9)
    # a streamed request counts its chunks (times since its submission), not an even spread
    streamed = _timed(1.5, 3.5, 20, chunks=((0.2, 1), (0.4, 12), (2.0, 20)))
    assert steady_window([*recs[:3], streamed], 2)["tokens"] == pytest.approx(9 + 14 + 10 + 12)
    # one wave (N <= C), or a request without its times: no window
    assert steady_window(recs[:2], 2) is None
    assert steady_window([*recs[:3], RequestRecord(8, 20, 1.0)], 2) is None
    # the cell: rounds' window rates, their geometric mean as the headline, the total beside it
    m = cell_metrics(recs, [3.5], [54], round_windows=[w])
    assert m["tok_s_estimator"] == "steady window"
    assert m["round_tokens_per_s"] == [pytest.approx(38 / 1.9)]
    assert m["output_tokens_per_s"] == pytest.approx(38 / 1.9)
    assert m["output_tokens_per_s_total"] == pytest.approx(54 / 3.5)
    assert m["steady_windows"] == [[0.1, 2.0, 38.0]] and m["window_fraction"] == pytest.approx(1.9 / 3.5)


def test_an_outlier_round_is_named() -> None:
    from pytest_specbench.stats.metrics import outlier_rounds

    assert outlier_rounds([13.0, 306.0, 362.0]) == [0]  # a cold first round
    assert outlier_rounds([300.0, 306.0, 362.0]) == []  # 18 % apart: noise, not an outlier
    assert outlier_rounds([13.0, 306.0]) == []  # two rounds: no median of others to judge by
    recs = [RequestRecord(8, n, 1.0, tag=f"round{i}/req0") for i, n in enumerate((13, 306, 362))]
    m = cell_metrics(recs, [1.0, 1.0, 1.0], [13, 306, 362])
    assert m["outlier_rounds"] == [{"round": 0, "tokens_per_s": 13.0, "median_tokens_per_s": 306.0}]


def test_acceptance_by_position_counts_only_steps_that_proposed_it() -> None:
    """Ten verify steps of K = 2: four proposed nothing (no n-gram match), six proposed two drafts;
    of those, two rejected position 1, one accepted 1 and rejected 2, three accepted both."""
    hist = (4 + 2, 1, 3)  # steps by drafts accepted
    r = RequestRecord(
        8,
        20,
        1.0,
        verify_steps=10,
        accept_histogram=hist,
        draft_steps=6,
        draft_tokens=12,
        position_reached=(6, 4),
    )
    m = cell_metrics([r], [1.0], [20])
    assert m["draft_steps"] == 6 and m["draft_tokens"] == 12 and m["no_draft_fraction"] == 0.4
    assert m["accept_rate_by_position"] == [4 / 6, 3 / 4]
    assert m["accept_rate_by_position_basis"] == "steps that proposed the position"
    # without the drafts (an engine that does not report them) the histogram alone: 4 / 10
    bare = RequestRecord(8, 20, 1.0, verify_steps=10, accept_histogram=hist)
    assert cell_metrics([bare], [1.0], [20])["accept_rate_by_position"] == [4 / 10, 3 / 4]
