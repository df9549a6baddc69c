"""What the end-of-run screen counts and why it says a shape is not separated must be true: after
a resume the counts are the run's, a count of one takes the singular, and a shape held back by the
bar a verdict kept under load must clear is said as such, not as one that more rounds would settle
(report/screen.py, report/withheld.py, report/screen_text.py, plugin/terminal.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from bench_project import THROUGHPUT_BENCH, write_project
from fake_engine import CONFTEST

from pytest_specbench.report import screen
from pytest_specbench.report.screen_text import counted

UNDER_LOAD = (
    "both halves of every pair bore the load alike (share gap 3%, paired CV 4%); faster or slower "
    "only beyond x0.78..x1.28 (what load alone shifted a ratio)"
)
DISTURBED = (
    "other processes took 37% of the 2 cores over the timed rounds (more than 10%): busy (pid 42): 3.1 s"
)


def _cell(cell: str, method: str, tok_s: float, **extra: Any) -> dict[str, Any]:
    conc = int(cell.split("-c", 1)[1].split("-", 1)[0])
    return {
        "param": cell,
        "params": {"method": method, "workload": "throughput", "tp": 1, "concurrency": conc},
        "stats": {"data": [1.0, 1.0, 1.0]},
        "extra_info": {"output_tokens_per_s": tok_s, "speedup_baseline": "ar", **extra},
    }


def _shape(c: int, ci: list[float], under_load: bool) -> list[dict[str, Any]]:
    point = (ci[0] * ci[1]) ** 0.5
    load = {"disturbed": DISTURBED, "speedup_under_load": UNDER_LOAD} if under_load else {}
    return [
        _cell(f"ar-c{c}", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
        _cell(
            f"ngram-c{c}",
            "ngram",
            100.0 * point,
            speedup_vs_ar=point,
            speedup_vs_ar_ci95=ci,
            speedup_pairs=5,
            speedup_pairing="interleaved",
            speedup_verdict="not separated",
            **load,
        ),
    ]


def _doc(*shapes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"benchmarks": [b for s in shapes for b in s], "specbench": {}}


def test_a_shape_held_back_by_the_under_load_bar_is_not_said_to_need_more_rounds() -> None:
    """c1 and c2: kept under load, their intervals ([1.10, 1.20], [0.80, 0.90]) clear of 1 but
    inside x0.78..x1.28: the bar held them. c4: quiet, its interval spans 1: more rounds narrow it.
    c8: kept under load, its interval spanning 1 and its point inside the bar: more rounds narrow
    it around a point no count of rounds lifts beyond the bar, so the bar is what holds it."""
    doc = _doc(
        _shape(1, [1.10, 1.20], under_load=True),
        _shape(2, [0.80, 0.90], under_load=True),
        _shape(4, [0.95, 1.10], under_load=False),
        _shape(8, [0.90, 1.15], under_load=True),
    )
    status = {d["label"]: d["status"] for d in screen.shape_decisions(doc)}
    assert status == {
        "throughput tp1 c1": "under load",
        "throughput tp1 c2": "under load",
        "throughput tp1 c4": "not separated",
        "throughput tp1 c8": "under load",
    }
    text = screen.lines(doc)
    spans = [ln for ln in text if ln.startswith("  nothing separated")]
    load = [ln for ln in text if ln.startswith("  not separated under load")]
    assert spans == [
        "  nothing separated (every interval spans 1; more rounds narrow them), 1 shape: throughput tp1 c4"
    ], text
    assert load == [
        "  not separated under load (disturbed alike: beyond x0.78..x1.28 needed, which more rounds do not "
        "lift), 3 shapes: throughput tp1 c1/c2/c8"
    ], text
    # clear of 1 but not of the ±2 % margin ([1.01, 1.10]): quiet, the margin holds it; under load
    # the bar does (its point inside the bar)
    edge = _doc(_shape(1, [1.01, 1.10], under_load=False))
    assert [d["status"] for d in screen.shape_decisions(edge)] == ["margin"]
    edge = _doc(_shape(1, [1.01, 1.10], under_load=True))
    assert [d["status"] for d in screen.shape_decisions(edge)] == ["under load"]


def _long_context_under_load() -> dict[str, Any]:
    """The default job's long_context shape beside busy loops: ngram-d4 x0.855 [0.750, 0.974] from
    2 interleaved pairs, kept under load, "not separated" because of the bar alone."""
    doc = _doc(_shape(1, [0.750, 0.974], under_load=True))
    doc["benchmarks"][1]["extra_info"].update(speedup_pairs=2, speedup_vs_ar=0.855)
    return doc


def test_a_two_pair_verdict_held_by_the_bar_is_not_said_to_be_too_few_rounds() -> None:
    """Its interval cleared 1 ± 2 % even at t = 12.7: the count did not hold it, the bar did. The
    screen groups it with the bar's shapes, the kept list says why it is not separated, and the
    report's table and ranking print its interval with its count, never "too few"."""
    from pytest_specbench.report.summary import markdown

    doc = _long_context_under_load()
    text = screen.lines(doc)
    assert [d["status"] for d in screen.shape_decisions(doc)] == ["under load"]
    assert not any(ln.startswith("  nothing separated") for ln in text), text
    at = next(i for i, ln in enumerate(text) if ln.startswith("kept under load 1 "))
    assert text[at + 1] == "    ngram-c1 not separated (inside the bar)", text[at : at + 2]
    report = "\n".join(markdown(doc))
    assert "too few" not in "\n".join(text) + report
    assert (
        "| ngram-c1 | 85.5 | - | 0.85 | [0.75, 0.97] (2 rounds; under load: not beyond x0.78..x1.28) |"
        in report
    )
    assert "ngram x0.85 [0.75, 0.97] (2 rounds) not separated vs ar" in report
    # the same interval quiet, spanning 1: the count held it, and that is said
    doc["benchmarks"][1]["extra_info"].update(speedup_vs_ar_ci95=[0.20, 3.60])
    doc["benchmarks"][1]["extra_info"].pop("speedup_under_load")
    report = "\n".join(markdown(doc))
    assert "| ngram-c1 | 85.5 | - | 0.85 | 2 rounds: too few |" in report
    assert "ngram x0.85 (interval: 2 rounds, too few) not separated vs ar" in report


def test_each_grouped_line_says_the_reason_that_held_for_every_shape_it_names() -> None:
    """c1: kept under load, its point (x0.71) beyond the bar, its interval [0.60, 0.85] reaching
    into it: more rounds narrow it and may lift it, so it is not said that they do not. c2: quiet,
    clear of 1 but not of 1 ± 2 %: it does not span 1. c4: quiet, spans 1. c8: one pair, no
    interval: not said to span 1."""
    one = _shape(8, [0.9, 1.1], under_load=False)
    one[1]["extra_info"].update(
        speedup_vs_ar_ci95=None, speedup_pairs=1, speedup_verdict="one pair: no interval"
    )
    doc = _doc(
        _shape(1, [0.60, 0.85], under_load=True),
        _shape(2, [1.01, 1.10], under_load=False),
        _shape(4, [0.95, 1.10], under_load=False),
        one,
    )
    status = {d["label"]: d["status"] for d in screen.shape_decisions(doc)}
    assert status == {
        "throughput tp1 c1": "under load, narrows",
        "throughput tp1 c2": "margin",
        "throughput tp1 c4": "not separated",
        "throughput tp1 c8": "no interval",
    }
    grouped = [
        ln for ln in screen.lines(doc) if ln.startswith(("  nothing", "  not separated", "  no interval"))
    ]
    assert grouped == [
        "  nothing separated (every interval spans 1; more rounds narrow them), 1 shape: throughput tp1 c4",
        "  nothing separated (every interval reaches into 1 ± 2%; more rounds narrow them), 1 shape: "
        "throughput tp1 c2",
        "  not separated under load (disturbed alike: beyond x0.78..x1.28 needed; more rounds narrow the "
        "intervals), 1 shape: throughput tp1 c1",
        "  no interval to decide on (one round a cell, or no paired comparison), 1 shape: throughput tp1 c8",
    ], grouped


def test_counted_takes_the_number_of_its_count() -> None:
    assert counted(1, "shape") == "1 shape"
    assert counted(0, "shape") == "0 shapes"
    assert counted(2, "cell") == "2 cells"
    assert counted(1, "more family", "more families") == "1 more family"
    assert counted(3, "more family", "more families") == "3 more families"


def test_a_screen_of_one_shape_and_one_cell_says_them_in_the_singular() -> None:
    doc = _doc(_shape(1, [0.95, 1.10], under_load=False))
    doc["benchmarks"][1]["extra_info"]["rounds_cv"] = 0.2  # care: one noisy cell
    doc["benchmarks"].append(_cell("ar-c2", "ar", 100.0, disturbed=DISTURBED, speedup_verdict="baseline"))
    text = "\n".join(screen.lines(doc))
    assert "decision per cell shape (3 cells, 1 shape with two or more methods):" in text
    assert ", 1 shape: throughput tp1 c1" in text
    assert "rounds CV > 5% in 1 cell" in text and "in 1 cells" not in text
    assert "most: busy (pid 42) in 1 cell" in text
    assert not re.search(r"\b1 (shapes|cells|rounds|verdicts)\b", text), text


MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 3}}
workloads:
  throughput: {concurrency: [1, 4, 8], output_tokens: [16], prompt_tokens: 8, rounds: 2, warmup: 1}
"""


def test_after_a_resume_the_screen_counts_the_runs_cells_and_says_how_many_were_copied(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path / "logs"))
    write_project(pytester, MATRIX, CONFTEST, THROUGHPUT_BENCH, "test_throughput.py")
    pytester.runpytest("benches", "--benchmark-json", "full.json").assert_outcomes(passed=6)
    # a first run that measured the ar group only, then the rest resumed from it
    pytester.runpytest("benches", "-k", "ar-tp1", "--benchmark-json", "first.json").assert_outcomes(passed=3)
    res = pytester.runpytest(
        *("benches", "--specbench-resume", "first.json", "--specbench-plan-from", "full.json"),
        *("--benchmark-json", "out.json"),
    )
    res.assert_outcomes(passed=3, skipped=3)
    out = " ".join(ln.strip() for ln in res.stdout.lines)
    assert "resumed: 3 cells copied from first.json (not run again)" in out
    wall = next(ln for ln in res.stdout.lines if ln.startswith("run wall "))
    assert re.search(
        r"; plan ETA \d+ s for 3 of 3 cells run here "
        r"\(6 cells in the run, 3 of them copied from first\.json\) and 1 engine start$",
        wall,
    ), wall
    assert "wrote out.json (6 cells)" in out
    assert "decision per cell shape (6 cells, 3 shapes with two or more methods)" in out
