"""What each gated cell says it could detect (docs/gate.md "What each cell could detect, and
power"): a drop of D fails the cell in at least 80 % of runs, for one regressed cell among many
as the gate judges it (Holm's step-down over the cells, the run-to-run spread read from them).
Seeded simulations through gate()."""

from __future__ import annotations

import math
import random
import re
import statistics

import pytest
from test_gate import _run
from test_gate_spread import _runs

from pytest_specbench.report.gate import gate
from pytest_specbench.stats.gate_stats import power_shift


@pytest.mark.parametrize(
    ("alpha", "df", "shift"),
    [
        (0.025, 1, 16.334),
        (0.025, 4, 3.7611),
        (0.025 / 20, 4, 8.4432),
        (0.025 / 20, 2, 25.369),
        (0.025, 1000, 2.804),
    ],
)
def test_the_shift_for_80_percent_power_is_the_noncentral_t_s(alpha: float, df: int, shift: float) -> None:
    """A one-sided t-test at alpha with df degrees of freedom rejects with probability 0.80 at
    these shifts (in standard errors; scipy.stats.nct.sf(t.ppf(1 - alpha, df), df, shift) = 0.800).
    t_alpha + t_0.80 is short of them where df is small: 14.08 at 1, 7.70 at 4 among 20 cells."""
    assert round(power_shift(alpha, 0.80, df), 4 if shift < 20 else 3) == pytest.approx(shift, abs=2e-3)


def _claimed(lines: list[str], cell: str) -> float:
    (line,) = [x for x in lines if x.startswith(f"{cell}: could detect a drop of ")]
    m = re.search(r"drop of ([\d.]+)%", line)
    assert m is not None
    return float(m.group(1)) / 100


SETTINGS = [(10, 0.01, 0.0), (10, 0.01, 0.01), (10, 0.01, 0.03), (5, 0.02, 0.0), (3, 0.03, 0.0)]


@pytest.mark.parametrize(("rounds", "cv", "run_sd"), SETTINGS)
def test_one_regressed_cell_among_20_fails_at_the_drop_it_could_detect(
    rounds: int, cv: float, run_sd: float
) -> None:
    """20 cells of 3-10 rounds at 1-3 % CV, a 2 % limit, a run-to-run spread of 0-3 % a run: D,
    the drop the gate says cell0 could detect (the median over 100 gates of unchanged code), taken
    by cell0 alone, fails it in at least 80 % of 300 gates. Drops claimed as (t_alpha + t_0.80) x
    the standard error read failed it in 68-74 % of them (with the spread read as a point too:
    49-68 %)."""
    rng = random.Random(rounds + int(run_sd * 1000))
    cells = [(rounds, cv)] * 20
    claims = []
    for _ in range(100):
        g = gate(_run(_runs(rng, cells, run_sd)), _run(_runs(rng, cells, run_sd)), max_tok_s_drop=0.02)
        claims.append(_claimed(g.gated, "cell0"))
    drop = statistics.median(claims)
    caught = 0
    for _ in range(300):
        old, new = _runs(rng, cells, run_sd), _runs(rng, cells, run_sd)
        new["cell0"] = [x * (1 - drop) for x in new["cell0"]]
        g = gate(_run(old), _run(new), max_tok_s_drop=0.02)
        caught += any(x.startswith("cell0:") for x in g.regressions)
    assert caught / 300 >= 0.80, (drop, caught)
    assert math.isfinite(drop) and 0.02 < drop < 1
