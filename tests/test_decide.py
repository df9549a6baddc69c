"""The decision view: methods ranked per cell shape, by TP size, and the SLO capacity."""

from __future__ import annotations

from pytest_specbench.report.decide import best_methods, slo_capacity, tp_scaling


def _entry(
    method: str, rates: list[float], base: str = "ar", digests: list[str] | None = None, **kw: object
) -> dict:
    """A closed-loop cell with one round per rate (1 s each); speedup fields as compare_all writes them."""
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": kw.pop("c", 1)}
    params.update(context_tokens=128, output_tokens=256)
    extra = {
        "output_tokens_per_s": sum(rates) / len(rates),
        "round_tokens_per_s": rates,
        "request_digests": digests or [f"d{i}" for i in range(len(rates))],
        "speedup_baseline": base,
        **kw,
    }
    return {
        "param": f"{method}-c{params['concurrency']}",
        "params": params,
        "extra_info": extra,
        "stats": {"data": [1.0] * len(rates)},
    }


def test_fastest_method_per_shape() -> None:
    """The decision view ranks the methods of one shape and one target model by tok/s, each after
    the first as "next M x.. vs P" (M over the method before it, as the end-of-run screen reads); the
    baseline after a method whose x over it is said is named as such; a shape measured with one
    method only, and cells without throughput, are left out."""
    doc = {
        "benchmarks": [
            _entry("ar", [500.0, 510.0, 490.0], speedup_vs_ar=1.0),
            _entry(
                "ngram",
                [1680.0, 1700.0, 1660.0],
                speedup_vs_ar=3.36,
                speedup_vs_ar_ci95=[3.3, 3.4],
                speedup_verdict="faster",
                accept_length=9.846,
            ),
            _entry(
                "standalone",
                [410.0, 420.0, 400.0],
                speedup_vs_ar=0.82,
                speedup_vs_ar_ci95=[0.80, 0.84],
                speedup_verdict="slower",
                accept_length=4.0,
            ),
            _entry("hybrid-ar", [592.7, 592.7, 592.7], "hybrid-ar", speedup_vs_ar=1.0),
            _entry("hybrid-ngram", [2615.2], "hybrid-ar", speedup_vs_ar=4.41, accept_length=10.24),
            {**_entry("ngram", [1.0], c=32), "extra_info": {"output_tokens_per_s": None}},  # failed
            _entry("ar", [11462.1], c=32),
        ]
    }
    assert best_methods(doc)[8:] == [
        "| shape | fastest | all methods, fastest first |",
        "|---|---|---|",
        "| throughput tp1 c1 in128 out256 (model of ar) | **ngram** | ngram 1680.0 tok/s (x3.36 [3.30, 3.40] "
        "faster vs ar, accept 9.85); next ar 500.0 tok/s (the baseline); next standalone x0.82 [0.80, 0.84] "
        "slower vs ar (410.0 tok/s, accept 4.00) |",
        # one round of hybrid-ngram: no interval, so no verdict, and said so (never a sign of a tie)
        "| throughput tp1 c1 in128 out256 (model of hybrid-ar) | no verdict (hybrid-ar vs hybrid-ngram: "
        "no interval, 1 round) | hybrid-ngram 2615.2 tok/s (x4.41 vs hybrid-ar, accept 10.24); next "
        "hybrid-ar 592.7 tok/s (the baseline) |",
        "",
        # where each method with a verdict stands against its baseline (hybrid-ngram has none)
        "Crossover (per method, TP and shape: against its baseline, by concurrency):",
        "",
        "- ngram tp1 throughput in128 out256: faster at c1",
        "- standalone tp1 throughput in128 out256: slower at c1",
    ]
    assert best_methods({"benchmarks": doc["benchmarks"][5:]}) == []


def test_neighbours_are_compared_pairwise() -> None:
    """draft over ngram round by round: 320/300, 330/400, 325/350 -> ratios straddle 1: not
    separated; ar over draft (200 per round): slower; cells of other requests (digests) are never
    ranked against each other."""
    doc = {
        "benchmarks": [
            _entry("ar", [200.0, 201.0, 199.0]),
            _entry("ngram", [300.0, 400.0, 350.0]),
            _entry("draft", [320.0, 330.0, 325.0]),
        ]
    }
    row = best_methods(doc)[-1]
    assert row == (
        "| throughput tp1 c1 in128 out256 | no verdict (draft vs ngram: not separated) | ngram 350.0 tok/s; "
        "next draft x0.93 [0.68, 1.29] not separated vs ngram (325.0 tok/s); next ar x0.62 [0.59, 0.64] "
        "slower vs draft (the baseline, 200.0 tok/s) |"
    )
    doc["benchmarks"][2]["extra_info"]["request_digests"] = ["x", "y", "z"]
    row = best_methods(doc)[-1]
    # unpaired: no verdict, whatever the numbers
    assert "| no verdict (draft vs ngram: unpaired) | ngram 350.0 tok/s; next draft unpaired (" in row


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
        and out[8] == "| shape | fastest | all methods, fastest first |"
    )
    assert out[10:] == [
        "| throughput tp1 c32 | no verdict (ngram vs ar: no paired comparison) | ar 11462.1 tok/s; next "
        "ngram no paired comparison vs ar (10855.4 tok/s) |",
        "",
        "Output tok/s by TP size (and per GPU):",
        "",
        "- ar throughput c32: tp1 11462.1 (11462.1/GPU), tp2 10898.1 (5449.1/GPU)",
    ]


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
