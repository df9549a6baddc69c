"""python -m pytest_specbench.report: a results JSON as Markdown, and two compared cell by cell."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specbench.report.summary import main


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
        "| cell | tok/s | accept | vs ar | vs ar 95% CI | rounds CV | ttft p50 ms | tpot p50 ms | lat p50 s "
        "| err |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| ar-tp1-c1-out256 | 450.0 | - | - | - | - | - | - | 0.500 | 0 |",
        "- failed `sa-tp1-c1-out256` (setup): EngineStartError: sa-tp1: sglang.Engine failed to start: "
        "RuntimeError: died; engine log says: AttributeError: 'NoneType' object has no attribute 'dim'",
        "- engine starts: 2",
    ]
    assert main([str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[2:-1] == [
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
    assert out[-3:] == [
        f"1 regression(s) against {old}:",
        "- sa-tp1-c1-out256: measured in the old run, failed in the new one: EngineCrashed: sa-tp1 died",
        "checked: tok/s on 0 cell(s), failed or absent on 3 cell(s)",
    ]
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05", "--max-accept-drop", "0.02"]) == 1
    assert capsys.readouterr().out.splitlines()[-4:] == [
        f"2 regression(s) against {old}:",
        "- ngram-tp1-c1-out256: accept length 9.500 -> 9.000 (new/old 0.947, allowed down to 0.980)",
        "- sa-tp1-c1-out256: measured in the old run, failed in the new one: EngineCrashed: sa-tp1 died",
        "checked: tok/s on 0 cell(s), acceptance length on 1 cell(s), failed or absent on 3 cell(s)",
    ]
    assert main([str(old), str(new), "--max-tok-s-drop", "0.03"]) == 1  # the failed cell only:
    said = capsys.readouterr().out.splitlines()  # no rounds, no interval: 0.960 is not gated on a point
    assert f"1 regression(s) against {old}:" in said
    assert (
        "- ar-tp1-c1-out256: tok/s 500.000 -> 480.000 (new/old 0.960 from 0 + 0 rounds: no interval, "
        "not gated on a point)"
    ) in said
    # a cell the new run does not hold (a lost shard, another -k) fails the gate: it was not seen
    new.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (480.0, None), "ngram-tp1-c1-out256": (990.0, 9.4)})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05", "--max-accept-drop", "0.02"]) == 1
    assert capsys.readouterr().out.splitlines()[-3:-1] == [
        f"1 regression(s) against {old}:",
        "- sa-tp1-c1-out256: measured in the old run, absent from the new one",
    ]
    # within the allowed drops: no regression (no rounds: tok/s gated on no cell, inconclusive)
    new.write_text(
        json.dumps(
            _doc(
                {
                    "ar-tp1-c1-out256": (480.0, None),
                    "ngram-tp1-c1-out256": (990.0, 9.4),
                    "sa-tp1-c1-out256": (400.0, 4.0),
                }
            )
        )
    )
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05", "--max-accept-drop", "0.02"]) == 3
    assert capsys.readouterr().out.splitlines()[-2] == f"0 regression(s) against {old}"
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
    # the only cell did other work: nothing was gated on tok/s, the gate is inconclusive (exit 3)
    assert main([str(old), str(new), "--max-tok-s-drop", "0.05"]) == 3
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| ar-tp1-c1-out256 | 500.0 | 400.0 | other work | - | - |",
        "- `ar-tp1-c1-out256` measured other work in the two runs (requests per round 2 -> 1): not compared",
        "",
        f"0 regression(s) against {old}",
        "INCONCLUSIVE (exit 3): tok/s gated on no cell (1 did other work, 0 were unreliable); checked: tok/s "
        "on 0 cell(s), failed or absent on 1 cell(s)",
    ]
    assert main([str(old), str(same), "--max-tok-s-drop", "0.05"]) == 3  # compared, but no rounds to gate
    assert (
        "- ar-tp1-c1-out256: tok/s 500.000 -> 400.000 (new/old 0.800 from 0 + 0 rounds: no interval, "
        "not gated on a point)"
    ) in capsys.readouterr().out.splitlines()


def _run(cells: dict[str, list[float]], **extra: dict) -> dict:
    """A run whose cells have these rounds' tok/s (tok/s: their geometric mean), each cell's
    ``extra`` merged into its extra_info."""
    import math

    doc = _doc({c: (math.exp(sum(math.log(r) for r in rs) / len(rs)), None) for c, rs in cells.items()})
    for b in doc["benchmarks"]:
        b["extra_info"]["round_tokens_per_s"] = cells[b["param"]]
        b["extra_info"].update(extra.get(b["param"], {}))
        b["stats"] = {"data": [1.0] * len(cells[b["param"]])}
    return doc


def test_the_gate_compares_intervals_and_gives_no_verdict_on_disturbed_or_saturated_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two identical 4-cell runs, where one cell ran at 0.867 of the old tok/s but the old cell
    was disturbed (another process took the cores): no regression, exit 0, the cell named as
    unreliable. A drop whose interval reaches the limit is not one either; one wholly below it is.
    Steady rounds: no run-to-run spread, stated (--run-spread 0)."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    steady = [100.0, 100.0, 100.0]
    cells = {c: steady for c in ("ar-c1", "ar-c4", "ngram-c1", "ngram-c4")}
    disturbed = {"ngram-c4": {"disturbed": "other processes used 31% of the CPU"}}
    old.write_text(json.dumps(_run(cells, **disturbed)))
    new.write_text(json.dumps(_run({**cells, "ngram-c4": [86.7, 86.7, 86.7]})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-7:] == [
        "1 cell(s) without a tok/s verdict (unreliable, not regressions):",
        "- ngram-c4: tok/s not gated: the old run's cell was disturbed (other processes used 31% of the CPU)",
        "",
        "tok/s gated on 3 of 4 cell(s)",
        "",
        f"0 regression(s) against {old}",
        "checked: tok/s on 3 cell(s) (3 with the power to see the allowed drop), failed or absent on 4 "
        "cell(s)",
    ]
    # the same drop in the new run, saturated there: no verdict either
    old.write_text(json.dumps(_run(cells)))
    new.write_text(json.dumps(_run({**cells, "ngram-c4": [86.7] * 3}, **{"ngram-c4": {"saturated": True}})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    assert "- ngram-c4: tok/s not gated: the new run's cell saturated" in capsys.readouterr().out
    # every cell disturbed in a run: the gate checked no tok/s at all, and fails as inconclusive
    everywhere = {c: {"disturbed": "other processes used 60% of the CPU"} for c in cells}
    old.write_text(json.dumps(_run(cells, **everywhere)))
    new.write_text(json.dumps(_run(cells)))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 3
    said = capsys.readouterr().out
    assert said.splitlines()[-1].startswith("INCONCLUSIVE (exit 3): tok/s gated on no cell")
    assert "tok/s gated on 0 of 4 cell(s): NONE, every one was disturbed or saturated in a run" in said
    assert "fails as inconclusive (exit 3): run again on a quiet machine" in said
    old.write_text(json.dumps(_run(cells)))
    # undisturbed, the same drop in every round: the interval is [0.867, 0.867], wholly below 0.9
    new.write_text(json.dumps(_run({**cells, "ngram-c4": [86.7] * 3})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 1
    assert capsys.readouterr().out.splitlines()[-2] == (
        "- ngram-c4: tok/s 100.000 -> 86.700 (new/old 0.867 [0.867, 0.867] from 3 + 3 rounds; p 0.0000 "
        "against 0.900, Holm's bar 0.0063 of 4 cell(s): below 0.900)"
    )
    # noisy new rounds 64 and 100 against a steady 100: new/old 0.8 at the point; the logs' mean
    # is ln 0.8, their sd |ln 0.64| / sqrt 2 = 0.3156, the standard error 0.2231 with 1 degree of
    # freedom (t 12.7062): 0.8 x exp(-/+ 2.835) = [0.047, 13.629]: reaches 0.9, not a regression
    old.write_text(json.dumps(_run({**cells, "ngram-c4": [100.0, 100.0]})))
    new.write_text(json.dumps(_run({**cells, "ngram-c4": [64.0, 100.0]})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-7:-1] == [
        "1 cell(s) below the limit but not separated from it:",
        "- ngram-c4: tok/s 100.000 -> 80.000 (new/old 0.800 [0.047, 13.629] from 2 + 2 rounds; p 0.3454 "
        "against 0.900, Holm's bar 0.0063 of 4 cell(s): below 0.900 at the point, not separated from it: "
        "not a regression)",
        "",
        "tok/s gated on 4 of 4 cell(s); 1 with too little power",
        "",
        f"0 regression(s) against {old}",
    ]


# a name or reason as a results JSON may carry it: table pipes, a code span, HTML, a line break
HOSTILE = "ng|ram`<img src=x onerror=alert(1)>\nx"


def _unescaped(line: str, ch: str) -> int:
    """How many times ``ch`` appears in a Markdown line outside a backslash escape."""
    return re.sub(r"\\.", "", line).count(ch)


def _closed_loop(method: str, workload: str, rates: list[float], **extra: object) -> dict:
    params = {"method": method, "tp": 1, "workload": workload, "concurrency": 1}
    return {
        "param": f"{method}-{workload}-c1",
        "params": {**params, "context_tokens": 128, "output_tokens": 256},
        "extra_info": {
            "output_tokens_per_s": sum(rates) / len(rates),
            "round_tokens_per_s": rates,
            "request_digests": [f"d{i}" for i in range(len(rates))],
            "speedup_baseline": "ar",
            **extra,
        },
        "stats": {"data": [1.0] * len(rates)},
    }


def test_the_markdown_report_escapes_hostile_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Method, workload and cell names and failure reasons with |, `, < and line breaks: every
    table row keeps its header's columns, no HTML tag reaches the Markdown or the HTML page, and
    each entry stays one line."""
    from pytest_specbench.report.html import markdown_to_html

    doc = {
        "benchmarks": [
            _closed_loop("ar", HOSTILE, [500.0, 510.0, 490.0], speedup_vs_ar=1.0),
            _closed_loop(
                HOSTILE,
                HOSTILE,
                [1680.0, 1700.0, 1660.0],
                speedup_vs_ar=3.36,
                speedup_vs_ar_ci95=[3.3, 3.4],
                speedup_verdict="faster",
            ),
        ],
        "specbench": {
            "failed_cells": [
                {
                    "cell": HOSTILE,
                    "phase": "call",
                    "error": "RuntimeError: a | b <script>alert(1)</script>\nmore",
                }
            ]
        },
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert main([str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    tables = [ln for ln in lines if ln.startswith("|")]
    assert (
        len(tables) == 7
    )  # the cells' table (header, rule, 2 rows), the decision view's (header, rule, 1 row)
    for block in (tables[:4], tables[4:]):
        assert {_unescaped(ln, "|") for ln in block} == {_unescaped(block[0], "|")}
    assert all(_unescaped(ln, "<") == 0 for ln in lines)
    assert r"ng\|ram\`\<img src=x onerror=alert(1)> x" in tables[2]  # escaped, joined to one line
    assert lines[4] == (
        r"- failed `ng\|ram\`\<img src=x onerror=alert(1)> x` (call): RuntimeError: a \| b "
        r"\<script>alert(1)\</script>"
    )
    page = markdown_to_html(lines)
    assert "<img" not in page and "<script" not in page
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    assert [len(re.findall(r"<t[hd]", r)) for r in rows] == [10, 10, 10, 3, 3]
    assert "<td>ng&#124;ram&#96;&lt;img src=x onerror=alert(1)&gt; x-" in page  # shown as written


def test_failed_cells_without_their_keys_are_shown_unnamed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed_cells entry without ``cell`` (or ``phase``, or not a mapping at all) is listed as
    unnamed with what it has; the report, the comparison and the gate still run."""
    failed = [
        {"phase": "call", "error": "EngineCrashed: died\ntail"},
        {"params": {"method": "ngram", "tp": 2}, "reason": "timed out"},
        {"cell": "sa-tp1-c1-out256"},
        "ar-tp1-c1-out256",
    ]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (500.0, None)})))
    new.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (450.0, None)}, failed)))
    assert main([str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[3:8] == [
        "- failed an unnamed cell (call): EngineCrashed: died",
        "- failed an unnamed cell (method=ngram, tp=2): timed out",
        "- failed `sa-tp1-c1-out256`: no error recorded",
        "- failed, unnamed: 'ar-tp1-c1-out256'",
        "- engine starts: 2",
    ]
    assert main([str(old), str(new), "--max-accept-drop", "0.2"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"0 regression(s) against {old}",
        "checked: acceptance length on 0 cell(s), failed or absent on 1 cell(s)",
    ]


def test_the_gate_leaves_out_cells_a_race_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cell that lost a race ran only in part: never a baseline of the gate, never gated (steady
    rounds, no run-to-run spread stated)."""
    race = {"race": {"status": "dropped", "lost_to": "ngram-c1", "ratio": 0.5, "lo": 0.4, "hi": 0.6}}
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(_run({"ar-c1": [100.0] * 3, "ngram-c1": [50.0] * 3}, **{"ngram-c1": race})))
    new.write_text(json.dumps(_run({"ar-c1": [100.0] * 3})))  # not run again: nothing lost
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    old.write_text(json.dumps(_run({"ar-c1": [100.0] * 3, "ngram-c1": [100.0] * 3})))
    new.write_text(json.dumps(_run({"ar-c1": [100.0] * 3, "ngram-c1": [50.0] * 3}, **{"ngram-c1": race})))
    assert main([str(old), str(new), "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    assert "- ngram-c1: not gated: the new run dropped it (it lost a race)" in capsys.readouterr().out


def test_report_help_names_the_merge_subcommand(capsys):
    # --help is where a user looks for what the report tool can do; merge is a subcommand of it
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "python -m pytest_specbench.report merge SHARD.json ... -o RUN.json" in " ".join(out.split())
