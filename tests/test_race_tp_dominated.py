"""A TP size dominated at a cheaper shape (slower per user than a smaller TP size of the same
method, beyond the drift allowed between groups, hence slower per GPU too) skips its costlier
shapes, through deciding/race.py's Race; a larger TP as fast per user is kept, and so is the
baseline's own TP size."""

from __future__ import annotations

from typing import Any

from pytest_specbench.deciding.race import Race
from pytest_specbench.matrix.schema import parse


def _matrix() -> Any:
    doc = {
        "models": {"m": "/nonexistent/model"},
        "methods": {
            "ar": {"backend": "sglang-server", "model": "m"},
            "dflash": {"backend": "sglang-server", "model": "m", "speculative": {"algorithm": "ngram"}},
        },
        "tp": [4, 8],
        "workloads": {"throughput": {"concurrency": [1, 16], "output_tokens": [256], "rounds": 5}},
    }
    return parse(doc, "m.yaml")


def _measure(race: Race, cell: Any, rates: list[float]) -> None:
    race.record(
        cell,
        {
            "cell_id": cell.id,
            "group": cell.group.id,
            "params": cell.params(),
            "metrics": {"round_tokens_per_s": rates},
            "extra_info": {},
            "round_times": [1.0] * len(rates),
        },
    )


def test_a_tp_size_slower_per_user_at_a_cheap_shape_skips_its_costlier_shapes() -> None:
    m = _matrix()
    cells = {c.id: c for c in m.cells()}
    race = Race(m)
    race.bracketed("some-member-group", 1.0, 1.02)  # the run's brackets measured 2 % across one group
    # c1: dflash at TP8 runs 70 % of its TP4 speed per user (35 % per GPU), 1 % noise
    _measure(race, cells["dflash-tp4-c1-out256"], [100.0, 101.0, 99.0, 100.5, 99.5])
    _measure(race, cells["dflash-tp8-c1-out256"], [70.0, 70.7, 69.3, 70.3, 69.7])
    _measure(race, cells["ar-tp4-c1-out256"], [40.0, 40.2, 39.8, 40.1, 39.9])
    _measure(race, cells["ar-tp8-c1-out256"], [28.0, 28.1, 27.9, 28.0, 28.0])
    why = race.skip_reason(cells["dflash-tp8-c16-out256"])
    assert why is not None and why.startswith(
        "out of the race: its TP size is dominated: at shape tp8-c1-out256 it ran x0.700 ["
    ), why
    drift = "(drift of ±"
    assert (
        f"per user of dflash-tp4-c1-out256 {drift}" in why
        and "between groups measured), x0.350 per GPU" in why
    )
    rec = race.doc()["dropped_cells"][-1]
    assert rec["cell_id"] == "dflash-tp8-c16-out256" and rec["extra_info"]["race"]["tp_dominated_by"] == (
        "dflash-tp4-c1-out256"
    )
    # the smaller TP size's own costlier shape runs, and the baseline's TP8 cells stay (its
    # members' verdicts read them)
    assert race.skip_reason(cells["dflash-tp4-c16-out256"]) is None
    assert race.skip_reason(cells["ar-tp8-c16-out256"]) is None


def test_a_larger_tp_size_within_the_drift_allowed_is_kept() -> None:
    m = _matrix()
    cells = {c.id: c for c in m.cells()}
    race = Race(m)
    # 30 % slower per user, but no drift measured between groups yet: not evidence
    _measure(race, cells["dflash-tp4-c1-out256"], [100.0, 101.0, 99.0, 100.5, 99.5])
    _measure(race, cells["dflash-tp8-c1-out256"], [70.0, 70.7, 69.3, 70.3, 69.7])
    assert race.skip_reason(cells["dflash-tp8-c16-out256"]) is None
    # 10 % slower per user, where the brackets measured 13 % across a group: within it, kept
    race = Race(m)
    race.bracketed("some-member-group", 1.0, 1.13)
    _measure(race, cells["dflash-tp4-c1-out256"], [100.0, 101.0, 99.0, 100.5, 99.5])
    _measure(race, cells["dflash-tp8-c1-out256"], [90.0, 90.9, 89.1, 90.4, 89.6])
    assert race.skip_reason(cells["dflash-tp8-c16-out256"]) is None
    # a given drift allowance replaces the default: 2 % makes the same 10 % evidence
    race2 = Race(m, drift=0.02)
    _measure(race2, cells["dflash-tp4-c1-out256"], [100.0, 101.0, 99.0, 100.5, 99.5])
    _measure(race2, cells["dflash-tp8-c1-out256"], [90.0, 90.9, 89.1, 90.4, 89.6])
    assert race2.skip_reason(cells["dflash-tp8-c16-out256"]) is not None


def test_the_summary_says_a_tp_size_was_dominated() -> None:
    from pytest_specbench.plugin.race import summary_lines

    m = _matrix()
    cells = {c.id: c for c in m.cells()}
    race = Race(m)
    race.bracketed("some-member-group", 1.0, 1.02)
    _measure(race, cells["dflash-tp4-c1-out256"], [100.0, 101.0, 99.0, 100.5, 99.5])
    _measure(race, cells["dflash-tp8-c1-out256"], [70.0, 70.7, 69.3, 70.3, 69.7])
    race.skip_reason(cells["dflash-tp8-c16-out256"])
    lines = summary_lines({"specbench": {"race": race.doc()}})
    assert lines[0] == "racing: 1 cells out of the race or tuned out (none of them ranked or a baseline):"
    assert lines[1].startswith(
        "  dflash-tp8-c16-out256: out of the race: its TP size is dominated: at shape tp8-c1-out256"
    ) and lines[1].endswith("x0.350 per GPU (not run)")
