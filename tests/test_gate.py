"""The regression gate a CI can believe (docs/gate.md): an inconclusive gate exits 3, not 0 and
not a regression's 1; Holm over the cells and the run-to-run spread keep identical code passing;
each gated cell says the smallest drop it could detect; acceptance is gated wherever both runs
measured it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pytest_specbench.report.gate import EXIT_INCONCLUSIVE, gate
from pytest_specbench.report.summary import main


def _run(cells: dict[str, list[float]], **extra: dict) -> dict:
    """A run whose cells have these rounds' tok/s (the cell's tok/s: their geometric mean)."""
    out = []
    for cell, rates in cells.items():
        e = {
            "output_tokens_per_s": math.exp(sum(math.log(r) for r in rates) / len(rates)),
            "round_tokens_per_s": rates,
            "accept_length": None,
            "errors": 0,
            **extra.get(cell, {}),
        }
        out.append({"param": cell, "extra_info": e, "stats": {"data": [1.0] * len(rates)}})
    return {"benchmarks": out, "specbench": {"failed_cells": []}}


def _write(tmp_path: Path, old: dict, new: dict) -> tuple[str, str]:
    a, b = tmp_path / "old.json", tmp_path / "new.json"
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    return str(a), str(b)


CELLS = [f"{m}-c{c}" for m in ("ar", "ngram-d4", "draft") for c in (1, 4, 16)]


def test_a_run_against_itself_with_every_cell_disturbed_is_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The must-show: gating a run against itself where every cell was disturbed checked no tok/s:
    a non-zero exit of its own (3, not a regression's 1), its last line named INCONCLUSIVE."""
    rounds = {c: [100.0, 102.0, 98.0] for c in CELLS}
    busy = {c: {"disturbed": "other processes took 64% of the cores"} for c in CELLS}
    run = _run(rounds, **busy)
    old, new = _write(tmp_path, run, run)
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == EXIT_INCONCLUSIVE == 3
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == (
        "INCONCLUSIVE (exit 3): tok/s gated on no cell (9 were unreliable); checked: tok/s on 0 cell(s), "
        "failed or absent on 9 cell(s)"
    )
    none = "tok/s gated on 0 of 9 cell(s): NONE, every one was disturbed or saturated in a run"
    assert none in "\n".join(said)
    # allowed by a flag: exit 0, still said
    assert main([old, new, "--max-tok-s-drop", "0.10", "--allow-inconclusive"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-2].startswith("INCONCLUSIVE (exit 3)") and said[-1] == "(--allow-inconclusive: exit 0)"
    # a regression beside it is a regression (exit 1), whatever else was inconclusive
    gone = _run({c: r for c, r in rounds.items() if c != "draft-c16"}, **busy)
    old, new = _write(tmp_path, run, gone)
    assert main([old, new, "--max-tok-s-drop", "0.10", "--allow-inconclusive"]) == 1


def test_every_cell_too_noisy_is_inconclusive_and_each_says_what_it_could_detect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Old [100, 100], new [64, 100]: the rounds' standard error of the log difference is
    |ln 0.64| / 2 = 0.2231 with 1 degree of freedom; one cell, so the run-to-run spread is assumed,
    5 % a run: sqrt(2) x 0.05 = 0.0707 more, se 0.2341, still 1 degree of freedom (Satterthwaite:
    0.0548**2 / 0.0498**2 = 1.2). One cell: Holm's bar is 2.5 % one-sided, where 80 % power needs
    the noncentral t's shift 16.334 (not t 12.706 + t 1.376); a se read from one degree of freedom
    is below the true one in half the runs, by sqrt(0.4705) = 0.6859 at the median (Wilson and
    Hilferty), so the drop seen is 1 - 0.9 x exp(-16.334 x 0.2341 / 0.6859), 99.7 %."""
    old, new = _write(tmp_path, _run({"ngram-c4": [100.0, 100.0]}), _run({"ngram-c4": [64.0, 100.0]}))
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 3
    said = capsys.readouterr().out.splitlines()
    assert "- ngram-c4: could detect a drop of 99.7% (at 80% power); too little power" in said
    assert (
        "run-to-run spread assumed: sd 7.1% per cell (5.0% a run): fewer than 4 cells with rounds in both "
        "runs to read it from (--run-spread S states one run's, from repeat runs of the same code)"
    ) in said
    assert said[-1].startswith(
        "INCONCLUSIVE (exit 3): every cell gated on tok/s had too little power (1 cell(s); more rounds"
    )
    # steady rounds, the spread assumed: se 0.0707 known, shift 1.960 + 0.842 = 2.802 (2.804 at
    # 1000 degrees of freedom): 1 - 0.9 x exp(-2.804 x 0.0707) = 26.2 %, more than twice the 10 %
    old, new = _write(tmp_path, _run({"ngram-c4": [100.0] * 3}), _run({"ngram-c4": [100.0] * 3}))
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 3
    said = capsys.readouterr().out.splitlines()
    assert "- ngram-c4: could detect a drop of 26.2% (at 80% power); too little power" in said
    # stated as 0 (--run-spread 0): the interval is the point, the smallest drop seen the allowed one
    assert main([old, new, "--max-tok-s-drop", "0.10", "--run-spread", "0"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert "- ngram-c4: could detect a drop of 10.0% (at 80% power)" in said
    assert "run-to-run spread stated (--run-spread): sd 0.0% per cell (0.0% a run)" in said


def _identical_code(rng: random.Random, cells: int, rounds: int, cv: float, run_sd: float) -> dict:
    """One run of unchanged code: per cell a run-level offset (the machine of that run, for that
    cell) and its rounds' noise around it."""
    out = {}
    for i in range(cells):
        level = 100.0 * math.exp(rng.gauss(0, run_sd))
        out[f"cell{i}"] = [level * math.exp(rng.gauss(0, cv)) for _ in range(rounds)]
    return out


@pytest.mark.parametrize(("rounds", "cv", "run_sd"), [(3, 0.03, 0.0), (10, 0.01, 0.03)])
def test_identical_code_over_many_cells_passes_at_a_small_threshold(
    rounds: int, cv: float, run_sd: float
) -> None:
    """50 cells of unchanged code gated at a 2 % drop: 3 rounds each at 3 % CV (50 chances to
    fail: Holm over the cells), and 10 rounds at 1 % CV with a 3 % run-to-run offset per cell that
    the rounds do not hold (the spread counted). Each fails at most 5 % of the gates."""
    rng = random.Random(7)
    fails = 0
    trials = 60
    for _ in range(trials):
        old = _run(_identical_code(rng, 50, rounds, cv, run_sd))
        new = _run(_identical_code(rng, 50, rounds, cv, run_sd))
        g = gate(old, new, max_tok_s_drop=0.02)
        fails += bool(g.regressions)
    assert fails / trials <= 0.05, fails


def test_a_real_regression_among_identical_cells_still_fails(tmp_path: Path) -> None:
    """The spread counted is robust to the regressed cells themselves: 3 of 20 cells at 0.70 of
    their old tok/s (steady 3-round cells elsewhere at 1 % CV) fail, named, and no other does."""
    rng = random.Random(3)
    old = _identical_code(rng, 20, 3, 0.01, 0.0)
    new = _identical_code(rng, 20, 3, 0.01, 0.0)
    for c in ("cell1", "cell7", "cell12"):
        new[c] = [x * 0.70 for x in new[c]]
    g = gate(_run(old), _run(new), max_tok_s_drop=0.10)
    assert sorted(r.split(":")[0] for r in g.regressions) == ["cell1", "cell12", "cell7"]
    assert not g.inconclusive and g.exit_code == 1


def test_acceptance_is_gated_in_a_cell_of_other_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cell whose rounds did other work is not compared on tok/s, but its acceptance length is
    counted from tokens: 4.0 -> 2.4 is a regression (exit 1)."""

    def doc(requests: int, rounds: int, accept: float) -> dict:
        d = _run({"ngram-c4": [100.0] * rounds}, **{"ngram-c4": {"accept_length": accept}})
        d["benchmarks"][0]["extra_info"].update(requests=requests, prompt_tokens=128 * requests)
        return d

    old, new = _write(tmp_path, doc(4, 2, 4.0), doc(3, 3, 2.4))
    assert main([old, new, "--max-accept-drop", "0.02"]) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "- ngram-c4: accept length 4.000 -> 2.400 (new/old 0.600, allowed down to 0.980)",
        "checked: acceptance length on 1 cell(s), failed or absent on 1 cell(s)",
    ]


def test_the_committed_busy_run_gated_against_itself_is_inconclusive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/results/cpu-interleaved/run3-busy.json: the default job beside two busy loops, every one
    of its 43 cells disturbed. Gated against itself: exit 3, named INCONCLUSIVE on its last line."""
    run = Path(__file__).resolve().parent.parent / "docs" / "results" / "cpu-interleaved" / "run3-busy.json"
    assert main([str(run), str(run), "--max-tok-s-drop", "0.10"]) == 3
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == (
        "INCONCLUSIVE (exit 3): tok/s gated on no cell (43 were unreliable); checked: tok/s on 0 cell(s), "
        "failed or absent on 43 cell(s)"
    )
