"""What the gate fails on beyond one cell's tok/s (docs/gate.md): a shift common to every cell
(the run-wide check), not a one-round cell's point, an open loop's p50 latency, a new run whose
hooks failed; and without a threshold it says that no gate was asked for."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_gate import _run, _write

from pytest_specbench.report.gate import gate
from pytest_specbench.report.summary import main, markdown

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "cpu-default-tour"


def test_a_shift_common_to_every_cell_fails_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six cells of noisy rounds (old [80, 120], each alone far from separated) all at 0.7 of their
    old tok/s: no cell fails on its own, the run does: the cells' log new/old are all ln 0.7, the
    pooled interval [0.700, 0.700] lies wholly below 0.900."""
    cells = {f"c{i}": [80.0, 120.0] for i in range(6)}
    old, new = _write(tmp_path, _run(cells), _run({c: [x * 0.7 for x in r] for c, r in cells.items()}))
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-3:] == [
        f"1 regression(s) against {old}:",
        "- run-wide: tok/s new/old 0.700 [0.700, 0.700] over 6 cell(s) (their mean log new/old, a 95% "
        "interval over the cells): wholly below 0.900: the whole run is slower",
        "checked: tok/s on 6 cell(s) (0 with the power to see the allowed drop), run-wide tok/s over 6 "
        "cell(s), failed or absent on 6 cell(s)",
    ]
    assert sum("not separated from it: not a regression on its own)" in x for x in said) == 6
    # unequal shifts, one round a cell: new/old 0.70, 0.72, 0.68, 0.70; their logs' mean -0.35688,
    # sd 0.02334 over 4 cells, t(3) 3.1824: exp(-0.35688 -/+ 0.03713) = [0.674, 0.726], below 0.9
    one = {f"c{i}": [100.0] for i in range(4)}
    shifted = {"c0": [70.0], "c1": [72.0], "c2": [68.0], "c3": [70.0]}
    g = gate(_run(one), _run(shifted), max_tok_s_drop=0.10)
    assert g.regressions == [
        "run-wide: tok/s new/old 0.700 [0.674, 0.726] over 4 cell(s) (their mean log new/old, a 95% "
        "interval over the cells): wholly below 0.900: the whole run is slower"
    ]
    # the same shift at the limit's side: 0.95 everywhere, not below 0.9: said, no regression
    g = gate(_run(one), _run({c: [95.0] for c in one}), max_tok_s_drop=0.10)
    assert g.regressions == [] and g.run_wide == [
        "run-wide: tok/s new/old 0.950 [0.950, 0.950] over 4 cell(s) (their mean log new/old, a 95% "
        "interval over the cells): not wholly below 0.900"
    ]
    # three cells: too few to pool
    g = gate(_run(dict(list(one.items())[:3])), _run({"c0": [70.0], "c1": [70.0], "c2": [70.0]}), 0.10)
    assert g.run_wide == ["run-wide tok/s not checked: fewer than 4 cells compared"]


def test_the_committed_run_at_70_percent_fails_as_a_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/results/cpu-default-tour/fresh-quiet4.json with every round's tok/s x 0.7: 15 closed-loop
    cells (the 4 open loops are gated on latency, unchanged) pool to [0.700, 0.700], one line."""
    run = RESULTS / "fresh-quiet4.json"
    doc = json.loads(run.read_text())
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        e["output_tokens_per_s"] *= 0.7
        e["round_tokens_per_s"] = [x * 0.7 for x in e["round_tokens_per_s"]]
    slower = tmp_path / "x70.json"
    slower.write_text(json.dumps(doc))
    assert main([str(run), str(slower), "--max-tok-s-drop", "0.10"]) == 1
    said = capsys.readouterr().out.splitlines()
    at = said.index(next(x for x in said if x.endswith(" regression(s) against " + f"{run}:")))
    assert said[at + 1] == (
        "- run-wide: tok/s new/old 0.700 [0.700, 0.700] over 15 cell(s) (their mean log new/old, a 95% "
        "interval over the cells): wholly below 0.900: the whole run is slower"
    )


def test_a_cell_of_one_round_is_not_gated_on_a_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One round in a run: no interval, so 100 -> 86.5 is no regression; the cell is listed as not
    gateable, and a gate of only such cells is inconclusive (exit 3). Missing or failed, such a
    cell still fails."""
    old = _run({"a": [100.0], "b": [100.0, 100.0], "c": [100.0]})
    new = _run({"a": [86.5], "b": [100.0], "c": [100.0, 100.0]})
    o, n = _write(tmp_path, old, new)
    assert main([o, n, "--max-tok-s-drop", "0.10"]) == 3
    said = capsys.readouterr().out.splitlines()
    assert (
        "- a: tok/s 100.000 -> 86.500 (new/old 0.865 from 1 + 1 rounds: no interval, not gated on a point)"
    ) in said
    assert "tok/s gated on 0 of 3 cell(s); 3 not gateable (fewer than 2 rounds)" in said
    assert said[-1] == (
        "INCONCLUSIVE (exit 3): tok/s gated on no cell (0 were unreliable, 3 had fewer than 2 rounds in a "
        "run); checked: tok/s on 0 cell(s), failed or absent on 3 cell(s)"
    )
    # beside a steady cell gated from its rounds (no run-to-run spread, stated): a pass (exit 0), the
    # one-round drop still not a regression
    old["benchmarks"].append(_run({"d": [100.0] * 3})["benchmarks"][0])
    new["benchmarks"].append(_run({"d": [100.0] * 3})["benchmarks"][0])
    o, n = _write(tmp_path, old, new)
    assert main([o, n, "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    # absent from the new run: a regression, one round or not
    new["benchmarks"] = [b for b in new["benchmarks"] if b["param"] != "a"]
    o, n = _write(tmp_path, old, new)
    assert main([o, n, "--max-tok-s-drop", "0.10"]) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "- a: measured in the old run, absent from the new one",
        "checked: tok/s on 1 cell(s) (0 with the power to see the allowed drop), failed or absent on 4 "
        "cell(s)",
    ]


def _open_loop(p50s: list[float], tok_s: float = 100.0) -> dict:
    """One poisson cell whose rounds' requests took these latencies (3 requests a round)."""
    tags, lats = [], []
    for r, p in enumerate(p50s):
        for i, x in enumerate((p * 0.9, p, p * 1.2)):
            tags.append(f"round{r}/req{i}")
            lats.append(x)
    sorted_all = sorted(lats)
    extra = {
        "latency_s_p50": sorted_all[len(sorted_all) // 2],
        "per_request": {"tag": tags, "latency_s": lats},
    }
    doc = _run({"poisson-ar-c8-rate8": [tok_s] * len(p50s)}, **{"poisson-ar-c8-rate8": extra})
    doc["benchmarks"][0]["params"] = {"method": "ar", "workload": "poisson", "request_rate": 8.0}
    return doc


def test_an_open_loop_is_gated_on_its_p50_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An open loop's tok/s follows its request rate: the same 100 tok/s with three times the p50
    latency in every round is a regression (p50 per round from per_request: 0.1 -> 0.3). Steady
    rounds, no run-to-run spread stated: the interval is the point."""
    old, new = _write(tmp_path, _open_loop([0.1, 0.1, 0.1]), _open_loop([0.3, 0.3, 0.3]))
    steady = ["--run-spread", "0"]
    assert main([old, new, "--max-tok-s-drop", "0.10", *steady]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-2:] == [
        "- poisson-ar-c8-rate8 (open loop): p50 latency 0.100 s -> 0.300 s (new/old 3.000 [3.000, 3.000] "
        "from 3 + 3 rounds; p 0.0000 against 1.100, Holm's bar 0.0250 of 1 cell(s): above 1.100)",
        "checked: tok/s on 0 cell(s) and p50 latency on 1 open loop(s) (1 with the power to see the allowed "
        "drop), failed or absent on 1 cell(s)",
    ]
    assert "- poisson-ar-c8-rate8: could detect a rise of 10.0% in p50 latency (at 80% power)" in said
    # the spread assumed (one cell, 5 % a run): 3 x is still a regression
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 1
    capsys.readouterr()
    # 1.3 x: fails at the default (the tok/s fraction, 10 %), passes with --max-latency-rise 0.5
    old, new = _write(tmp_path, _open_loop([0.1] * 3), _open_loop([0.13] * 3))
    assert main([old, new, "--max-tok-s-drop", "0.10", *steady]) == 1
    assert main([old, new, "--max-tok-s-drop", "0.10", "--max-latency-rise", "0.5", *steady]) == 0
    assert "against 1.500" not in capsys.readouterr().out  # passed: no regression line
    # its tok/s at 0.5 x with unchanged latencies: not a regression (the rate set it)
    old, new = _write(tmp_path, _open_loop([0.1] * 3), _open_loop([0.1] * 3, tok_s=50.0))
    assert main([old, new, "--max-tok-s-drop", "0.10", *steady]) == 0


def test_without_a_threshold_it_says_no_gate_was_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """old new alone: the table, then one line saying nothing was gated and how to ask; exit 0
    even with a cell missing from the new run."""
    old, new = _write(tmp_path, _run({"a": [100.0] * 2, "b": [100.0] * 2}), _run({"a": [50.0] * 2}))
    assert main([old, new]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "no gate asked for: exit 0 whatever the table shows (1 cell(s) of the old run missing or failed in "
        "the new one); --max-tok-s-drop F (tok/s; p50 latency in open loops), --max-latency-rise F or "
        "--max-accept-drop F gates the new run against the old (docs/gate.md)"
    )


HOOK = {
    "hook": "after_group",
    "group": "ar-tp2",
    "error": "after_group hook `systemctl start svc` failed (exit status 3): no unit; log: engine-ar-tp2.log",
    "may_be_left": "whatever its before_group hook stopped (that hook ran)",
}


def test_a_new_run_whose_hooks_failed_fails_the_gate_and_the_report_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cells = {"a": [100.0] * 3}
    bad = _run(cells)
    bad["specbench"]["hook_failures"] = [HOOK]
    old, new = _write(tmp_path, _run(cells), bad)
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 1
    assert capsys.readouterr().out.splitlines()[-2] == (
        "- after_group hook of ar-tp2 failed in the new run: after_group hook `systemctl start svc` failed "
        "(exit status 3): no unit; log: engine-ar-tp2.log; may be left stopped: whatever its before_group "
        "hook stopped (that hook ran)"
    )
    # the old run's hooks are not the new run's (one steady cell, no spread stated: a pass)
    assert main([new, old, "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    capsys.readouterr()
    report = markdown(bad)
    at = report.index("Hooks that failed: 1 (the run failed; a gate on it fails):")
    assert report[at + 1] == (
        "- after_group hook of `ar-tp2`: after_group hook \\`systemctl start svc\\` failed (exit status 3): "
        "no unit; log: engine-ar-tp2.log; may be left stopped: whatever its before_group hook stopped (that "
        "hook ran)"
    )
    assert not any(x.startswith("Hooks that failed") for x in markdown(_run(cells)))


def test_a_failed_after_group_names_a_before_group_hook_only_where_there_was_one() -> None:
    from pytest_specbench.plugin.group_hooks import hook_failures

    events = [
        {"group": "ar-tp1", "event": "start", "ok": True},
        {"group": "ar-tp1", "event": "stop", "after_group": {"ok": False, "error": "hook `x` failed"}},
        {"group": "ng-tp1", "event": "start", "ok": True, "before_group": {"ok": True}},
        {
            "group": "ng-tp1",
            "event": "stop",
            "after_group": {"ok": False, "error": "hook `y` failed", "gpus": [0]},
        },
    ]
    got = hook_failures(SimpleNamespace(engine_events=events, hook_errors=[]))
    assert [f["may_be_left"] for f in got] == [
        "nothing a before_group hook stopped (the group has none)",
        "whatever its before_group hook stopped on GPUs 0 (that hook ran)",
    ]


def test_equal_variances_keep_their_degrees_of_freedom() -> None:
    """Two rounds a run, the new ones the old x 0.7: equal variances of the logs, Welch's degrees of
    freedom 2 (2 - 1e-15 in floats is not truncated to 1, which would widen the interval 3x)."""
    from pytest_specbench.stats.gate_stats import cell_test

    old = [74.17276540247546, 76.70150471368555]
    t = cell_test("c", old, [x * 0.7 for x in old])
    assert t is not None and t.df == 2 and round(math.exp(t.d), 6) == 0.7


def test_the_last_line_says_what_was_checked_whatever_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI log's tail is the gate's last line: "checked: ..." with each check and its cells when
    the gate passes, when it fails, and after INCONCLUSIVE, also where no cell could be gated
    on tok/s (never "checked nothing it was asked to")."""
    cells = {c: [100.0] * 3 for c in ("a", "b", "c", "d")}
    old, new = _write(tmp_path, _run(cells), _run(cells))
    assert main([old, new, "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    tok_s = (
        "checked: tok/s on 4 cell(s) (4 with the power to see the allowed drop), run-wide tok/s over 4 "
        "cell(s), failed or absent on 4 cell(s)"
    )
    assert capsys.readouterr().out.splitlines()[-2:] == [f"0 regression(s) against {old}", tok_s]
    old, new = _write(tmp_path, _run(cells), _run({**cells, "d": [80.0] * 3}))
    assert main([old, new, "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == tok_s
    one = {"a": [100.0]}
    old, new = _write(tmp_path, _run(one), _run(one))
    assert main([old, new, "--max-tok-s-drop", "0.10", "--max-accept-drop", "0.02"]) == 3
    assert capsys.readouterr().out.splitlines()[-1] == (
        "INCONCLUSIVE (exit 3): tok/s gated on no cell (0 were unreliable, 1 had fewer than 2 rounds in a "
        "run); checked: tok/s on 0 cell(s), acceptance length on 0 cell(s), failed or absent on 1 cell(s)"
    )
