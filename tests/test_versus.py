"""Comparisons between any two methods of a shape: the matrix's `compare` pairs, `--versus METHOD`
on read, the tuning view's best against a named reference; hand-computed on committed runs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import yaml
from bench_project import THROUGHPUT_BENCH, fake_conftest, write_project

from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.report import summary, versus
from pytest_specbench.report.tuning import tuning
from pytest_specbench.stats import sequential

HERE = Path(__file__).parent
RESULTS = HERE.parent / "docs" / "results"

MATRIX = """
models:
  t: {path: /x, load_format: dummy}
methods:
  ar: {backend: sglang, model: t}
  dflash: {backend: sglang, model: t, speculative: {algorithm: dflash, draft_model: t}}
  ngram: {backend: sglang, model: t, speculative: {algorithm: ngram, num_draft_tokens: [4, 8]}}
workloads:
  throughput: {concurrency: [1], output_tokens: [64], prompt_tokens: 128}
"""


def test_the_compare_key_names_pairs_of_methods_and_refuses_what_it_cannot_compare() -> None:
    doc = yaml.safe_load(MATRIX)
    doc["compare"] = [["ngram", "dflash"], ["ngram-d8", "ar"]]  # a sweep, one of its settings
    assert parse(doc, "m.yaml").compare == (("ngram", "dflash"), ("ngram-d8", "ar"))
    assert parse(yaml.safe_load(MATRIX), "m.yaml").compare == ()
    from pytest_specbench.matrix.schema import load

    seed = load(HERE.parent / "benches" / "examples" / "seed-experiment.yaml")
    assert seed.compare[0] == ("ddtree", "dflash")  # the seed's headline comparison, then each against MTP
    for bad, message in (
        ("ngram", "m.yaml: compare: expected a list of [method, method] pairs"),
        ([["ngram"]], "m.yaml: compare[0]: expected two method names, e.g. [ddtree, dflash]; got ['ngram']"),
        (
            [["ngram", "eagle"]],
            "m.yaml: compare[0][1]: 'eagle' is not defined under methods:; defined: ar, dflash, ngram, "
            "ngram-d4, ngram-d8",
        ),
        ([["ar", "ar"]], "m.yaml: compare[0]: compares 'ar' with itself"),
        ([["ar", "dflash"], ["dflash", "ar"]], "m.yaml: compare[1]: [dflash, ar] is given twice"),
    ):
        doc["compare"] = bad
        with pytest.raises(MatrixError) as e:
            parse(doc, "m.yaml")
        assert str(e.value).startswith(message)


def _hand_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Geometric mean of a[i] / b[i] and its 95% t-interval on the logs, from the t table."""
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
    t = {2: 4.303, 4: 2.776}[len(logs) - 1]
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    m = statistics.fmean(logs)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def _rates(doc: dict, cell: str) -> list[float]:
    (b,) = [b for b in doc["benchmarks"] if b["param"] == cell]
    return b["extra_info"]["round_tokens_per_s"]


def test_versus_on_a_committed_run_equals_the_interval_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """h200-paired re-based on standalone on read: at c1 its best setting is standalone-s5 (432.5
    tok/s against 408.2 and 362.8), and ngram-d12 over it is the geometric mean of the five paired
    rounds' ratios with a t-interval (4 degrees of freedom), as computed here from the rounds;
    the same run re-based on ar gives back the speedups the run recorded against ar."""
    path = RESULTS / "h200-paired" / "h200-paired.json"
    doc = json.loads(path.read_text())
    x, lo, hi = _hand_interval(
        _rates(doc, "ngram-d12-tp1-c1-out256"), _rates(doc, "standalone-s5-tp1-c1-out256")
    )
    assert summary.main([str(path), "--versus", "standalone"]) == 0
    out = capsys.readouterr().out
    assert (
        f"- ngram-d12 vs standalone throughput tp1 c1 in128 out256: x{x:.2f} [{lo:.2f}, {hi:.2f}] faster "
        "(ngram-d12 2164.7 tok/s; standalone-s5 432.5 tok/s)"
    ) in out.splitlines()
    assert (x, lo, hi) == pytest.approx((5.006, 4.895, 5.119), abs=5e-4)
    doc["specbench"]["versus"] = "ar"
    for c in versus.comparisons(doc):
        (b,) = [b for b in doc["benchmarks"] if b is c["cells"][0]]
        assert c["speedup_vs_ar"] == pytest.approx(b["extra_info"]["speedup_vs_ar"])
        assert c["speedup_vs_ar_ci95"] == pytest.approx(b["extra_info"]["speedup_vs_ar_ci95"])
        assert c["speedup_verdict"] == b["extra_info"]["speedup_verdict"]
    assert len(versus.comparisons(doc)) == 12  # six methods at two concurrencies


def test_dflash_against_eagle3_on_the_committed_break_even_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The two forced runs read together: DFLASH over EAGLE3 per shape, at every forced length both
    ran (1, 2, 4), each with its interval and verdict, marked across runs; c8 at forced 2 by hand."""
    runs = [str(RESULTS / "h200-breakeven" / f) for f in ("eagle3.json", "dflash.json")]
    assert summary.main([*runs, "--versus", "eagle3"]) == 0
    got = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("- dflash vs eagle3 ")]
    assert [ln.split(" at forced accept ")[1][:1] for ln in got] == ["1", "2", "4"] * 3
    assert [ln.split()[6] for ln in got] == ["c1"] * 3 + ["c8"] * 3 + ["c32"] * 3
    dflash, eagle3 = (json.loads(Path(p).read_text()) for p in reversed(runs))
    x, lo, hi = _hand_interval(
        _rates(dflash, "dflash-a2-tp1-c8-out128"), _rates(eagle3, "eagle3-a2-tp1-c8-out128")
    )
    assert got[4] == (
        f"- dflash vs eagle3 throughput tp1 c8 in512 out128 at forced accept 2 (a verify step's cost): "
        f"x{x:.2f} [{lo:.2f}, {hi:.2f}] faster (across runs) (dflash-a2 3340.1 tok/s; eagle3-a2 2490.6 tok/s)"
    )
    for ln in got:
        assert any(f"] {v} (across runs)" in ln for v in ("faster", "slower", "not separated", "within ±2%"))


def _cell(method: str, rates: list[float], **extra: object) -> dict:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 1}
    e = {
        "output_tokens_per_s": statistics.fmean(rates),
        "round_tokens_per_s": rates,
        "request_digests": ["d0", "d1", "d2"],
        "speedup_baseline": "ar",
        **extra,
    }
    return {"param": f"{method}-c1", "params": params, "extra_info": e, "stats": {"data": [1.0] * 3}}


def _tree_doc() -> dict:
    return {
        "benchmarks": [
            _cell("ar", [100.0, 100.0, 100.0]),
            _cell("dflash", [200.0, 210.0, 190.0], accept_length=3.0),
            _cell(
                "ddtree-b4", [220.0, 230.0, 215.0], sweep="ddtree", setting={"budget": 4}, accept_length=3.5
            ),
            _cell(
                "ddtree-b8", [250.0, 262.0, 235.0], sweep="ddtree", setting={"budget": 8}, accept_length=4.0
            ),
            _cell("ddtree-b16", [400.0, 400.0, 400.0], sweep="ddtree", race={"status": "dropped"}),
            _cell("dflash-a4", [900.0, 900.0, 900.0], accept_forced=4.0, forced_family="dflash"),
        ],
        "specbench": {"compare": [["ddtree", "dflash"]]},
    }


def test_a_swept_method_is_its_best_setting_and_the_tuning_view_names_the_reference() -> None:
    """compare: [[ddtree, dflash]]: ddtree's best setting here is b8 (249.0 tok/s; b16 was dropped
    by a race and is never a side), the setting its pooled line chose, over dflash by hand and
    named; the tuning view puts the same figure after best/runner-up; a forced dflash-a4 is never
    compared with a drafter."""
    doc = _tree_doc()
    x, lo, hi = _hand_interval([250.0, 262.0, 235.0], [200.0, 210.0, 190.0])
    assert versus.lines(doc) == [
        f"ddtree-b8 vs dflash throughput tp1 c1: x{x:.2f} [{lo:.2f}, {hi:.2f}] faster "
        "(ddtree-b8 249.0 tok/s; dflash 200.0 tok/s)"
    ]
    (line,) = tuning(doc)
    rx, rlo, rhi = _hand_interval([250.0, 262.0, 235.0], [220.0, 230.0, 215.0])
    # the best of the 2 settings ranked here: its interval at 5 % / 2 (t 6.205 with 2 degrees of
    # freedom, not 4.303), so that a best of K is not "faster" more often than one setting would be
    logs = [math.log(a / b) for a, b in zip([250.0, 262.0, 235.0], [200.0, 210.0, 190.0], strict=True)]
    half = sequential.t_quantile(0.025, 2) * statistics.stdev(logs) / math.sqrt(3)
    blo, bhi = math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)
    assert line.endswith(
        f"best/runner-up x{rx:.2f} [{rlo:.2f}, {rhi:.2f}]: separated; "
        f"best of 2 vs dflash: x{x:.2f} [{blo:.2f}, {bhi:.2f}] faster (corrected for the choice)"
    )
    assert (blo, bhi) == pytest.approx((1.22, 1.27), abs=0.005) and (lo, hi) == pytest.approx(
        (1.23, 1.26), abs=0.005
    )
    doc["benchmarks"][1]["extra_info"]["disturbed"] = "other processes took 40% of the cores"
    (line,) = versus.lines(doc)
    assert "] no verdict: its baseline was disturbed (other processes took 40% of the cores) (" in line
    markdown = "\n".join(summary.markdown(doc))
    assert "Comparisons between methods" in markdown and "- ddtree vs dflash throughput tp1 c1: " in markdown
    from pytest_specbench.report.html import render

    assert "<li>ddtree vs dflash throughput tp1 c1: x1.24 [" in render(doc, summary.markdown(doc), [])
    (row,) = versus.plot_rows(doc)  # versus.png's one point: c1, ddtree over dflash with its interval
    assert (row["panel"], row["series"], row["x"]) == ("ddtree vs dflash throughput tp1", "measured", 1)
    assert (row["y"], row["lo"], row["hi"]) == pytest.approx((x, lo, hi))


def test_versus_must_name_a_method_of_the_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_tree_doc()))
    with pytest.raises(SystemExit):
        summary.main([str(run), "--versus", "eagle"])
    assert "--versus eagle: no such method in the run; methods: ar, ddtree, ddtree-b16, ddtree-b4" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        summary.main([str(run), str(run), "--versus", "ar", "--html", str(tmp_path / "r.html")])
    assert "--versus with several JSONs prints their comparisons only" in capsys.readouterr().err


CONFTEST = fake_conftest("FakeEngine", 'register_backend("fake", FakeEngine, gpu=False)')


def test_a_run_records_its_compare_pairs_and_prints_them(pytester: pytest.Pytester) -> None:
    """`compare: [[ngram, ar]]` travels into the results JSON (specbench.compare, beside the matrix)
    and the summary prints the setting of ngram its pooled line chose against ar (ngram itself,
    its best setting, where every shape was left out: disturbed, measured apart)."""
    matrix = MATRIX.replace("sglang", "fake").replace(
        "  dflash: {backend: fake, model: t, speculative: {algorithm: dflash, draft_model: t}}\n", ""
    )
    write_project(pytester, matrix + "compare: [[ngram, ar]]\n", CONFTEST, THROUGHPUT_BENCH, "test_b.py")
    res = pytester.runpytest("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=3)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["specbench"]["compare"] == [["ngram", "ar"]]
    res.stdout.fnmatch_lines(
        ["comparisons between methods*", "  ngram* vs ar throughput tp1 c1 in128 out64: x*"]
    )
