"""The run-to-run spread the gate counts (docs/gate.md "Run-to-run spread"): one run of unchanged
code lands apart from another by more than its rounds say, and the gate holds identical code to
its nominal 2.5 % with one cell or fifty. Below 4 cells with rounds in both runs the spread is
assumed (5 % a run) or stated (--run-spread); from 4 cells it is read from them, at its upper
bound, with the few degrees of freedom a few cells give. Seeded simulations through gate()."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from test_gate import _run, _write

from pytest_specbench.report.gate import gate
from pytest_specbench.report.summary import main
from pytest_specbench.stats.gate_stats import CellTest, run_to_run_spread


def _runs(rng: random.Random, cells: list[tuple[int, float]], run_sd: float) -> dict[str, list[float]]:
    """One run of unchanged code: per cell (rounds, round CV) a level of its own for this run (sd
    ``run_sd``, the run-to-run spread) and its rounds' noise around it."""
    out = {}
    for i, (rounds, cv) in enumerate(cells):
        level = 100.0 * math.exp(rng.gauss(0, run_sd))
        out[f"cell{i}"] = [level * math.exp(rng.gauss(0, cv)) for _ in range(rounds)]
    return out


def _false_fails(
    cells: list[tuple[int, float]], run_sd: float, drop: float, trials: int, seed: int, per_cell: bool = False
) -> float:
    """The share of ``trials`` gates of two runs of unchanged code that fail (``per_cell``: on a
    cell's own verdict, the run-wide check left aside: it holds its own 2.5 %)."""
    rng = random.Random(seed)
    fails = 0
    for _ in range(trials):
        old, new = _run(_runs(rng, cells, run_sd)), _run(_runs(rng, cells, run_sd))
        got = gate(old, new, max_tok_s_drop=drop).regressions
        fails += any(not (per_cell and x.startswith("run-wide")) for x in got)
    return fails / trials


@pytest.mark.parametrize("n_cells", [1, 2, 3])
@pytest.mark.parametrize("run_sd", [0.03, 0.05])
def test_identical_code_in_one_to_three_cells_fails_at_most_the_nominal_rate(
    n_cells: int, run_sd: float
) -> None:
    """1-3 cells of 10 rounds at 1 % CV, a 2 % limit, a run-to-run spread of 3-5 % a run: too few
    cells to read it from, so 5 % is assumed; identical code fails in at most 2.5 % of 1000 gates
    (with no spread assumed, 24-69 % of them failed)."""
    assert _false_fails([(10, 0.01)] * n_cells, run_sd, 0.02, 1000, seed=n_cells) <= 0.025


@pytest.mark.parametrize("n_cells", [4, 6, 10])
@pytest.mark.parametrize("run_sd", [0.005, 0.03])
def test_identical_code_with_the_spread_read_from_a_few_cells_fails_at_most_the_nominal_rate(
    n_cells: int, run_sd: float
) -> None:
    """4-10 cells of 10 rounds at 1 % CV, gated at no allowed drop at all (the worst case: the
    true new/old sits on the limit): a cell's own verdict fails at most 2.5 % of 600 gates,
    whether a run's spread is half a round's CV (0.5 %) or three times it (3 %) (read as a point
    less the median of the rounds' variances, with the rounds' degrees of freedom: 7-19 %)."""
    assert _false_fails([(10, 0.01)] * n_cells, run_sd, 0.0, 600, seed=n_cells, per_cell=True) <= 0.025


@pytest.mark.parametrize("run_sd", [0.01, 0.03])
def test_steady_cells_among_noisy_ones_keep_their_spread(run_sd: float) -> None:
    """4 cells of 3 rounds at 5 % CV and 4 of 10 rounds at 0.5 %: the steady cells' new/old
    carries the whole run-to-run spread, which the noisy cells' rounds cover. Read from the
    cells' ratios each over its own standard error, it holds the steady ones to it: at most
    2.5 % of 600 gates fail on a cell's verdict at no allowed drop (read as the cells' robust
    scale less the median of the rounds' variances, the noisy cells' variance hid it: 14-28 %)."""
    cells = [(3, 0.05)] * 4 + [(10, 0.005)] * 4
    assert _false_fails(cells, run_sd, 0.0, 600, seed=8, per_cell=True) <= 0.025


def test_the_spread_read_from_five_cells_by_hand() -> None:
    """Five cells, each se_rounds 0.005, log new/old -0.02, -0.01, 0, 0.01, 0.02. Their ratios
    over sqrt(0.005**2 + tau**2) have a robust scale of 1 where 1.4826**2 x 0.01**2 x 5/4 =
    2.7476e-4 = 0.005**2 + tau**2: tau**2 = 2.4976e-4 (read: 0.01580). Its upper 80 % bound adds
    0.84 x 2.7476e-4 x sqrt(2 / (0.37 x 5)) = 2.3997e-4: tau = sqrt(4.8973e-4) = 0.02213, with
    0.37 x 4 = 1.48 degrees of freedom."""
    tests = [CellTest(f"c{i}", d, 0.005, 18, 10, 10) for i, d in enumerate((-0.02, -0.01, 0.0, 0.01, 0.02))]
    sp = run_to_run_spread(tests)
    assert sp.how == "read" and sp.cells == 5
    assert round(sp.read, 5) == 0.01580 and round(sp.tau, 5) == 0.02213 and round(sp.df, 2) == 1.48
    # three cells: assumed, 5 % a run, sqrt(2) x 0.05 in a difference of two runs; or as stated
    assert run_to_run_spread(tests[:3]).how == "assumed"
    assert round(run_to_run_spread(tests[:3]).tau, 5) == round(math.sqrt(2) * 0.05, 5)
    stated = run_to_run_spread(tests, stated=0.01)
    assert stated.how == "stated" and round(stated.tau, 5) == round(math.sqrt(2) * 0.01, 5)
    assert math.isinf(stated.df)


def test_a_stated_spread_is_counted_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One cell, steady rounds, at 0.80 of its old tok/s with a 10 % limit. Assumed 5 % a run:
    se 0.0707, t (ln 0.8 - ln 0.9) / 0.0707 = -1.67, not separated, and the cell could only see
    26.2 %: inconclusive (exit 3). Stated at 1 % (--run-spread 0.01, from repeat runs of the same
    code): se 0.0141, t -8.3, a regression (exit 1)."""
    old, new = _write(tmp_path, _run({"c": [100.0] * 3}), _run({"c": [80.0] * 3}))
    assert main([old, new, "--max-tok-s-drop", "0.10"]) == 3
    said = capsys.readouterr().out.splitlines()
    assert (
        "run-to-run spread assumed: sd 7.1% per cell (5.0% a run): fewer than 4 cells with rounds in both "
        "runs to read it from (--run-spread S states one run's, from repeat runs of the same code)"
    ) in said
    assert "- c: could detect a drop of 26.2% (at 80% power); too little power" in said
    assert main([old, new, "--max-tok-s-drop", "0.10", "--run-spread", "0.01"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert "run-to-run spread stated (--run-spread): sd 1.4% per cell (1.0% a run)" in said
    assert said[-2] == (
        "- c: tok/s 100.000 -> 80.000 (new/old 0.800 [0.778, 0.823] from 3 + 3 rounds; p 0.0000 against "
        "0.900, Holm's bar 0.0250 of 1 cell(s): below 0.900)"
    )
    with pytest.raises(SystemExit):
        main([old, new, "--max-tok-s-drop", "0.10", "--run-spread", "5"])
    assert "expected a fraction in [0, 1)" in capsys.readouterr().err
