"""The end-of-run screen (report/screen.py): one screen of at most 45 lines of at most 160
characters, the decision per shape as decide.py ranks and compares, each withheld reason counted
once, each process list at most once; ``python -m pytest_specbench.report RUN.json --screen``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.report import decide, screen, summary

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
COMMITTED = [
    RESULTS / "cpu-interleaved" / "run1.json",
    RESULTS / "cpu-interleaved" / "run3-busy.json",  # every cell disturbed
    *sorted((RESULTS / "h200-paired").glob("*.json")),
    *sorted((RESULTS / "h200-breakeven").glob("*.json")),  # forced cells only
    RESULTS / "cpu-drift" / "run.json",  # a drift sentinel, itself disturbed
]


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_committed_run_fits_one_screen_and_names_each_process_at_most_once(path: Path) -> None:
    doc = _load(path)
    lines = screen.lines(doc, str(path))
    assert 1 < len(lines) <= 45, "\n".join(lines)
    assert max(len(ln) for ln in lines) <= screen.WIDTH, max(lines, key=len)
    text = "\n".join(lines)
    for b in doc["benchmarks"]:  # a disturbed cell's process list is the full report's
        said = str(b["extra_info"].get("disturbed") or "")
        if ": " in said:
            assert text.count(said.split(": ", 1)[1]) <= 1, b["param"]
    pids = re.findall(r"\(pid \d+\)", text)
    assert len(pids) == len(set(pids)), pids
    assert lines[-3:] == [
        f"full tables, per-cell reasons and process lists: python -m pytest_specbench.report {path}",
        f"html: python -m pytest_specbench.report {path} --html report.html",
        f"plots: python -m pytest_specbench.report {path} --plots DIR",
    ]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_shape_is_decided_as_decide_ranks_and_compares_it(path: Path) -> None:
    """Every shape decide.ranked_shapes ranks is on the screen once: on its own line with decide's
    winner, that cell's verdict against the baseline and decide's relation to the runner-up, or in
    a group (nothing separated / withheld) that names it."""
    doc = _load(path)
    text = "\n".join(screen.lines(doc))
    for d in screen.shape_decisions(doc):
        win, run = d["winner"], d["runner_up"]
        label, rows = next((lb, r) for lb, r in decide.ranked_shapes(doc) if lb == d["label"])
        assert win["method"] == rows[0]["method"] and run["method"] == rows[1]["method"]
        all_lines = text.splitlines()
        own = [i for i, ln in enumerate(all_lines) if ln.startswith(f"  {label}: ")]
        if d["status"] == "decided":
            assert len(own) == 1, label
            line = " ".join(screen.decision_lines(d))
            assert all_lines[own[0] : own[0] + len(screen.decision_lines(d))] == screen.decision_lines(d)
            assert line.startswith(f"  {label}: {win['method']} "), line
            if win.get("speedup_vs_ar") is not None and not screen._is_baseline(win):
                verdict = screen.short_verdict(win["speedup_verdict"])
                assert f"x{win['speedup_vs_ar']:.2f}" in line and f"{verdict} vs " in line, line
            if screen._is_baseline(run):
                assert f"; next {run['method']} (the baseline)" in line, line
            else:  # the runner-up's own x over the winner, read left to right
                x = decide.compare(run["_entry"], win["_entry"])["speedup_vs_ar"]
                assert f"; next {run['method']} x{x:.2f}" in line and f" vs {win['method']}" in line, line
            # every method of the shape is on it: after "next", or counted and named
            more = (line.split(" more in the report: ", 1) + [""])[1].split(", ")
            for r in rows[1:]:
                assert f"next {r['method']} " in line or r["method"] in more, (r["method"], line)
        else:
            assert own == [], label
    if path.name == "h200-paired.json":  # the ratios decide computed, as the full report prints them
        assert text.splitlines()[2:4] == [
            "  throughput tp1 c1 in128 out256: ngram-d12 x4.41 [4.30, 4.53] faster vs ar; next ngram-d8 "
            "x0.71 [0.64, 0.80] slower vs ngram-d12;",
            "    next ngram-d4 x0.62 [0.54, 0.71] slower vs ngram-d8; +4 more in the report: ar, "
            "standalone-s5, standalone-s3, standalone-s1",
        ]
    if path.parent.name == "cpu-drift":  # the family's drift, once, without the sentinel's process list
        assert (
            "drift ar-tp1: +82.7% [+18.5%, +181.8%] over 2.0 min; 0 verdicts withheld; the sentinel was "
            "disturbed"
        ) in text.splitlines()
    if path.name == "run3-busy.json":  # every cell disturbed: no shape decided, all grouped as withheld
        assert "verdict withheld (the reasons are counted below), 16 shapes: " in text


def _cell(cell: str, method: str, tok_s: float, **extra: Any) -> dict[str, Any]:
    conc = int(cell.split("-c", 1)[1].split("-", 1)[0])
    return {
        "param": cell,
        "params": {"method": method, "workload": "throughput", "tp": 1, "concurrency": conc},
        "stats": {"data": [1.0, 1.0, 1.0]},
        "extra_info": {"output_tokens_per_s": tok_s, "speedup_baseline": "ar", **extra},
    }


DISTURBED = (
    "other processes took 37% of the 2 cores over the timed rounds (more than 10%): busy (pid 42): 3.1 s"
)


def _hand_made() -> dict[str, Any]:
    return {
        "benchmarks": [
            _cell("ar-c1", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell(
                "ngram-c1",
                "ngram",
                120.0,
                disturbed=DISTURBED,
                speedup_vs_ar=1.2,
                speedup_vs_ar_ci95=[1.1, 1.3],
                speedup_verdict=f"no verdict: the cell was disturbed ({DISTURBED})",
            ),
            _cell("ar-c8", "ar", 300.0, speedup_vs_ar=1.0, speedup_verdict="baseline", saturated=True),
            _cell("eagle-a2-c1", "eagle-a2", 150.0, accept_forced=2.0, speedup_vs_ar=1.5),
            _cell("eagle-a4-c1", "eagle-a4", 250.0, accept_forced=4.0, speedup_vs_ar=2.5),
            _cell(
                "draft-c1",
                "draft",
                90.0,
                race={
                    "status": "dropped",
                    "lost_to": "ngram-c1",
                    "ratio": 0.7,
                    "lo": 0.6,
                    "hi": 0.8,
                    "shape": "tp1-c1",
                },
            ),
        ],
        "specbench": {
            "failed_cells": [
                {"cell": "eagle-c1", "phase": "call", "error": "RuntimeError: engine crashed\nmore"}
            ],
            "engine_starts": 4,
        },
    }


def test_a_hand_made_run_counts_each_withheld_reason_once() -> None:
    lines = screen.lines(_hand_made(), "out.json")
    text = "\n".join(lines)
    assert (
        "withheld or never ranked: disturbed 1, saturated 1, forced (never ranked) 2, out of the race 1, "
        "tuned out 0, drift-withheld 0, failed 1, missing 0"
    ) in lines
    assert (
        "  disturbed 1 (no verdict on their rounds): other processes took 37% of the cores; "
        "most: busy (pid 42) in 1 cell"
    ) in lines
    assert "  saturated 1 (open loop did not keep up: no verdict): ar-c8" in lines
    assert "  forced (never ranked) 2 (a set accept length measures a verify step's cost)" in lines
    at = lines.index("  out of the race 1 (lost to a shape's leader; never ranked or a baseline):")
    assert (
        lines[at + 1]
        == "    draft-c1: out of the race: lost to ngram-c1 by x0.700 [0.600, 0.800] at shape tp1-c1"
        " (not run)"
    )
    assert (
        lines[lines.index("  failed 1 (measured nothing):") + 1]
        == "    eagle-c1 (call): RuntimeError: engine crashed"
    )
    for detail in ("busy (pid 42)", "ar-c8", "draft-c1", "eagle-c1", "engine crashed"):
        assert text.count(detail) == 1, detail
    # the disturbed cell's verdict is withheld: the shape is grouped, never decided on it
    assert "verdict withheld (the reasons are counted below), 1 shape: throughput tp1 c1" in text
    # the forced and the dropped cell are never ranked: the shape holds ar and ngram only
    assert [r["method"] for r in screen.shape_decisions(_hand_made())[0]["rows"]] == ["ngram", "ar"]


def test_drift_withheld_missing_race_dropped_and_tuned_out_cells_are_counted() -> None:
    doc = _hand_made()
    doc["specbench"]["drift"] = [{"family": "ar-tp1", "withheld": ["ngram-c1"]}]
    doc["specbench"]["missing_cells"] = [{"cell": "ngram-c8", "why": "its shard's JSON was not given"}]
    doc["specbench"]["race"] = {
        "dropped_cells": [{"cell_id": "draft-c8", "extra_info": {"race": {"status": "dropped"}}}],
        "tuned_out": [{"cell_id": "ngram-d8-c8", "reason": "tuned out at c1: best was ngram-d4"}],
    }
    counts = {k: v for k, v in screen.withheld_counts(doc).items() if v}
    assert counts["drift-withheld"] == ["ngram-c1"] and counts["missing"] == ["ngram-c8"]
    assert counts["out of the race"] == ["draft-c1", "draft-c8"] and counts["tuned out"] == ["ngram-d8-c8"]


def test_the_screen_stays_in_bounds_however_many_shapes_and_failures() -> None:
    doc: dict[str, Any] = {"benchmarks": [], "specbench": {"failed_cells": []}}
    for c in range(1, 41):  # 40 shapes, each decided (the method's own verdict separates)
        doc["benchmarks"] += [
            _cell(f"ar-c{c}", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell(
                f"ngram-c{c}",
                "ngram",
                150.0,
                speedup_vs_ar=1.5,
                speedup_vs_ar_ci95=[1.4, 1.6],
                speedup_verdict="faster",
            ),
        ]
        doc["specbench"]["failed_cells"].append({"cell": f"eagle-c{c}", "phase": "call", "error": "x" * 300})
    for c in range(1, 61):  # and 60 shapes where nothing separates
        doc["benchmarks"] += [
            _cell(f"ar-c{c}-x", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell(
                f"ngram-c{c}-x",
                "ngram",
                100.0,
                speedup_verdict="not separated",
                speedup_vs_ar=1.0,
                speedup_vs_ar_ci95=[0.9, 1.1],
            ),
        ]
        doc["benchmarks"][-2]["params"]["context_tokens"] = 1000 + c
        doc["benchmarks"][-1]["params"]["context_tokens"] = 1000 + c
    lines = screen.lines(doc)
    assert len(lines) <= 45 and max(len(ln) for ln in lines) <= screen.WIDTH, "\n".join(lines)
    more = next(ln for ln in lines if ln.startswith("  ... and ") and "more decided shapes" in ln)
    shown = [ln for ln in lines if ln.startswith("  throughput tp1 c") and ": ngram x1.50 " in ln]
    assert more == f"  ... and {40 - len(shown)} more decided shapes (the full report lists each)"
    assert len(shown) >= screen.MIN_SHAPE_LINES - 3
    assert any(ln.startswith("  nothing separated") and "60 shapes" in ln for ln in lines)
    assert f"    ... and {40 - screen.MAX_VIEW_LINES} more (the report lists each)" in lines


def test_report_screen_prints_the_screen_of_a_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = RESULTS / "cpu-interleaved" / "run1.json"
    assert summary.main([str(path), "--screen"]) == 0
    assert capsys.readouterr().out.splitlines() == screen.lines(_load(path), str(path))
    with pytest.raises(SystemExit):
        summary.main([str(path), str(path), "--screen"])
    assert "--screen prints one results JSON's screen" in capsys.readouterr().err


def test_merge_labels_that_differ_in_one_word() -> None:
    assert screen._merge_labels(
        ["categories tp1 c4 category=chat", "categories tp1 c4 category=qa", "ttft tp1 c1", "ttft tp1 c4"]
    ) == ["categories tp1 c4 category=chat/qa", "ttft tp1 c1/c4"]


def test_docs_summary_shows_the_screen_as_it_prints_today() -> None:
    """docs/summary.md pastes the screens of the committed default-job runs: they are what the
    command it names prints now."""
    page = (RESULTS.parent / "summary.md").read_text()
    for run in ("run1.json", "run3-busy.json"):
        path = f"docs/results/cpu-interleaved/{run}"
        assert "\n".join(screen.lines(_load(RESULTS / "cpu-interleaved" / run), path)) in page, run
    assert "python -m pytest_specbench.report docs/results/cpu-interleaved/run1.json --screen" in page


def test_without_a_json_the_pointers_say_nothing_was_saved_and_how_to_save_it() -> None:
    assert screen.pointers(None) == [
        "not saved: run with --benchmark-json RUN.json, then full tables, per-cell reasons and process "
        "lists: python -m pytest_specbench.report RUN.json",
        "html: python -m pytest_specbench.report RUN.json --html report.html",
        "plots: python -m pytest_specbench.report RUN.json --plots DIR",
    ]


def test_an_interrupted_run_resumes_from_where_its_results_were_written(tmp_path: Path) -> None:
    # --benchmark-json could not be written at the end: the results went to a rescue path, and the
    # resume command names that file, not the one that does not hold them
    from types import SimpleNamespace

    from pytest_specbench.plugin.terminal import screen_lines

    doc = _load(COMMITTED[0])
    doc["specbench"]["interrupted"] = {"why": "interrupted by SIGINT", "cell": doc["benchmarks"][-1]["param"]}
    rescue = tmp_path / "out.rescue.json"
    opts = {"benchmark_json": str(tmp_path / "gone" / "out.json"), "specbench_resume": None}
    config = SimpleNamespace(getoption=lambda k, default=None: opts.get(k, default))
    st = SimpleNamespace(doc=doc, written_to=str(rescue), resume_refused=[])
    text = "\n".join(screen_lines(st, config, "wall: 1 s"))  # type: ignore[arg-type]
    assert f"  the same command (same -k) with --specbench-resume {rescue.resolve()} runs the rest" in text
    assert f"wrote {rescue} (" in text


def test_shapes_compared_without_an_interval_are_not_called_undecided_or_withheld() -> None:
    """The default job's categories run one round a cell with no baseline: draft against ngram-d4
    has no interval, so those shapes are neither "nothing separated" nor "withheld"."""
    doc = json.loads((RESULTS / "cpu-default-tour" / "fresh-quiet.json").read_text())
    out = screen.lines(doc, "run.json")
    (line,) = [ln for ln in out if ln.startswith("  no interval to decide on")]
    # chat and summarization; code's draft/ngram-d4 pair was disturbed: withheld, said once
    assert "categories tp1 c4 out32 category=chat/summarization" in line
    assert not any(ln.startswith("  nothing separated") and "categories" in ln for ln in out)
