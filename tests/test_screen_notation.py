"""The screen and the Markdown report read alike: one notation for a shape's methods ("next M xR
vs P"), every method of a shape on its screen line or named as left out, an interval from two
rounds printed where its verdict stands, no tie sign where nothing was measured, an open loop's
ratio beside the two figures it divides, an open loop's rounds CV named as latency's, and the
JSON's engine starts on a screen printed from it. Hand-built results documents, no engine."""

from __future__ import annotations

from typing import Any

from pytest_specbench.report import decide, screen, summary
from pytest_specbench.report.summary import markdown


def _cell(cell: str, method: str, tok_s: float, workload: str = "throughput", **extra: Any) -> dict[str, Any]:
    return {
        "param": cell,
        "params": {"method": method, "workload": workload, "tp": 1, "concurrency": 4},
        "stats": {"data": [1.0, 1.0, 1.0]},
        "extra_info": {"output_tokens_per_s": tok_s, "speedup_baseline": "ar", **extra},
    }


def _row(doc: dict[str, Any], label: str) -> str:
    return next(ln for ln in markdown(doc) if ln.startswith(f"| {label} |"))


def _screen_line(doc: dict[str, Any], label: str) -> str:
    """A shape's decision on the screen, its continued line joined."""
    lines = screen.lines(doc)
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {label}: "))
    out = lines[at]
    for ln in lines[at + 1 :]:
        if not ln.startswith("    "):
            break
        out += " " + ln.strip()
    return out


def test_a_two_round_interval_whose_verdict_stands_is_printed_with_its_count() -> None:
    """paired.py draws "faster" from 2 rounds when their interval clears the margin: the screen,
    the ranking and the table print that interval with "(2 rounds)", never "too few" beside a
    verdict; without a verdict (not separated) it stays "too few"."""
    doc = {
        "benchmarks": [
            _cell("ar-c4", "ar", 100.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell("ngram-c4", "ngram", 146.0, speedup_vs_ar=1.46, speedup_vs_ar_ci95=[1.41, 1.51],
                  speedup_verdict="faster", speedup_pairs=2),
        ]
    }  # fmt: skip
    said = "ngram x1.46 [1.41, 1.51] (2 rounds) faster vs ar"
    assert _screen_line(doc, "throughput tp1 c4") == f"  throughput tp1 c4: {said}; next ar (the baseline)"
    assert "| ngram 146.0 tok/s (x1.46 [1.41, 1.51] (2 rounds) faster vs ar); next ar 100.0 tok/s" in _row(
        doc, "throughput tp1 c4"
    )
    assert " | 1.46 | [1.41, 1.51] (2 rounds) | " in _row(doc, "ngram-c4")
    text = "\n".join(screen.lines(doc) + markdown(doc))
    assert "too few" not in text
    doc["benchmarks"][1]["extra_info"].update(speedup_verdict="not separated", speedup_vs_ar_ci95=[0.2, 9.0])
    assert "| ngram-c4 | 146.0 | - | 1.46 | 2 rounds: too few |" in "\n".join(markdown(doc))
    assert decide.fmt_interval([0.2, 9.0], 2, "not separated") == " (interval: 2 rounds, too few)"


def _three_methods() -> dict[str, Any]:
    """draft faster than ar, draft-oracle not separated from ar: the screen once left it out."""
    return {
        "benchmarks": [
            _cell("ar-c4", "ar", 316.1, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _cell("draft-c4", "draft", 422.6, speedup_vs_ar=1.39, speedup_vs_ar_ci95=[1.31, 1.48],
                  speedup_verdict="faster", speedup_pairs=4),
            _cell("draft-oracle-c4", "draft-oracle", 279.3, speedup_vs_ar=0.86,
                  speedup_vs_ar_ci95=[0.70, 1.04], speedup_verdict="not separated", speedup_pairs=4),
        ]
    }  # fmt: skip


def test_every_method_of_a_shape_is_on_its_screen_line() -> None:
    line = _screen_line(_three_methods(), "throughput tp1 c4")
    assert line == (
        "  throughput tp1 c4: draft x1.39 [1.31, 1.48] faster vs ar; next ar (the baseline); "
        "next draft-oracle x0.86 [0.70, 1.04] not separated vs ar"
    )


def _more(doc: dict[str, Any], names: list[str]) -> dict[str, Any]:
    for i, name in enumerate(names):
        doc["benchmarks"].append(
            _cell(f"m{i}-c4", name, 200.0 - i, speedup_vs_ar=0.6, speedup_vs_ar_ci95=[0.5, 0.7],
                  speedup_verdict="slower", speedup_pairs=4)
        )  # fmt: skip
    return doc


def test_methods_that_do_not_fit_are_counted_and_named() -> None:
    """Eleven methods: what does not fit the line and its continuation is "+N more in the report"
    with their names; with names too long to list, as many as fit and the rest counted."""
    doc = _more(_three_methods(), [f"standalone-s{i}" for i in range(8)])
    (d,) = screen.shape_decisions(doc)
    assert screen.decision_lines(d) == [
        "  throughput tp1 c4: draft x1.39 [1.31, 1.48] faster vs ar; next ar (the baseline); "
        "next draft-oracle x0.86 [0.70, 1.04] not separated vs ar;",
        "    +8 more in the report: standalone-s0, standalone-s1, standalone-s2, standalone-s3, "
        "standalone-s4, standalone-s5, standalone-s6, standalone-s7",
    ]
    lines = screen.lines(doc)
    at = lines.index(screen.decision_lines(d)[0])
    assert lines[at + 1] == screen.decision_lines(d)[1]  # the continuation is printed, within the budget
    doc = _more(_three_methods(), [f"standalone-draft-model-{i:02d}" for i in range(12)])
    (d,) = screen.shape_decisions(doc)
    lines = screen.decision_lines(d)
    assert len(lines) == 2 and all(len(ln) <= screen.WIDTH for ln in lines), lines
    assert lines[1].endswith("; +11 more in the report: standalone-draft-model-01, and 10 others"), lines


def test_the_report_ranks_in_the_screens_notation() -> None:
    """The report's ranking and the screen say each method after the first as "next M xR vs P",
    with the same comparison; no >, < or ≈ between methods."""
    doc = _three_methods()
    row = _row(doc, "throughput tp1 c4")
    assert row == (
        "| throughput tp1 c4 | **draft** | draft 422.6 tok/s (x1.39 [1.31, 1.48] faster vs ar); "
        "next ar 316.1 tok/s (the baseline); next draft-oracle x0.86 [0.70, 1.04] not separated vs ar "
        "(279.3 tok/s) |"
    )
    line = _screen_line(doc, "throughput tp1 c4")
    for link in ("next ar ", "next draft-oracle x0.86 [0.70, 1.04] not separated vs ar"):
        assert link in row and link in line
    ranking = row.split(" | ")[2]
    assert not any(sign in ranking for sign in (" > ", " < ", " ≈ ", "\\<"))


def test_one_round_says_no_interval_never_a_tie() -> None:
    """One round a cell, no baseline: ngram-d4 over draft has no interval; the report says so
    where a "≈" once stood, and calls nobody fastest."""
    doc = {
        "benchmarks": [
            _cell("categories-ngram-d4-chat", "ngram-d4", 489.1, "categories", round_tokens_per_s=[489.1],
                  request_digests=["a"]),
            _cell("categories-draft-chat", "draft", 327.8, "categories", round_tokens_per_s=[327.8],
                  request_digests=["a"]),
        ]
    }  # fmt: skip
    for b in doc["benchmarks"]:
        b["stats"]["data"] = [1.0]
    row = _row(doc, "categories tp1 c4")
    assert row == (
        "| categories tp1 c4 | no verdict (draft vs ngram-d4: no interval, 1 round) | ngram-d4 489.1 tok/s; "
        "next draft x0.67 no interval (1 round) vs ngram-d4 (327.8 tok/s) |"
    )
    assert "≈" not in "\n".join(markdown(doc))


def _open(cell: str, method: str, pooled: float, round_p50s: list[float], **extra: Any) -> dict[str, Any]:
    """An open-loop cell: two rounds of three requests, the middle one at the round's p50."""
    lat = [x for p in round_p50s for x in (p / 2, p, p * 2)]
    return {
        "param": cell,
        "params": {"method": method, "workload": "poisson", "tp": 1, "concurrency": 8, "request_rate": 8.0},
        "stats": {"data": [1.0, 1.0]},
        "extra_info": {
            "output_tokens_per_s": 200.0,
            "offered_request_rate": 8.0,
            "achieved_request_rate": 8.0,
            "latency_s_p50": pooled,
            "tok_s_estimator": "open loop",
            "request_digests": ["d0", "d1"],
            "per_request": {
                "tag": [f"round{r}/req{i}" for r in range(2) for i in range(3)],
                "latency_s": lat,
            },
            "speedup_baseline": "ar",
            **extra,
        },
    }


def _open_loop_doc() -> dict[str, Any]:
    """ngram's rounds' p50s 0.125 and 0.5 s (geometric mean 0.25 s; its pooled p50 0.300 s), ar's
    rounds interleaved with them 0.1 and 0.25 s (geometric mean 0.158 s): x = 0.8 and 0.5 per
    round, 0.632 over both, which is 0.158 ÷ 0.25; the arithmetic means (0.175 ÷ 0.3125 = 0.56)
    would not give it."""
    ref = {"method": "ar", "round_latency_s_p50": [0.1, 0.25], "round_tokens_per_s": [200.0, 200.0],
           "errors": 0, "saturated": False}  # fmt: skip
    ar = _open("poisson-ar", "ar", 0.2, [0.15, 0.2], speedup_vs_ar=1.0, speedup_verdict="baseline",
               rounds_cv=0.03)  # fmt: skip
    ngram = _open("poisson-ngram", "ngram", 0.3, [0.125, 0.5], reference=ref, rounds_cv=0.6)
    ngram["extra_info"].update(decide.compare(ngram, ar))
    return {"benchmarks": [ar, ngram]}


def test_an_open_loop_ratio_stands_beside_the_two_figures_it_divides() -> None:
    doc = _open_loop_doc()
    e = doc["benchmarks"][1]["extra_info"]
    assert round(e["speedup_vs_ar"], 4) == round((0.1 * 0.25) ** 0.5 / 0.25, 4) == 0.6325
    row = _row(doc, "poisson-ngram")
    assert " | 0.63 (p50 latency): ar's interleaved p50 0.158 s ÷ its rounds' p50 0.250 s | " in row
    assert " | 0.300 | " in row  # its pooled p50, in its own column
    ranking = _row(doc, "poisson tp1 c8 request_rate=8.0")
    assert "(p50 0.300 s; its rounds' p50 0.250 s, its interleaved ar rounds' p50 0.158 s, " in ranking


def test_an_open_loops_rounds_cv_is_named_as_latencys() -> None:
    doc = _open_loop_doc()
    doc["benchmarks"].append(_cell("throughput-ar", "ar", 300.0, rounds_cv=0.03))
    assert " | 60.0% (p50 latency) | " in _row(doc, "poisson-ngram")
    assert " | 3.0% (p50 latency) | " in _row(doc, "poisson-ar")
    assert " | 3.0% | " in _row(doc, "throughput-ar")
    assert "rounds' p50 latency CV 60%" in _row(doc, "poisson tp1 c8 request_rate=8.0")
    assert any("rounds CV: the coefficient of variation" in ln and "open loop of their p50 latency" in ln
               for ln in markdown(doc))  # fmt: skip


def _with_engines(doc: dict[str, Any]) -> dict[str, Any]:
    doc["specbench"] = {
        "engine_starts": 2,
        "engine_groups": [{"group": "ar-tp1", "ok": True}, {"group": "draft-tp1", "ok": True}],
        "reference_engines": [{"group": "ar-tp1", "worker": "main"}],
    }
    return doc


def test_a_screen_printed_from_a_json_says_its_engine_starts(tmp_path: Any, capsys: Any) -> None:
    import json

    doc = _with_engines(_three_methods())
    said = (
        "engine starts: 2 (ar-tp1, draft-tp1); baseline instances for interleaved rounds: 1 (ar-tp1 in main)"
    )
    lines = screen.lines(doc, "run.json")
    assert lines[-4] == said  # before the pointers, as at the end of a run
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert summary.main([str(path), "--screen"]) == 0
    assert said in capsys.readouterr().out.splitlines()
    # the run's own facts, when given, are what it prints (the plugin's: engine starts among them)
    assert said not in screen.lines(doc, "run.json", ["wall: 1 s"])


def test_an_open_loop_cell_records_its_rounds_p50_latency() -> None:
    """Round 1: 1.0 and 2.0 s (p50 1.5 s); round 2: 3.0 s (its failed request left out): the
    figures the paired ratio divides, in the cell's metrics beside the pooled p50 (2.0 s)."""
    from pytest_specbench.engines.base import RequestRecord
    from pytest_specbench.stats.metrics import cell_metrics
    from pytest_specbench.stats.paired import round_p50s

    recs = [
        RequestRecord(8, 10, 1.0, tag="round1/req0"),
        RequestRecord(8, 20, 2.0, tag="round1/req1"),
        RequestRecord(8, 20, 3.0, tag="round2/req0"),
        RequestRecord(8, 0, 0.0, tag="round2/req1", error="boom"),
    ]
    m = cell_metrics(recs, [2.0, 3.0], [30, 20], request_rate=4.0)
    assert m["round_latency_s_p50"] == [1.5, 3.0] == round_p50s(m)
    assert m["latency_s_p50"] == 2.0
    assert "round_latency_s_p50" not in cell_metrics(recs, [2.0, 3.0], [30, 20])  # closed loop: tok/s
