"""The screen never contradicts itself nor the report: verdicts kept under load counted apart from
the withheld ones on both; no winner in bold without a verdict; each comparison's unit named where
it is printed; intervals from too few rounds said as such; "nothing separated" only where every
verdict of the shape stands; the runner-up read left to right; the table's ratio beside the
interleaved baseline figure it divides by."""

from __future__ import annotations

import re
from typing import Any

from pytest_specbench.report import decide, screen
from pytest_specbench.report.summary import markdown

DISTURBED = "other processes took 61% of the 2 cores over the timed rounds (more than 10%): busy (pid 7): 9 s"
UNDER_LOAD = (
    "others took 55%-64% of the cores, alike in both halves of every pair (at most 4% apart; paired "
    "ratios' CV 2.0%); faster or slower only beyond x0.78..x1.28 (what load alone shifted a ratio)"
)


def _cell(cell: str, method: str, tok_s: float, workload: str = "throughput", **extra: Any) -> dict[str, Any]:
    return {
        "param": cell,
        "params": {"method": method, "workload": workload, "tp": 1, "concurrency": 4},
        "stats": {"data": [1.0, 1.0, 1.0]},
        "extra_info": {"output_tokens_per_s": tok_s, "speedup_baseline": "ar", **extra},
    }


def _result(cell: str, method: str, workload: str, rates: list[float], **metrics: Any) -> dict[str, Any]:
    return {
        "cell_id": cell,
        "params": {"method": method, "workload": workload, "tp": 1, "concurrency": 4},
        "round_times": [1.0] * len(rates),
        "metrics": {
            "output_tokens_per_s": sum(rates) / len(rates),
            "round_tokens_per_s": rates,
            "request_digests": [f"d{i}" for i in range(len(rates))],
            **metrics,
        },
    }


def _beside_ar(
    cell: str, method: str, workload: str, ref: list[float], ratios: list[float]
) -> dict[str, Any]:
    """A disturbed cell whose ar rounds ran interleaved with its own, both halves of every pair under
    the same load."""
    loads = [0.60, 0.62, 0.64]
    return _result(
        cell, method, workload, [r * x for r, x in zip(ref, ratios, strict=True)], disturbed=DISTURBED,
        round_other_cpu_share=loads,
        reference={"method": "ar", "round_tokens_per_s": ref, "round_latency_s_p50": [None] * 3,
                   "round_other_cpu_share": [x - 0.02 for x in loads], "errors": 0, "saturated": False},
    )  # fmt: skip


def _as_doc(results: list[dict[str, Any]]) -> dict[str, Any]:
    from pytest_specbench.stats.paired import compare_all

    fields = compare_all(results, "ar")
    return {
        "benchmarks": [
            {
                "param": r["cell_id"],
                "params": r["params"],
                "stats": {"data": r["round_times"]},
                "extra_info": {**r["metrics"], "speedup_baseline": "ar", **fields[i]},
            }
            for i, r in enumerate(results)
        ],
        "specbench": {"engine_starts": 3},
    }


def _busy_run() -> dict[str, Any]:
    """Every cell disturbed (ar's own cells too): ngram-d4 x1.45 over its interleaved ar rounds (67.1
    tok/s; ar's own cell 136.0) kept under load, faster; draft-oracle x0.70 kept, slower; ttft's
    draft withheld (its paired ratios vary too much)."""
    ar = {"disturbed": DISTURBED}
    return _as_doc(
        [
            _result("agentic-ar-c4", "ar", "agentic", [136.0, 136.5, 135.5], **ar),
            _beside_ar("agentic-ngram-d4-c4", "ngram-d4", "agentic", [67.0, 67.2, 67.1], [1.45, 1.46, 1.44]),
            _result("throughput-ar-c4", "ar", "throughput", [100.0, 101.0, 99.0], **ar),
            _beside_ar(
                "throughput-draft-oracle-c4", "draft-oracle", "throughput", [100.0] * 3, [0.70, 0.71, 0.69]
            ),
            _result("ttft-ar-c4", "ar", "ttft", [100.0, 100.0, 100.0], **ar),
            _beside_ar("ttft-draft-c4", "draft", "ttft", [100.0] * 3, [0.6, 1.2, 0.9]),
        ]
    )


def test_verdicts_kept_under_load_are_counted_apart_from_withheld_ones_on_screen_and_report() -> None:
    doc = _busy_run()
    lines = screen.lines(doc, "run.json")
    text = "\n".join(lines)
    # the kept verdicts are decided lines, the withheld one grouped, and the counts say the same
    assert "  agentic tp1 c4: ngram-d4 x1.45 [1.43, 1.48] faster vs ar; next ar (the baseline)" in lines, text
    throughput = "  throughput tp1 c4: ar (the baseline); next draft-oracle x0.70"
    assert any(ln.startswith(throughput) for ln in lines), text
    assert "verdict withheld (the reasons are counted below), 1 shape: ttft tp1 c4" in text
    at = lines.index(next(ln for ln in lines if ln.startswith("kept under load")))
    assert lines[at : at + 2] == [
        "kept under load 2 (disturbed, but both halves of every pair bore the load alike: faster/slower only "
        "beyond x0.78..x1.28): agentic-ngram-d4-c4 faster,",
        "    throughput-draft-oracle-c4 slower",
    ]
    assert "withheld or never ranked: disturbed 4," in text  # three baselines and ttft's draft
    assert (
        "  disturbed 4 (no verdict on their rounds): other processes took 61% of the cores; most: busy "
        "(pid 7) in 4 cells"
    ) in lines
    report = markdown(doc)
    assert "- disturbed 4 (no verdict on their rounds; each cell's warning below)" in report
    assert (
        "- kept under load 2 (disturbed, but both halves of every pair bore the load alike: faster/slower "
        "only beyond x0.78..x1.28): agentic-ngram-d4-c4 faster, throughput-draft-oracle-c4 slower"
    ) in report


def test_the_table_names_the_interleaved_baseline_figure_its_ratio_divides_by() -> None:
    """ngram-d4 at 97.3 tok/s, ar's own cell at 136.0, x1.45: against ar's interleaved rounds
    (67.1 tok/s), which the row says."""
    rows = {ln.split(" | ")[0]: ln for ln in markdown(_busy_run()) if ln.startswith("| ")}
    assert rows["| agentic-ngram-d4-c4"].startswith(
        "| agentic-ngram-d4-c4 | 97.3 | - | 1.45 vs ar's interleaved 67.1 tok/s | [1.43, 1.48] |"
    )


def test_no_bold_fastest_without_a_verdict() -> None:
    doc = _busy_run()
    table = [ln for ln in markdown(doc) if ln.startswith("| ") and " tp1 c4" in ln.split(" | ")[0]]
    by = {ln.split(" | ")[0][2:]: ln.split(" | ")[1] for ln in table}
    assert by["agentic tp1 c4"] == "**ngram-d4**"  # a verdict: ngram-d4 over ar, faster
    assert by["throughput tp1 c4"] == "**ar**"  # ar over draft-oracle: faster (draft-oracle slower)
    assert by["ttft tp1 c4"] == "no verdict (draft vs ar: withheld)"  # withheld: nobody is fastest
    assert "**" not in "".join(ln for ln in markdown(doc) if ln.startswith("| ttft tp1 c4"))


def test_the_runner_up_reads_left_to_right() -> None:
    """README's old "ar (the baseline); > ngram-d4 x1.15 [1.14, 1.15] faster" read as ngram-d4 1.15x
    faster; it is ar's x over ngram-d4. The runner-up now carries its own x over the one before it."""
    doc = _busy_run()
    (line,) = [ln for ln in screen.lines(doc) if ln.startswith("  throughput tp1 c4:")]
    assert line == "  throughput tp1 c4: ar (the baseline); next draft-oracle x0.70 [0.68, 0.73] slower vs ar"
    assert not re.search(r"; [<>≈] ", line)


def test_each_comparisons_unit_is_named_where_printed_and_the_legend_only_when_used() -> None:
    open_loop = _cell(
        "poisson-ngram-c8", "ngram", 120.0, "poisson", speedup_vs_ar=1.30, speedup_vs_ar_ci95=[1.2, 1.4],
        speedup_verdict="faster", speedup_pairs=3, offered_request_rate=8.0, latency_s_p50=1.1,
        speedup_metric="latency_s_p50 ratio (open loop; paired rounds' p50 latency, t-interval)",
    )  # fmt: skip
    doc = {
        "benchmarks": [
            _cell("poisson-ar-c8", "ar", 100.0, "poisson", speedup_vs_ar=1.0, speedup_verdict="baseline",
                  offered_request_rate=8.0, latency_s_p50=1.43),
            open_loop,
        ]
    }  # fmt: skip
    lines = screen.lines(doc)
    (shape,) = [ln for ln in lines if ln.startswith("  poisson tp1 c4:")]
    assert shape.startswith("  poisson tp1 c4: ngram x1.30 by p50 latency [1.20, 1.40] faster vs ar")
    (legend,) = [ln for ln in lines if ln.startswith("  (x: ")]
    assert "x by p50 latency (open loop)" in legend and "in output tok/s" not in legend
    row = next(ln for ln in markdown(doc) if ln.startswith("| poisson-ngram-c8 |"))
    assert " | 1.30 (p50 latency) | " in row
    # nothing decided: no x on the screen, no legend
    doc["benchmarks"][1]["extra_info"].update(speedup_verdict="not separated", speedup_vs_ar_ci95=[0.9, 1.9])
    assert not any(ln.startswith("  (x: ") for ln in screen.lines(doc))


def test_an_interval_from_two_rounds_is_said_as_such() -> None:
    doc = {
        "benchmarks": [
            _cell("ar-c4", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell("ngram-c4", "ngram", 300.0, speedup_vs_ar=3.0, speedup_vs_ar_ci95=[0.004, 1492.05],
                  speedup_verdict="not separated", speedup_pairs=2),
            _cell("draft-c4", "draft", 90.0, speedup_vs_ar=0.9, speedup_vs_ar_ci95=[0.8, 0.85],
                  speedup_verdict="slower", speedup_pairs=3),
        ]
    }  # fmt: skip
    text = "\n".join(screen.lines(doc)) + "\n".join(markdown(doc))
    assert "1492.05" not in text and "[0.00," not in text
    assert "ngram x3.00 (interval: 2 rounds, too few) not separated vs ar" in text
    assert "| ngram-c4 | 300.0 | - | 3.00 | 2 rounds: too few |" in text


def test_nothing_separated_never_names_a_shape_whose_verdicts_were_withheld() -> None:
    """ar first (the fastest tok/s), ngram's verdict withheld by its family's drift, the pair ar over
    ngram (recomputed from the rounds) not separated: the shape is withheld, not "nothing separated"."""
    doc = {
        "benchmarks": [
            _cell("ar-c4", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell("ngram-c4", "ngram", 98.0, speedup_vs_ar=0.98, speedup_vs_ar_ci95=[0.9, 1.07],
                  speedup_verdict="no verdict: x0.980 reaches into the band of the drift its family ar-tp1 "
                  "measured (+12.0%)"),
        ]
    }  # fmt: skip
    for b, rates in zip(doc["benchmarks"], ([100.0, 104.0, 96.0], [98.0, 95.0, 101.0]), strict=True):
        b["extra_info"].update(round_tokens_per_s=rates, request_digests=["a", "b", "c"])
    (d,) = screen.shape_decisions(doc)
    assert d["status"] == "withheld", d["status"]
    assert not any(ln.startswith("  nothing separated") for ln in screen.lines(doc))


def test_screen_and_report_agree_on_every_decided_shape_of_a_committed_run() -> None:
    """Each decided line's first method, x and verdict are those of the report's row of its shape."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200-paired" / "h200-paired.json"
    doc = json.loads(path.read_text())
    report = "\n".join(markdown(doc))
    for d in screen.shape_decisions(doc):
        if d["status"] != "decided":
            continue
        win = d["winner"]
        row = next(ln for ln in report.splitlines() if ln.startswith(f"| {d['label']} |"))
        said = screen.decision_line(d)
        assert said.startswith(f"  {d['label']}: {win['method']} ") and f"| **{win['method']}** |" in row
        x = f"x{win['speedup_vs_ar']:.2f}{decide.fmt_interval(win.get('speedup_vs_ar_ci95'))}"
        verdict = win["speedup_verdict"]
        assert f"{x} {verdict} vs " in said and f"({x} {verdict} vs " in row, row
