"""End-to-end plugin behaviour through pytester, with FakeEngine (tests/fake_engine.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_project import THROUGHPUT_BENCH, count_starts, write_project
from fake_engine import CONFTEST

HERE = Path(__file__).parent


MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 3}}
  eagle3: {backend: fake, model: m, speculative: {algorithm: eagle3, draft_model: m, num_draft_tokens: 4}}
tp: [1, 2]
workloads:
  throughput:
    concurrency: [1, 4]
    output_tokens: [16]
    prompt_tokens: 8
    rounds: 2
    warmup: 1
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    write_project(pytester, MATRIX, CONFTEST, THROUGHPUT_BENCH, "test_throughput.py")
    count_starts(monkeypatch, tmp_path / "starts.txt")
    return pytester


def starts(tmp_path: Path) -> list[str]:
    p = tmp_path / "starts.txt"
    return p.read_text().split("\n")[:-1] if p.exists() else []


def collected_ids(result: pytest.RunResult) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.outlines if "::test_throughput[" in line]


def test_ids_and_k_selection(project: pytest.Pytester) -> None:
    res = project.runpytest("benches", "--collect-only", "-q")
    ids = collected_ids(res)
    assert ids[:4] == ["ar-tp1-c1-out16", "ar-tp1-c4-out16", "ar-tp2-c1-out16", "ar-tp2-c4-out16"]
    assert len(ids) == 12
    res = project.runpytest("benches", "--collect-only", "-q", "-k", "ngram and c4")
    assert collected_ids(res) == ["ngram-tp1-c4-out16", "ngram-tp2-c4-out16"]


def test_engine_starts_equal_selected_groups(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest("benches", "-k", "tp2 or ngram")
    res.assert_outcomes(passed=8)
    assert [s.split()[0] for s in starts(tmp_path)] == ["ar-tp2", "ngram-tp1", "ngram-tp2", "eagle3-tp2"]


def test_items_sorted_by_group(project: pytest.Pytester) -> None:
    items, _ = project.inline_genitems("benches")
    groups = [it.callspec.params["cell"].group.id for it in items]
    # each group's items are contiguous
    seen: list[str] = []
    for g in groups:
        if not seen or seen[-1] != g:
            assert g not in seen
            seen.append(g)
    assert len(seen) == 6


@pytest.mark.slow
def test_xdist_one_start_per_group_and_one_json(project: pytest.Pytester, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = project.runpytest_subprocess("benches", "-n", "2", "--benchmark-json", str(out))
    res.assert_outcomes(passed=12)
    s = starts(tmp_path)
    assert sorted(x.split()[0] for x in s) == sorted(
        f"{m}-tp{t}" for m in ("ar", "ngram", "eagle3") for t in (1, 2)
    )
    assert {x.split()[1] for x in s} <= {"gw0", "gw1"}
    doc = json.loads(out.read_text())
    assert len(doc["benchmarks"]) == 12
    assert doc["specbench"]["engine_starts"] == 6


def test_json_contents_and_compare(project: pytest.Pytester, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = project.runpytest(
        "benches", "-k", "tp1", "--benchmark-json", str(out), "--specbench-summary", "full"
    )
    res.assert_outcomes(passed=6)
    # the decision view: per shape every method, fastest first (order is timing: not asserted)
    summary = res.stdout.str().split("fastest method per cell shape (", 1)[1].splitlines()
    for c in (1, 4):
        line = next(ln for ln in summary if ln.startswith(f"  throughput tp1 c{c} in8 out16: "))
        methods = line.split(": ", 1)[1].split("; next ")
        assert sorted(m.split()[0] for m in methods) == ["ar", "eagle3", "ngram"]
    doc = json.loads(out.read_text())
    by = {b["param"]: b for b in doc["benchmarks"]}
    b = by["ngram-tp1-c4-out16"]
    assert b["params"] == {
        "method": "ngram",
        "tp": 1,
        "workload": "throughput",
        "concurrency": 4,
        "context_tokens": 8,
        "output_tokens": 16,
    }
    e = b["extra_info"]
    for key in (
        "output_tokens_per_s",
        "accept_length",
        "requests",
        "output_tokens",
        "latency_s_p50",
        "latency_s_p99",
        "speedup_vs_ar",
    ):
        assert key in e
    assert e["requests"] == 32 and e["output_tokens"] == 32 * 16  # 2 rounds x 16 requests (4 waves of C)
    assert e["accept_length"] == 4.0  # 16 tokens: 1 from prefill + 4 verify steps (4, 4, 4, 3)
    assert by["ar-tp1-c4-out16"]["extra_info"]["accept_length"] is None
    ar = by["ar-tp1-c4-out16"]["extra_info"]
    assert ar["speedup_vs_ar"] == 1.0
    # ngram over ar: the geometric mean of the paired rounds' tok/s ratios (same requests)
    assert e["request_digests"] == ar["request_digests"] and len(e["request_digests"]) == 2
    # a round's tok/s is its steady window's (every slot busy); its tokens / its time beside it
    assert e["tok_s_estimator"] == "steady window" and len(e["steady_windows"]) == 2
    # (the windows are stored to the microsecond)
    assert e["round_tokens_per_s"] == pytest.approx(
        [w[2] / (w[1] - w[0]) for w in e["steady_windows"]], rel=1e-2
    )
    assert e["round_tokens_per_s_total"] == [16 * 16 / t for t in b["stats"]["data"]]  # 16 requests x 16
    assert e["output_tokens_per_s"] == pytest.approx(
        (e["round_tokens_per_s"][0] * e["round_tokens_per_s"][1]) ** 0.5
    )
    ratios = [x / y for x, y in zip(e["round_tokens_per_s"], ar["round_tokens_per_s"], strict=True)]
    assert e["speedup_vs_ar"] == pytest.approx((ratios[0] * ratios[1]) ** 0.5)
    # one estimator: "vs ar" is the ratio of the two cells' shown tok/s
    assert e["speedup_vs_ar"] == pytest.approx(e["output_tokens_per_s"] / ar["output_tokens_per_s"])
    lo, hi = e["speedup_vs_ar_ci95"]
    assert lo <= e["speedup_vs_ar"] <= hi and e["speedup_pairs"] == 2
    assert e["speedup_metric"].startswith("output tok/s ratio (paired rounds")
    assert b["stats"]["rounds"] == 2 and len(b["stats"]["data"]) == 2
    assert doc["machine_info"]["specbench"]["gpus"] == []
    assert doc["specbench"]["engine_starts"] == 3
    copy = tmp_path / "copy.json"
    copy.write_text(out.read_text())
    cp = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(out), str(copy)],
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0, cp.stderr
    assert "ngram-tp1-c4-out16" in cp.stdout


def test_backend_tp_limit_skips_with_reason(project: pytest.Pytester) -> None:
    (project.path / "benches" / "specbench.yaml").write_text(MATRIX.replace("tp: [1, 2]", "tp: [1, 8]"))
    res = project.runpytest("benches", "-rs", "-k", "ar")
    res.assert_outcomes(passed=2, skipped=2)
    res.stdout.fnmatch_lines(["*cell ar-tp8-c1-out16 skipped: ar-tp8: backend 'fake' runs at most TP=4*"])
    # the summary says why, without -rs, also when no cell ran at all
    only = project.runpytest("benches", "-k", "ar and tp8")
    only.assert_outcomes(skipped=2)
    only.stdout.fnmatch_lines(
        [
            "*specbench summary*",
            "skipped: 2 cells: ar-tp8: backend 'fake' runs at most TP=4*(ar-tp8-c1-out16, ar-tp8-c4-out16)",
        ]
    )


def test_failing_engine_fails_only_its_group(project: pytest.Pytester, tmp_path: Path) -> None:
    m = MATRIX.replace("tp: [1, 2]", "tp: [1]").replace(
        "  ar: {backend: fake, model: m}",
        "  ar: {backend: fake, model: m}\n  broken: {backend: fake, model: m}",
    )
    (project.path / "benches" / "specbench.yaml").write_text(m)
    out = tmp_path / "o.json"
    res = project.runpytest("benches", "--benchmark-json", str(out))
    res.assert_outcomes(passed=6, errors=2)
    doc = json.loads(out.read_text())
    assert len(doc["benchmarks"]) == 6
    failed = doc["specbench"]["failed_cells"]
    assert {f["cell"] for f in failed} == {"broken-tp1-c1-out16", "broken-tp1-c4-out16"}
    assert "refuses to start" in failed[0]["reason"]
    assert failed[0]["error"] == "RuntimeError: fake engine broken-tp1 refuses to start"
    assert [g["ok"] for g in doc["specbench"]["engine_groups"]].count(False) == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("prompt_tokens: 8", "prompt_tokens: 8\n    colour: red"),
            "specbench.yaml: workloads.throughput.colour: unknown key; allowed: kind, concurrency",
        ),
        (
            ("concurrency: [1, 4]", "concurrency: [1, -4]"),
            "specbench.yaml: workloads.throughput.concurrency[1]: expected a positive integer; got -4",
        ),
        (
            ("backend: fake, model: m}", "backend: vllm, model: m}"),
            "specbench.yaml: methods.ar.backend: 'vllm' is not a registered backend; allowed: hf, sglang",
        ),
        (
            ("algorithm: ngram", "algorithm: dd tree"),
            "specbench.yaml: methods.ngram.speculative.algorithm: 'dd tree' is not an algorithm name; "
            "known: ngram, draft",
        ),
        (
            ("draft_model: m,", "draft_model: nope,"),
            "specbench.yaml: methods.eagle3.speculative.draft_model: 'nope' is not defined under models:",
        ),
    ],
)
def test_yaml_errors_are_usage_errors(project: pytest.Pytester, edit: tuple[str, str], message: str) -> None:
    (project.path / "benches" / "specbench.yaml").write_text(MATRIX.replace(*edit, 1))
    res = project.runpytest("benches", "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: *{message.replace('[', '[[]')}*"])


def test_matrix_option_and_ini(project: pytest.Pytester) -> None:
    alt = project.path / "alt.yaml"
    alt.write_text(MATRIX.replace("tp: [1, 2]", "tp: [4]"))
    res = project.runpytest("benches", "--collect-only", "-q", "--specbench-matrix", str(alt))
    assert all("-tp4-" in i for i in collected_ids(res)) and len(collected_ids(res)) == 6
    project.makeini("[pytest]\nspecbench_matrix = alt.yaml\n")
    res = project.runpytest("benches", "--collect-only", "-q")
    assert len(collected_ids(res)) == 6
    res = project.runpytest("benches", "--specbench-matrix", "missing.yaml")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*matrix file 'missing.yaml' does not exist*"])


def test_cell_done_hook_adds_extra_info(project: pytest.Pytester, tmp_path: Path) -> None:
    project.makeconftest(
        CONFTEST + "\ndef pytest_specbench_cell_done(config, result):\n"
        "    result['metrics']['team'] = 'infra'\n"
    )
    out = tmp_path / "o.json"
    project.runpytest("benches", "-k", "ar and tp1 and c1", "--benchmark-json", str(out)).assert_outcomes(
        passed=1
    )
    assert json.loads(out.read_text())["benchmarks"][0]["extra_info"]["team"] == "infra"


def test_help_and_collection_do_not_import_heavy_modules(project: pytest.Pytester) -> None:
    code = (
        "import sys, pytest; pytest.main(['--collect-only', '-q', 'benches']); "
        "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'sglang') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=project.path, capture_output=True, text=True)
    assert "HEAVY []" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("limit", ["yaml", "option"])
def test_hung_engine_fails_its_group_only(project: pytest.Pytester, tmp_path: Path, limit: str) -> None:
    # the cell limit from the workload's timeout_s, or from --specbench-timeout over a YAML's 300 s;
    # 5 s: the healthy groups' cells must finish within it beside two busy loops (1 s did not)
    yaml_limit = "5" if limit == "yaml" else "300"
    (project.path / "benches" / "specbench.yaml").write_text(
        MATRIX.replace("warmup: 1", f"warmup: 1\n    waves: 1\n    timeout_s: {yaml_limit}")
    )
    opt = ["--specbench-timeout", "5"] if limit == "option" else []
    # in a process of its own: in this one, each round's gc.collect() walks the whole suite's heap
    # (torch included when other tests ran first), which alone took healthy cells past the limit
    res = project.runpytest_subprocess(
        "benches", "-k", "tp1", "--specbench-hang-engine", "ar-tp1@0", "--benchmark-json", "out.json", *opt
    )
    res.assert_outcomes(passed=4, failed=2)
    out = res.stdout.str()
    assert (
        "cell ar-tp1-c1-out16: no result before the cell's time limit (timeout_s); engine of group "
        "ar-tp1 torn down: cell ar-tp1-c1-out16 did not finish within its time limit of 5 s (while "
        "warming the engine at its cells' shapes)"  # the group's first cell warms it: the hang is there
    ) in out
    assert "cell ar-tp1-c4-out16: engine of group ar-tp1 torn down" in out
    lines = starts(tmp_path)
    assert lines.count("abandon ar-tp1") == 1
    assert [s.split()[0] for s in lines if not s.startswith("abandon")] == [
        "ar-tp1",
        "ngram-tp1",
        "eagle3-tp1",
    ]
    doc = json.loads((project.path / "out.json").read_text())
    assert sorted(f["cell"] for f in doc["specbench"]["failed_cells"]) == [
        "ar-tp1-c1-out16",
        "ar-tp1-c4-out16",
    ]
    assert len(doc["benchmarks"]) == 4


def test_resume_copies_measured_cells_and_runs_the_rest(project: pytest.Pytester, tmp_path: Path) -> None:
    # a first run that "died" after the ar-tp1 group: only its cells are in first.json
    project.runpytest("benches", "-k", "ar-tp1", "--benchmark-json", "first.json").assert_outcomes(passed=2)
    first = json.loads((project.path / "first.json").read_text())
    (tmp_path / "starts.txt").unlink()
    res = project.runpytest(
        "benches", "-k", "tp1", "--specbench-resume", "first.json", "--benchmark-json", "out.json", "-rs"
    )
    res.assert_outcomes(passed=4, skipped=2)
    out = res.stdout.str()
    assert "cell ar-tp1-c1-out16 skipped: measured in first.json (resumed)" in out
    assert "resumed: 2 cells copied from first.json (not run again)" in out
    assert [s.split()[0] for s in starts(tmp_path)] == ["ngram-tp1", "eagle3-tp1"]  # no ar-tp1 start
    doc = json.loads((project.path / "out.json").read_text())
    assert doc["specbench"]["resumed_cells"] == ["ar-tp1-c1-out16", "ar-tp1-c4-out16"]
    # the resumed cells' engine is in engine_groups as the first run recorded it, not counted as started
    groups = {e["group"]: e for e in doc["specbench"]["engine_groups"]}
    assert sorted(groups) == ["ar-tp1", "eagle3-tp1", "ngram-tp1"]
    assert groups["ar-tp1"] == {**first["specbench"]["engine_groups"][0], "resumed_from": "first.json"}
    assert "resumed_from" not in groups["ngram-tp1"] and doc["specbench"]["engine_starts"] == 2
    assert "engine starts: 2 (ngram-tp1, eagle3-tp1)" in out
    # the plan of the resumed command plans what runs: the resumed cells are left out and said
    plan = project.runpytest(
        *("benches", "-k", "tp1", "--specbench-resume", "first.json"),
        *("--specbench-plan", "--specbench-plan-json", "p.json"),
    ).stdout.str()
    assert "cells: 4 to run, 0 skipped; engine starts: 2" in plan, plan
    assert "resumed: 2 cells measured in first.json are copied, not run (left out of the plan above)" in plan
    plan_doc = json.loads((project.path / "p.json").read_text())
    assert plan_doc["resumed"] == ["ar-tp1-c1-out16", "ar-tp1-c4-out16"]
    by_id = {b["param"]: b for b in doc["benchmarks"]}
    assert sorted(by_id) == [f"{m}-tp1-c{c}-out16" for m in ("ar", "eagle3", "ngram") for c in (1, 4)]
    for old in first["benchmarks"]:
        new = by_id[old["param"]]
        assert new["extra_info"]["resumed_from"] == "first.json"
        assert new["stats"]["data"] == old["stats"]["data"]
        assert new["extra_info"]["output_tokens_per_s"] == old["extra_info"]["output_tokens_per_s"]
    # speedup vs ar of the new cells uses the resumed ar cells
    assert by_id["ngram-tp1-c1-out16"]["extra_info"]["speedup_vs_ar"] is not None
    # under xdist the earlier results travel from the workers on the skipped cells' reports
    (tmp_path / "starts.txt").unlink()
    res = project.runpytest_subprocess(
        "benches", "-k", "tp1", "-n", "2", "--specbench-resume", "first.json", "--benchmark-json", "n2.json"
    )
    res.assert_outcomes(passed=4, skipped=2)
    n2 = json.loads((project.path / "n2.json").read_text())
    assert n2["specbench"]["resumed_cells"] == ["ar-tp1-c1-out16", "ar-tp1-c4-out16"]
    assert [e["group"] for e in n2["specbench"]["engine_groups"] if "resumed_from" in e] == ["ar-tp1"]
    assert len(n2["benchmarks"]) == 6
    assert sorted(s.split()[0] for s in starts(tmp_path)) == ["eagle3-tp1", "ngram-tp1"]
    # pytest-benchmark compare reads the merged file
    cmp = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark.cli", "compare", str(project.path / "out.json")],
        capture_output=True,
        text=True,
    )
    assert cmp.returncode == 0, cmp.stderr


def test_resume_with_changed_parameters_runs_again(project: pytest.Pytester, tmp_path: Path) -> None:
    project.runpytest("benches", "-k", "ar-tp1", "--benchmark-json", "first.json").assert_outcomes(passed=2)
    # same ids, but the cells are defined differently now (rounds; an engine arg): measured again
    for matrix in (
        MATRIX.replace("rounds: 2", "rounds: 3"),
        MATRIX.replace("ar: {backend: fake, model: m}", "ar: {backend: fake, model: m, engine_args: {x: 1}}"),
    ):
        (project.path / "benches" / "specbench.yaml").write_text(matrix)
        res = project.runpytest("benches", "-k", "ar-tp1", "--specbench-resume", "first.json")
        res.assert_outcomes(passed=2)
    (project.path / "benches" / "specbench.yaml").write_text(MATRIX)  # unchanged: both copied
    project.runpytest("benches", "-k", "ar-tp1", "--specbench-resume", "first.json").assert_outcomes(
        skipped=2
    )


def test_resume_from_a_bad_file_names_it(project: pytest.Pytester) -> None:
    (project.path / "notes.json").write_text('{"hello": 1}')
    res = project.runpytest("benches", "--specbench-resume", "notes.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*--specbench-resume notes.json: not a results JSON of pytest-specbench (KeyError*"]
    )


def test_slo_attainment_and_goodput_reach_the_json_and_the_summary(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    path = project.path / "benches" / "specbench.yaml"
    path.write_text(path.read_text().replace("    warmup: 1\n", "    warmup: 1\n    slo: {e2e_s: 0.01}\n"))
    out = tmp_path / "out.json"
    res = project.runpytest(
        "benches", "-k", "tp1 and c1", "--benchmark-json", str(out), "--specbench-summary=full"
    )
    res.assert_outcomes(passed=3)
    by = {b["params"]["method"]: b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]}
    # FakeEngine's reported latency is 1 ms per chunk: ar streams 16 one-token chunks (16 ms, over
    # the 10 ms objective); ngram (3 drafts) 5 chunks and eagle3 (4 drafts) 4 chunks: within it
    assert by["ar"]["slo"] == {"e2e_s": 0.01} and by["ar"]["slo_attainment"] == 0.0
    assert by["ar"]["goodput_tokens_per_s"] == 0.0
    for m in ("ngram", "eagle3"):
        assert by[m]["slo_attainment"] == 1.0, m
        assert by[m]["goodput_tokens_per_s"] == by[m]["output_tokens_per_s_total"], m  # every one met it
    assert "slo met" in res.stdout.str() and "100%" in res.stdout.str() and "0%" in res.stdout.str()


def test_an_empty_selection_says_what_the_matrix_has_and_which_shipped_matrix_has_it(
    project: pytest.Pytester,
) -> None:
    (project.path / "benches" / "examples").mkdir()
    (project.path / "benches" / "examples" / "big.yaml").write_text(
        MATRIX.replace("tp: [1, 2]", "tp: [4]").replace("concurrency: [1, 4]", "concurrency: [8]")
    )
    (project.path / "benches" / "examples" / "notes.yaml").write_text("just: notes\n")  # not a matrix
    res = project.runpytest("benches", "-k", "tp4 and c8")
    assert res.ret == 5
    out = res.stdout.str()
    assert "specbench: -k 'tp4 and c8' selects none of the 12 cells of " in out
    assert (
        "  it has: methods: ar, ngram, eagle3; TP: tp1, tp2; concurrency: c1, c4; outputs: out16; "
        "workloads: throughput" in out
    )
    assert "  shipped matrices with cells -k 'tp4 and c8' selects (--specbench-matrix PATH):" in out
    assert "    benches/examples/big.yaml: 3 cells" in out
    res = project.runpytest("benches", "-k", "tp8")
    out = res.stdout.str()
    assert "  no shipped matrix under " in out and "has cells -k 'tp8' selects" in out
    # a selection that leaves cells says nothing of the kind
    assert "selects none" not in project.runpytest("benches", "-k", "ar-tp1-c1").stdout.str()


def test_one_line_per_cell_with_elapsed_time_against_the_plan(project: pytest.Pytester) -> None:
    res = project.runpytest("benches", "-k", "ar-tp1", "-p", "no:randomly")
    res.assert_outcomes(passed=2)
    lines = res.outlines
    assert sum(1 for ln in lines if ln.startswith("benches/test_throughput.py")) == 1, lines
    for cid in ("ar-tp1-c1-out16", "ar-tp1-c4-out16"):
        assert any(ln.startswith(f"-> {cid} (group ar-tp1): 1 warm-up + 2 timed rounds") for ln in lines)
        end = [ln for ln in lines if ln.startswith(f"<- {cid}: ")]
        # the closing line carries pytest's result letter for the cell
        planned = r"(of \d+ s planned(: over plan by \d+ s)?|\(no plan ETA\))"
        assert len(end) == 1 and re.fullmatch(rf"<- {cid}: \d+ s {planned} \.( +\[ *\d+%\])?", end[0]), end


def test_elapsed_text_says_over_plan() -> None:
    from pytest_specbench.engines.progress import elapsed_text

    assert elapsed_text(45.2, 30.0) == "45 s of 30 s planned: over plan by 15 s"
    assert elapsed_text(12.0, 30.0) == "12 s of 30 s planned"
    assert elapsed_text(12.0, None) == "12 s (no plan ETA)"


def test_the_end_of_run_summary_is_one_screen_unless_full_is_asked(project: pytest.Pytester) -> None:
    """By default the summary is the screen (report/screen.py): the decision, what was withheld,
    the run's facts and where the full tables are; --specbench-summary full (test above) the rest."""
    res = project.runpytest("benches", "-k", "tp1 and c1", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=3)
    screen = res.stdout.str().split("specbench summary", 1)[1].splitlines()[1:]
    screen = screen[: next(i for i, ln in enumerate(screen) if ln.startswith("====="))]
    assert len(screen) <= 45 and max(len(ln) for ln in screen) <= 160, screen
    assert screen[0] == "decision per cell shape (3 cells, 1 shape with two or more methods):"
    assert any(ln.startswith("withheld or never ranked: disturbed ") for ln in screen)
    assert any(ln.startswith("engine starts: 3 (ar-tp1, ") for ln in screen)
    assert "wrote out.json (3 cells)" in screen
    assert screen[-3] == (
        "full tables, per-cell reasons and process lists: python -m pytest_specbench.report out.json"
    )
    assert "fastest method per cell shape" not in res.stdout.str()  # the long view is the report's


def test_an_empty_selection_pointing_to_a_gpu_matrix_says_the_plan_needs_no_gpu() -> None:
    # the default matrix has no tp4 cell; the shipped matrices that do run on sglang, which needs GPUs:
    # the hint says so and gives the --specbench-plan command that works without one
    from pytest_specbench.matrix import schema
    from pytest_specbench.plugin.selection import empty_selection_lines

    root = Path(__file__).resolve().parent.parent
    default = schema.load(root / "benches" / "specbench.yaml")
    lines = empty_selection_lines(default, "tp4 and ctx100k", "", root)
    first = next(ln.split(":")[0].strip() for ln in lines if ln.startswith("    benches/"))
    assert f"  running {first} needs the sglang backend and its GPUs;" in lines
    assert "  --specbench-plan prints its cells, memory fit and ETA without either:" in lines
    assert f"    pytest benches --specbench-matrix {first} -k 'tp4 and ctx100k' --specbench-plan" in lines
