"""Speculative-parameter sweeps: lists in `speculative:` expand into one engine group per setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.planning.plan import make_plan
from pytest_specbench.report.tuning import tuning

HERE = Path(__file__).parent

SWEEP = """
models:
  t: {path: /x, load_format: dummy}
methods:
  ar: {backend: sglang, model: t}
  eagle3:
    backend: sglang
    model: t
    speculative: {algorithm: eagle3, draft_model: t, num_steps: [1, 3], topk: 1}
  ngram: {backend: sglang, model: t, speculative: {algorithm: ngram, num_draft_tokens: [4, 8, 12]}}
workloads:
  throughput: {concurrency: [1, 32], output_tokens: [256], prompt_tokens: 128}
  ttft: {methods: [ngram], concurrency: [1], output_tokens: [64], prompt_tokens: 128}
"""


def test_lists_expand_into_one_group_per_setting_with_readable_ids() -> None:
    m = parse(yaml.safe_load(SWEEP), "m.yaml")
    assert [g.id for g in m.groups()] == [
        "ar-tp1", "eagle3-s1-tp1", "eagle3-s3-tp1", "ngram-d4-tp1", "ngram-d8-tp1", "ngram-d12-tp1",
    ]  # fmt: skip
    e = {x.name: x for x in m.methods}
    assert e["eagle3-s3"].speculative.num_steps == 3 and e["eagle3-s3"].speculative.topk == 1
    assert e["eagle3-s3"].sweep == "eagle3" and e["eagle3-s3"].setting == (("num_steps", 3),)
    assert e["eagle3-s3"].speculative.expected_oracle_accept is None  # eagle3: no oracle rule
    ids = [c.id for c in m.cells()]
    assert "eagle3-s3-tp1-c32-out256" in ids
    # a workload restricted to the YAML name gets every setting
    assert [c.id for c in m.cells("ttft")] == [
        "ttft-ngram-d4-tp1-c1-out64", "ttft-ngram-d8-tp1-c1-out64", "ttft-ngram-d12-tp1-c1-out64",
    ]  # fmt: skip
    assert m.baselines()["ngram-d8"] == "ar"
    # each setting is planned (memory, running-request caps) and counted in the ETA
    p = make_plan(m.cells(), None)
    assert {"ngram-d4-tp1", "ngram-d12-tp1"} <= set(p.groups)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "{algorithm: eagle3, draft_model: t, num_steps: [3], num_draft_tokens: [8]}",
            "the setting num_steps=3, num_draft_tokens=8 is refused: with topk 1 the draft is a chain: "
            "sglang sets num_draft_tokens to num_steps + 1 (4), not 8",
        ),
        (
            "{algorithm: eagle3, draft_model: t, num_steps: 2, topk: 2, num_draft_tokens: [4, 8]}",
            "the setting num_steps=2, topk=2, num_draft_tokens=8 is refused: num_draft_tokens 8 exceeds the "
            "tree's topk x num_steps + 1 = 5 nodes",
        ),
        (
            "{algorithm: dflash, draft_model: t, num_steps: [1, 2]}",
            "num_steps=2 is refused: DFLASH drafts one block per step: sglang forces num_steps 1 and topk 1",
        ),
        (
            "{algorithm: ngram, num_steps: [1, 2]}",
            "algorithm 'ngram' takes num_draft_tokens, max_ngram; not num_steps",
        ),
        ("{algorithm: ngram, num_draft_tokens: [4, 4]}", "duplicate values in [4, 4]"),
    ],
    ids=["chain", "tree", "dflash", "ngram-steps", "dup"],
)
def test_refused_settings_name_the_reason(spec: str, message: str) -> None:
    doc = yaml.safe_load(SWEEP)
    doc["methods"]["x"] = {"backend": "sglang", "model": "t", "speculative": yaml.safe_load(spec)}
    with pytest.raises(MatrixError) as e:
        parse(doc, "m.yaml")
    assert "m.yaml: methods.x.speculative" in str(e.value) and message in str(e.value)


def test_a_sweep_cannot_be_the_baseline() -> None:
    doc = yaml.safe_load(SWEEP)
    doc["baseline"] = "ngram"
    with pytest.raises(MatrixError, match="baseline: 'ngram' is a sweep"):
        parse(doc, "m.yaml")


CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench.engines import register_backend
register_backend("fake", FakeEngine, gpu=False)
"""


def test_k_selects_settings(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "benches").mkdir()
    (pytester.path / "benches" / "specbench.yaml").write_text(SWEEP.replace("sglang", "fake"))
    (pytester.path / "benches" / "test_b.py").write_text(
        "def test_throughput(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )
    res = pytester.runpytest("benches", "--collect-only", "-q", "-k", "ngram-d8 and c32")
    assert [ln for ln in res.outlines if "::test_throughput[" in ln] == [
        "benches/test_b.py::test_throughput[ngram-d8-tp1-c32-out256]"
    ]
    res = pytester.runpytest(
        "benches",
        "-k",
        "ngram and c1 and throughput",
        "--benchmark-json",
        "out.json",
        "--specbench-summary=full",
    )
    res.assert_outcomes(passed=3)
    res.stdout.fnmatch_lines(
        ["tuning (per shape*", "  throughput tp1 c1 in128 out256: ngram: best num_draft_tokens=*"]
    )


def _entry(
    method: str, rates: list[float], setting: dict[str, int] | None, accept: float | None, **kw: object
) -> dict:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 1, "output_tokens": 64}
    extra = {
        "output_tokens_per_s": sum(rates) / len(rates),
        "round_tokens_per_s": rates,
        "request_digests": ["a", "b", "c"],
        "speedup_baseline": "ar",
        "accept_length": accept,
        **({"sweep": "ngram", "setting": setting} if setting else {}),
        **kw,
    }
    return {"param": method, "params": params, "extra_info": extra, "stats": {"data": [1.0] * len(rates)}}


def test_tuning_view_best_runner_up_and_separation() -> None:
    doc = {
        "benchmarks": [
            _entry("ar", [100.0, 101.0, 99.0], None, None),
            _entry(
                "ngram-d4",
                [150.0, 151.0, 149.0],
                {"num_draft_tokens": 4},
                2.5,
                speedup_vs_ar=1.5,
                speedup_vs_ar_ci95=[1.48, 1.52],
                speedup_verdict="faster",
                accept_rate_by_position=[0.9, 0.7, 0.5],
            ),
            _entry("ngram-d8", [120.0, 121.0, 119.0], {"num_draft_tokens": 8}, 2.9, speedup_vs_ar=1.2),
            _entry("ngram-d12", [148.0, 155.0, 146.0], {"num_draft_tokens": 12}, 3.0, speedup_vs_ar=1.49),
        ]
    }
    (line,) = tuning(doc)
    assert line.startswith(
        "throughput tp1 c1 out64: ngram: best num_draft_tokens=4 150.0 tok/s (x1.50 [1.48, 1.52] faster, "
        "accept 2.50, accept rate by position 0.90/0.70/0.50); runner-up num_draft_tokens=12 149.7 tok/s"
    )
    assert "best/runner-up x1.00" in line and line.count(": not separated") == 1
    assert line.endswith("then num_draft_tokens=8 120.0 tok/s (x1.20, accept 2.90)")
    # d12 slower in every round by 20 %: separated
    doc["benchmarks"][3]["extra_info"]["round_tokens_per_s"] = [120.0, 121.0, 119.0]
    doc["benchmarks"][3]["extra_info"]["output_tokens_per_s"] = 120.0
    doc["benchmarks"][2]["extra_info"]["round_tokens_per_s"] = [100.0, 100.5, 99.5]
    doc["benchmarks"][2]["extra_info"]["output_tokens_per_s"] = 100.0
    (line,) = tuning(doc)
    assert "runner-up num_draft_tokens=12" in line and line.count(": separated") == 1


def test_tuning_view_says_what_each_knob_did_on_its_own() -> None:
    def e(name: str, overlap: bool, v: str, rates: list[float]) -> dict:
        return _entry(name, rates, {"disable_overlap_schedule": overlap, "V": v}, 4.0, speedup_vs_ar=1.0)

    doc = {
        "benchmarks": [
            _entry("ar", [100.0, 101.0, 99.0], None, None),
            e("on-0", False, "0", [110.0, 111.1, 108.9]),  # overlap on: 10 % faster in every round
            e("off-0", True, "0", [100.0, 101.0, 99.0]),
            e("on-1", False, "1", [100.0, 101.0, 99.0]),  # with V=1: the same as overlap off
            e("off-1", True, "1", [100.0, 101.0, 99.0]),
        ]
    }
    lines = tuning(doc)
    assert len(lines) == 3, lines
    assert lines[1] == (
        "throughput tp1 c1 out64: ngram: V=0 over V=1: x1.10 [1.10, 1.10] faster (with "
        "disable_overlap_schedule=False); x1.00 [1.00, 1.00] within ±2% "
        "(with disable_overlap_schedule=True)"
    )
    assert lines[2] == (
        "throughput tp1 c1 out64: ngram: disable_overlap_schedule=False over disable_overlap_schedule=True: "
        "x1.10 [1.10, 1.10] faster (with V=0); x1.00 [1.00, 1.00] within ±2% (with V=1)"
    )
