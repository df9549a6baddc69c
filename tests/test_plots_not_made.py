"""The plots a run's data does not support are said, each with why, wherever plots are written:
``report --plots`` (on the screen and under "Plots not made" in index.md), the HTML page, and a
run's ``--specbench-plots`` (its summary). Read on the committed default job's JSON, whose cells
each ran at one concurrency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import THROUGHPUT_BENCH, write_project
from fake_engine import CONFTEST

pytest.importorskip("matplotlib")

from pytest_specbench.report import summary  # noqa: E402

ROOT = Path(__file__).parent.parent
DEFAULT_JOB = ROOT / "docs" / "results" / "cpu-default-tour" / "fresh-quiet5.json"

# every plot a run can make (report/plots.py, plots_pareto.py, plots_breakeven.py, plots_versus.py)
EVERY_PLOT = {
    "tok_s_vs_concurrency",
    "speedup_vs_concurrency",
    "speedup_vs_context",
    "accept_vs_context",
    "accept_vs_turn",
    "prefix_hits_vs_turn",
    "accept_by_category",
    "accept_rate_by_position",
    "ttft_cdf",
    "itl_cdf",
    "tok_s_per_gpu_by_tp",
    "energy_per_token",
    "speedup_vs_forced_accept",
    "pareto",
    "break_even_map",
    "versus",
}


def test_every_plot_of_the_default_job_is_drawn_or_said_not_made_with_why(tmp_path: Path) -> None:
    doc = json.loads(DEFAULT_JOB.read_text())
    not_made: list[tuple[str, str]] = []
    pngs = summary.write_plots(doc, tmp_path, not_made)
    drawn = {Path(p).stem for p in pngs}
    said = dict(not_made)
    assert drawn | set(said) == EVERY_PLOT and not drawn & set(said)  # each plot once: drawn or said
    tail = ": a line needs two; the report's tables give each cell's figure"
    assert said["tok_s_vs_concurrency"] == "each shape ran at one concurrency (1, 4)" + tail
    assert said["speedup_vs_concurrency"] == "each shape ran at one concurrency (1, 4, 8)" + tail
    assert said["speedup_vs_context"] == "each shape ran at one prompt length (64, 256, 3000)" + tail
    assert said["tok_s_per_gpu_by_tp"] == "each shape ran at one TP size (1)" + tail
    assert said["energy_per_token"] == "no cell read GPU energy counters (NVML; none on a CPU run)"
    assert said["break_even_map"] == "no cell ran at a forced accept length"
    assert said["pareto"].startswith("no method ran one closed-loop shape at two or more TP sizes")
    index = (tmp_path / "index.md").read_text()
    section = index.split("## Plots not made\n", 1)[1]
    assert f"- tok_s_vs_concurrency: {said['tok_s_vs_concurrency']}" in section
    assert len([ln for ln in section.splitlines() if ln.startswith("- ")]) == len(said)


def test_the_report_command_and_the_html_page_say_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert summary.main([str(DEFAULT_JOB), "--plots", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert "not made: speedup_vs_concurrency: each shape ran at one concurrency (1, 4, 8)" in err
    assert "not made: energy_per_token: no cell read GPU energy counters" in err
    assert summary.main([str(DEFAULT_JOB), "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<h3>Plots not made</h3>" in page
    assert "<li><code>tok_s_vs_concurrency</code>: each shape ran at one concurrency (1, 4)" in page


ONE_CONCURRENCY = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 4}}
workloads:
  throughput:
    concurrency: [2]
    output_tokens: [8]
    prompt_tokens: 8
    rounds: 2
    warmup: 0
"""


def test_a_runs_plots_say_in_its_summary_which_were_not_made(pytester: pytest.Pytester) -> None:
    write_project(pytester, ONE_CONCURRENCY, CONFTEST, THROUGHPUT_BENCH)
    res = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", "--benchmark-json", "out.json", "--specbench-plots", "plots"
    )
    res.assert_outcomes(passed=2)
    out = res.stdout.str()
    assert "plots not made (also under 'Plots not made' in plots/index.md):" in out
    assert "  speedup_vs_concurrency: each shape ran at one concurrency (2): a line needs two" in out
    assert "## Plots not made" in (pytester.path / "plots" / "index.md").read_text()
