"""Tuning on settings measured apart from their baseline (bracketed groups: their own tok/s, in
different engine groups): decided by interval on their own speeds widened by the drift allowed
between groups, so a setting far behind is tuned out and one within the drift is carried; a
setting with no interval against the best is carried, never cut on a point."""

from __future__ import annotations

from typing import Any

from pytest_specbench.deciding.race import Race
from pytest_specbench.matrix.schema import parse


def _matrix() -> Any:
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "m"},
            "knob": {
                "backend": "hf",
                "model": "m",
                "speculative": {"algorithm": "ngram", "num_draft_tokens": [1, 2, 3]},
                "tune": {"at": {"concurrency": 1}, "keep": 1},
            },
        },
        "workloads": {"throughput": {"concurrency": [1, 4], "output_tokens": [8], "rounds": 4, "warmup": 0}},
    }
    return parse(doc, "m.yaml")


def _measure(race: Race, cell: Any, rates: list[float], ref: list[float] | None) -> None:
    metrics: dict[str, Any] = {"round_tokens_per_s": rates}
    if ref is not None:
        metrics["reference"] = {"round_tokens_per_s": ref}
    race.record(
        cell,
        {
            "cell_id": cell.id,
            "group": cell.group.id,
            "params": cell.params(),
            "metrics": metrics,
            "extra_info": {},
            "round_times": [1.0] * len(rates),
        },
    )


def test_settings_measured_apart_are_decided_on_their_own_speeds_widened_by_the_drift() -> None:
    m = _matrix()
    cells = {c.id: c for c in m.cells()}
    race = Race(m)
    race.bracketed("a-bracketed-group", 1.0, 1.13)  # the run's brackets: 13 % across one group
    noise = (1.0, 1.01, 0.99, 1.0)
    # d1 at 60 % of d3 (beyond the 13 % drift): out; d2 at 92 % (within it): carried with d3; the
    # baseline's own cell at the deciding shape gives each its standing
    _measure(race, cells["ar-tp1-c1-out8"], [50.0 * x for x in noise], None)
    for d, speed in ((1, 60.0), (2, 92.0), (3, 100.0)):
        cid = f"knob-d{d}-tp1-c1-out8"
        _measure(race, cells[cid], [speed * x for x in noise], None)
    assert race.skip_reason(cells["knob-d1-tp1-c4-out8"]) == "tuned out at concurrency=1: best was knob-d3"
    d = race.tuning["knob"]
    assert d["kept"] == ["knob-d3", "knob-d2"] and list(d["separated"]) == ["knob-d1"]
    lo, hi = d["separated"]["knob-d1"][1:]
    # widened by the brackets' 13 % compounded over the two groups recorded between d1 and d3
    assert hi < 0.98 and abs(hi / 0.6 - 1 / (1 - (1.13**2 - 1))) < 0.05
    assert race.skip_reason(cells["knob-d2-tp1-c4-out8"]) is None


def test_a_setting_without_an_interval_against_the_best_is_carried() -> None:
    m = _matrix()
    cells = {c.id: c for c in m.cells()}
    race = Race(m)
    noise = (1.0, 1.01, 0.99, 1.0)
    # d3 and d1 beside their baseline; d2 measured apart: no interval against d3, carried
    _measure(race, cells["ar-tp1-c1-out8"], [50.0 * x for x in noise], None)
    _measure(race, cells["knob-d3-tp1-c1-out8"], [100.0 * x for x in noise], [50.0] * 4)
    _measure(race, cells["knob-d1-tp1-c1-out8"], [60.0 * x for x in noise], [50.0] * 4)
    _measure(race, cells["knob-d2-tp1-c1-out8"], [40.0 * x for x in noise], None)
    race.skip_reason(cells["knob-d1-tp1-c4-out8"])
    d = race.tuning["knob"]
    assert d["kept"] == ["knob-d3", "knob-d2"] and list(d["separated"]) == ["knob-d1"]
