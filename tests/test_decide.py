"""The decision view: methods ranked per cell shape, by TP size, and the SLO capacity."""

from __future__ import annotations

from pytest_specbench.decide import best_methods, slo_capacity, tp_scaling


def test_fastest_method_per_shape() -> None:
    """The decision view ranks the methods of one shape and one target model; a shape measured
    with one method only, and cells without throughput, are left out."""

    def entry(method: str, c: int, tps: float | None, base: str, sp: float | None, acc: float | None) -> dict:
        params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": c}
        params.update(context_tokens=128, output_tokens=256)
        extra = {
            "output_tokens_per_s": tps,
            "speedup_vs_ar": sp,
            "accept_length": acc,
            "speedup_baseline": base,
        }
        return {"param": f"{method}-c{c}", "params": params, "extra_info": extra}

    doc = {
        "benchmarks": [
            entry("ar", 1, 500.0, "ar", 1.0, None),
            entry("ngram", 1, 1680.5, "ar", 3.361, 9.846),
            entry("standalone", 1, 410.5, "ar", 0.821, 4.0),
            entry("hybrid-ar", 1, 592.7, "hybrid-ar", 1.0, None),
            entry("hybrid-ngram", 1, 2615.2, "hybrid-ar", 4.412, 10.24),
            entry("ar", 32, 11462.1, "ar", 1.0, None),
            entry("ngram", 32, None, "ar", None, None),  # failed: no throughput
        ]
    }
    assert best_methods(doc)[4:] == [
        "| shape | fastest | all methods, fastest first |",
        "|---|---|---|",
        "| throughput tp1 c1 in128 out256 (model of ar) | **ngram** | ngram 1680.5 (x3.36, accept 9.85) > "
        "ar 500.0 (x1.00) > standalone 410.5 (x0.82, accept 4.00) |",
        "| throughput tp1 c1 in128 out256 (model of hybrid-ar) | **hybrid-ngram** | "
        "hybrid-ngram 2615.2 (x4.41, accept 10.24) > hybrid-ar 592.7 (x1.00) |",
    ]
    assert best_methods({"benchmarks": doc["benchmarks"][5:]}) == []


def test_tp_scaling_lists_methods_measured_at_several_tp_sizes() -> None:
    def entry(method: str, tp: int, c: int, tps: float) -> dict:
        params = {"method": method, "tp": tp, "workload": "throughput", "concurrency": c}
        return {
            "param": f"{method}-tp{tp}-c{c}",
            "params": params,
            "extra_info": {"output_tokens_per_s": tps},
        }

    doc = {
        "benchmarks": [
            entry("ar", 1, 32, 11462.1),
            entry("ar", 2, 32, 10898.1),
            entry("ngram", 1, 32, 10855.4),  # one TP size only: not listed
        ]
    }
    assert tp_scaling(doc) == ["ar throughput c32: tp1 11462.1 (11462.1/GPU), tp2 10898.1 (5449.1/GPU)"]
    out = best_methods(doc)
    assert (
        out[1].startswith("Fastest method per cell shape")
        and out[4] == "| shape | fastest | all methods, fastest first |"
    )
    assert out[6:] == [
        "| throughput tp1 c32 | **ar** | ar 11462.1 > ngram 10855.4 |",
        "",
        "Output tok/s by TP size (and per GPU):",
        "",
        "- ar throughput c32: tp1 11462.1 (11462.1/GPU), tp2 10898.1 (5449.1/GPU)",
    ]


def test_methods_within_one_round_deviation_are_tied() -> None:
    """tok/s per round = output tokens / rounds / round time; "≈" where mean ± SD overlap."""

    def entry(method: str, times: list[float]) -> dict:
        params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 4}
        extra = {"output_tokens_per_s": 600 * len(times) / sum(times), "output_tokens": 600 * len(times)}
        return {"param": method, "params": params, "extra_info": extra, "stats": {"data": times}}

    # per round: ngram 600/2.0 = 300 and 600/1.5 = 400 (343 ± 71); draft 320 and 330 (325 ± 7);
    # ar 200 and 200 (± 0): ngram ≈ draft, both > ar
    doc = {
        "benchmarks": [
            entry("ar", [3.0, 3.0]),
            entry("ngram", [2.0, 1.5]),
            entry("draft", [600 / 320, 600 / 330]),
        ]
    }
    assert best_methods(doc)[-1] == (
        "| throughput tp1 c4 | **ngram** ≈ draft | ngram 342.9±70.7 ≈ draft 324.9±7.1 > ar 200.0±0.0 |"
    )


def test_slo_capacity_names_the_highest_concurrency_that_holds_the_slo() -> None:
    def entry(method: str, c: int, met: float) -> dict:
        params = {"method": method, "tp": 1, "workload": "ttft", "concurrency": c}
        extra = {
            "output_tokens_per_s": 100.0 * c,
            "slo_attainment": met,
            "goodput_tokens_per_s": 100.0 * c * met,
        }
        return {"param": f"{method}-c{c}", "params": params, "extra_info": extra}

    doc = {
        "benchmarks": [
            *(entry("ar", c, met) for c, met in ((1, 1.0), (4, 0.95), (16, 0.5))),
            *(entry("ngram", c, met) for c, met in ((1, 0.8), (4, 0.0))),
            entry("draft", 1, 1.0),  # one concurrency: nothing to say
        ]
    }
    assert slo_capacity(doc) == [
        "ar ttft tp1: highest holding c4 (goodput 380.0 tok/s); met c1 100%, c4 95%, c16 50%",
        "ngram ttft tp1: no concurrency; met c1 80%, c4 0%",
    ]
