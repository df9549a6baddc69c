"""Tuning a sweep (deciding/tune.py): a setting is tuned out only when its interval against the
best lies wholly below 1 - 2 %, each of the K - 1 comparisons at 5 % / (K - 1). Each test fails
when one line of the rule changes (scripts/mutants.py: tune-separated-margin, tune-family)."""

from __future__ import annotations

from typing import Any

import pytest
from test_deciding import _tuned_matrix

from pytest_specbench.deciding import tune
from pytest_specbench.deciding.race import Race
from pytest_specbench.stats import paired


def _decide(ratios: dict[int, float]) -> tuple[Race, dict[str, Any]]:
    """Each setting's deciding cell (c1) at ``ratio`` x its interleaved baseline, 4 steady rounds."""
    m = _tuned_matrix(4)
    race = Race(m)
    cells = {c.id: c for c in m.cells()}
    for d, ratio in ratios.items():
        cell = cells[f"knob-d{d}-tp1-c1-out8"]
        own = [100.0 * ratio * f for f in (1.0, 1.001, 0.999, 1.0)]
        result = {
            "cell_id": cell.id,
            "group": cell.group.id,
            "params": cell.params(),
            "metrics": {"round_tokens_per_s": own, "reference": {"round_tokens_per_s": [100.0] * 4}},
            "extra_info": {},
            "round_times": [1.0] * 4,
        }
        race.record(cell, result)
    race.skip_reason(cells["knob-d1-tp1-c4-out8"])  # decides the sweep
    return race, race.tuning["knob"]


def test_a_setting_less_than_the_margin_below_the_best_is_kept() -> None:
    """knob-d2 at x0.985 of knob-d3, its interval about [0.983, 0.987]: below 1, but not below
    0.98, so not separated: kept (tune-separated-margin); knob-d1 at x0.6 is tuned out."""
    race, d = _decide({1: 0.6, 2: 0.985, 3: 1.0, 4: 0.9})
    assert d["kept"] == ["knob-d3", "knob-d2"] and sorted(d["separated"]) == ["knob-d1", "knob-d4"]
    shapes = [paired.axes(c.params()) for c in race.matrix.cells() if c.id == "knob-d2-tp1-c1-out8"]
    iv = tune.against(race, shapes, "knob-d2", "knob-d3", 3)
    assert iv is not None and 1 - paired.EQUIVALENCE < iv[2] < 1


def test_each_comparison_with_the_best_is_at_five_percent_over_the_settings_less_one() -> None:
    """Four settings: three comparisons with the best, each interval at 5 % / 3 (tune-family)."""
    race, d = _decide({1: 0.6, 2: 0.985, 3: 1.0, 4: 0.9})
    shapes = [paired.axes(c.params()) for c in race.matrix.cells() if c.id == "knob-d1-tp1-c1-out8"]
    at_3 = tune.against(race, shapes, "knob-d1", "knob-d3", 3)
    at_1 = tune.against(race, shapes, "knob-d1", "knob-d3", 1)
    assert at_3 is not None and at_1 is not None and at_3[1] < at_1[1]
    assert d["separated"]["knob-d1"] == pytest.approx([round(x, 6) for x in at_3])
