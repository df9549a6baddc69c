"""python -m pytest_specbench.report: a results JSON as Markdown, and two compared cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.report import main


def _doc(cells: dict[str, tuple[float, float | None]], failed: list[dict] | None = None) -> dict:
    return {
        "benchmarks": [
            {
                "param": cid,
                "extra_info": {
                    "output_tokens_per_s": tps,
                    "accept_length": acc,
                    "speedup_vs_ar": None,
                    "latency_s_p50": 0.5,
                    "errors": 0,
                },
            }
            for cid, (tps, acc) in cells.items()
        ],
        "specbench": {"engine_starts": 2, "failed_cells": failed or []},
    }


def test_markdown_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    failed = {
        "cell": "sa-tp1-c1-out256",
        "phase": "setup",
        "error": "EngineStartError: sa-tp1: sglang.Engine failed to start: RuntimeError: died\n"
        "engine log says: AttributeError: 'NoneType' object has no attribute 'dim'\n--- tail",
        "reason": "",
    }
    old.write_text(
        json.dumps(_doc({"ar-tp1-c1-out256": (500.0, None), "ngram-tp1-c1-out256": (1000.0, 9.5)}))
    )
    new.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (450.0, None)}, [failed])))
    assert main([str(new)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| cell | tok/s | accept | vs ar | ttft p50 ms | tpot p50 ms | lat p50 s | err |",
        "|---|---|---|---|---|---|---|---|",
        "| ar-tp1-c1-out256 | 450.0 | - | - | - | - | 0.500 | 0 |",
        "- failed `sa-tp1-c1-out256` (setup): EngineStartError: sa-tp1: sglang.Engine failed to start: "
        "RuntimeError: died; engine log says: AttributeError: 'NoneType' object has no attribute 'dim'",
        "- engine starts: 2",
    ]
    assert main([str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| ar-tp1-c1-out256 | 500.0 | 450.0 | 0.900 | - | - |",
        "| ngram-tp1-c1-out256 | 1000.0 | absent | - | 9.500 | - |",
    ]


def test_bad_input_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit) as e:
        main([str(bad)])
    assert e.value.code == 2
    assert f"{bad}: not a results JSON (TypeError" in capsys.readouterr().err


def test_regression_gate_for_higher_is_better_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest-benchmark's compare gate fails only when a time goes up; tok/s and acceptance need
    their own: a drop beyond the allowed fraction, or a cell gone from the new run, exits 1."""
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(
        json.dumps(
            _doc(
                {
                    "ar-tp1-c1-out256": (500.0, None),
                    "ngram-tp1-c1-out256": (1000.0, 9.5),
                    "sa-tp1-c1-out256": (400.0, 4.0),
                }
            )
        )
    )
    crash = {"cell": "sa-tp1-c1-out256", "phase": "call", "error": "EngineCrashed: sa-tp1 died", "reason": ""}
    new.write_text(
        json.dumps(_doc({"ar-tp1-c1-out256": (480.0, None), "ngram-tp1-c1-out256": (990.0, 9.0)}, [crash]))
    )
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        f"1 regression(s) against {old}:",
        "- sa-tp1-c1-out256: measured in the old run, failed in the new one: EngineCrashed: sa-tp1 died",
    ]
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05", "--max-accept-drop", "0.02"]) == 1
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"2 regression(s) against {old}:",
        "- ngram-tp1-c1-out256: accept length 9.500 -> 9.000 (new/old 0.947, allowed down to 0.980)",
        "- sa-tp1-c1-out256: measured in the old run, failed in the new one: EngineCrashed: sa-tp1 died",
    ]
    assert main([str(old), str(new), "--max-tok-s-drop", "0.03"]) == 1
    assert capsys.readouterr().out.splitlines()[-3:-1] == [
        f"2 regression(s) against {old}:",
        "- ar-tp1-c1-out256: tok/s 500.000 -> 480.000 (new/old 0.960, allowed down to 0.970)",
    ]
    # within the allowed drops, and a cell not run (another -k) is no regression: exit 0
    new.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (480.0, None), "ngram-tp1-c1-out256": (990.0, 9.4)})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05", "--max-accept-drop", "0.02"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"0 regression(s) against {old}"
    with pytest.raises(SystemExit) as e:
        main([str(old), str(new), "--max-tok-s-drop", "5"])
    assert e.value.code == 2
    assert "expected a fraction in [0, 1), e.g. 0.05 for 5%; got '5'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(new), "--max-accept-drop", "0.02"])
    assert "compare two results JSONs (old new)" in capsys.readouterr().err


def test_cells_that_measured_other_work_are_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same id, other per-round work (e.g. `waves: 1` instead of 2 x concurrency): no ratio, no gate."""

    def doc(requests: int, rounds: int, tps: float) -> dict:
        d = _doc({"ar-tp1-c1-out256": (tps, None)})
        d["benchmarks"][0]["extra_info"].update(requests=requests, prompt_tokens=128 * requests)
        d["benchmarks"][0]["stats"] = {"data": [1.0] * rounds}
        return d

    old, new, same = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "same.json"
    old.write_text(json.dumps(doc(4, 2, 500.0)))
    new.write_text(json.dumps(doc(3, 3, 400.0)))
    same.write_text(json.dumps(doc(6, 3, 400.0)))  # 2 per round, as old: compared
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05"]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| ar-tp1-c1-out256 | 500.0 | 400.0 | other work | - | - |",
        "- `ar-tp1-c1-out256` measured other work in the two runs (requests per round 2 -> 1): not compared",
        "",
        f"0 regression(s) against {old}",
    ]
    assert main([str(old), str(same), "--max-tok-s-drop", "0.05"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "- ar-tp1-c1-out256: tok/s 500.000 -> 400.000 (new/old 0.800, allowed down to 0.950)"
    )


def test_fastest_method_per_shape() -> None:
    """The decision view ranks the methods of one shape and one target model; a shape measured
    with one method only, and cells without throughput, are left out."""
    from pytest_specbench.report import best_methods

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
    from pytest_specbench.report import best_methods, tp_scaling

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
    assert best_methods(doc) == [
        "",
        "Fastest method per cell shape (output tok/s ± its standard deviation across rounds; ≈: within",
        "one deviation of each other; x: speedup vs the AR method of the same model):",
        "",
        "| shape | fastest | all methods, fastest first |",
        "|---|---|---|",
        "| throughput tp1 c32 | **ar** | ar 11462.1 > ngram 10855.4 |",
        "",
        "Output tok/s by TP size (and per GPU):",
        "",
        "- ar throughput c32: tp1 11462.1 (11462.1/GPU), tp2 10898.1 (5449.1/GPU)",
    ]


def test_methods_within_one_round_deviation_are_tied() -> None:
    """tok/s per round = output tokens / rounds / round time; "≈" where mean ± SD overlap."""
    from pytest_specbench.report import best_methods

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
    from pytest_specbench.report import slo_capacity

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
