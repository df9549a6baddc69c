"""A raced run gated against a full run of the same matrix (docs/gate.md): the cells both runs
measured are judged; the cells the new run's race dropped (``specbench.race.dropped_cells``) or
tuned out are listed without a verdict, not as absent; a cell truly absent still fails; and the
last line names each check the gate ran, acceptance included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.report.gate import gate
from pytest_specbench.report.summary import main

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
DROPPED = {
    "cpu-race-iz": [
        "draft-oracle-tp1-c1-out64-t1",
        "draft-oracle-tp1-c4-out64-t1",
        "forced-a1-tp1-c1-out64-t1",
        "forced-a1-tp1-c4-out64-t1",
        "forced-a2-tp1-c1-out64-t1",
        "forced-a2-tp1-c4-out64-t1",
    ],
    "cpu-race": [
        "draft-oracle-tp1-c4-out64-t1",
        "forced-a1-tp1-c1-out64-t1",
        "forced-a1-tp1-c4-out64-t1",
        "forced-a2-tp1-c1-out64-t1",
        "forced-a2-tp1-c4-out64-t1",
        "forced-a3-tp1-c1-out64-t1",
        "forced-a3-tp1-c4-out64-t1",
    ],
}
HEAD = "cell(s) the new run's race left out, no verdict (not regressions, not missing):"


def _load(run: str, name: str) -> dict:
    return json.loads((RESULTS / run / name).read_text())


def _listed(said: list[str]) -> list[str]:
    """The cell ids under the no-verdict heading."""
    at = next(i for i, x in enumerate(said) if x.endswith(HEAD))
    out = []
    for x in said[at + 1 :]:
        if not x.startswith("- "):
            break
        out.append(x[2:].split(":")[0])
    return out


@pytest.mark.parametrize("run", sorted(DROPPED))
def test_a_raced_run_gated_against_the_full_run_passes_and_lists_its_dropped_cells(
    run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed full and raced runs of one matrix: exit 0, no cell called absent, each cell
    out of the race listed by id without a verdict (and whom it lost to). tok/s at a 30 % drop with
    the run-to-run spread stated at 5 % a run (more than the cells show: 4.9 and 5.5 % per cell,
    3.5-3.9 % a run): every cell could see 46-54 %, within twice the limit; read from the 11-12
    cells instead, the spread counts at its upper 80 % bound with about 4 degrees of freedom, and
    no cell could (exit 3)."""
    full, race = str(RESULTS / run / "full.json"), str(RESULTS / run / "race.json")
    tok_s = ["--max-tok-s-drop", "0.30", "--run-spread", "0.05"]
    for asked in (["--max-accept-drop", "0.02"], [*tok_s, "--max-accept-drop", "0.02"]):
        assert main([full, race, *asked]) == 0
        said = capsys.readouterr().out.splitlines()
        assert not any("absent from the new one" in x for x in said)
        assert f"{len(DROPPED[run])} {HEAD}" in said
        assert _listed(said) == DROPPED[run]
        assert all(
            "not gated: the new run dropped it (it lost a race): lost to " in x
            for x in said
            if x[2:].split(":")[0] in DROPPED[run] and x.startswith("- ")
        )
    g = gate(
        _load(run, "full.json"),
        _load(run, "race.json"),
        max_tok_s_drop=0.30,
        max_accept_drop=0.02,
        run_spread=0.05,
    )
    assert g.regressions == [] and g.exit_code == 0
    assert [x.split(":")[0] for x in g.left_out] == DROPPED[run]
    assert main([full, race, "--max-tok-s-drop", "0.30"]) == 3
    capsys.readouterr()
    # no threshold: the cells out of the race are not counted as missing either
    assert main([full, race]) == 0
    n = len(DROPPED[run])
    no_gate = f"no gate asked for: exit 0 whatever the table shows ({n} cell(s) the new run's race left out:"
    assert capsys.readouterr().out.splitlines()[-1].startswith(no_gate + " no verdict, not missing);")


def test_a_cell_gone_from_the_raced_run_without_being_dropped_still_fails_as_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cell measured in the race, removed from its benchmarks (not dropped): absent, exit 1; so
    is a dropped cell whose record is gone. A cell tuned out (``race.tuned_out``) is not missing."""
    full = str(RESULTS / "cpu-race-iz" / "full.json")
    race = _load("cpu-race-iz", "race.json")
    race["benchmarks"] = [b for b in race["benchmarks"] if b["param"] != "ngram-d4-tp1-c4-out64-t1"]
    new = tmp_path / "new.json"
    new.write_text(json.dumps(race))
    assert main([full, str(new), "--max-accept-drop", "0.02"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-3:] == [
        f"1 regression(s) against {full}:",
        "- ngram-d4-tp1-c4-out64-t1: measured in the old run, absent from the new one",
        "checked: acceptance length on 9 cell(s), failed or absent on 12 cell(s); no verdict on 6 cell(s) "
        "the new run's race left out",
    ]
    assert _listed(said) == DROPPED["cpu-race-iz"]
    # a dropped cell whose record is gone: truly absent
    race = _load("cpu-race-iz", "race.json")
    race["specbench"]["race"]["dropped_cells"] = race["specbench"]["race"]["dropped_cells"][1:]
    new.write_text(json.dumps(race))
    assert main([full, str(new), "--max-accept-drop", "0.02"]) == 1
    assert capsys.readouterr().out.splitlines()[-2] == (
        "- draft-oracle-tp1-c1-out64-t1: measured in the old run, absent from the new one"
    )
    # the same cell tuned out instead: listed without a verdict, exit 0
    race["specbench"]["race"]["tuned_out"] = [
        {"cell_id": "draft-oracle-tp1-c1-out64-t1", "params": {}, "reason": "draft-tp1 carried past c1"}
    ]
    new.write_text(json.dumps(race))
    assert main([full, str(new), "--max-accept-drop", "0.02"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert (
        "- draft-oracle-tp1-c1-out64-t1: not gated: the new run's tuning left it out (tuned out, not run): "
        "draft-tp1 carried past c1"
    ) in said


def test_the_last_line_names_the_acceptance_check_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Acceptance asked and judged: a pass closes with each check and its cells; an inconclusive
    tok/s (every cell too little power on 2 cores) says so, and that acceptance ran, never that
    the gate checked nothing it was asked to."""
    full, race = str(RESULTS / "cpu-race-iz" / "full.json"), str(RESULTS / "cpu-race-iz" / "race.json")
    assert main([full, race, "--max-accept-drop", "0.02"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "checked: acceptance length on 10 cell(s), failed or absent on 12 cell(s); no verdict on 6 cell(s) "
        "the new run's race left out"
    )
    assert main([full, race, "--max-tok-s-drop", "0.10", "--max-accept-drop", "0.02"]) == 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        "INCONCLUSIVE (exit 3): every cell gated on tok/s had too little power (12 cell(s); more rounds, "
        "a quieter machine, or --run-spread S from repeat runs: docs/gate.md); checked: tok/s on 12 cell(s) "
        "(0 with the power to see the allowed drop), "
        "run-wide tok/s over 12 cell(s), acceptance length on 10 cell(s), failed or absent on 12 cell(s); "
        "no verdict on 6 cell(s) the new run's race left out"
    )
    assert "checked nothing" not in last
