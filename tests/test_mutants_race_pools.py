"""The race's pools (deciding/race.py): drafters race drafters, a forced accept length races only
the other lengths of its own sweep, and the baseline's own cell is in every pool. Each test here
fails when one line of the pool rule changes (scripts/mutants.py: race-pool-forced,
race-pool-sweep, race-family-pool, race-leader-pool), and the drift allowed between groups measured
apart (race-drift-widen)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specbench.deciding import selection
from pytest_specbench.deciding.race import Race
from pytest_specbench.matrix.schema import parse
from pytest_specbench.stats import paired, sequential

SPEC = {"algorithm": "ngram"}


def _matrix() -> Any:
    """AR; two drafters (ng, ng2); two forced sweeps of two lengths each (fa-a2/a4, fb-a2/a4)."""
    hf = {"backend": "hf", "model": "m"}
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "ar": hf,
            "ng": {**hf, "speculative": SPEC},
            "ng2": {**hf, "speculative": {**SPEC, "num_draft_tokens": 8}},
            "fa": {**hf, "speculative": {**SPEC, "simulate_accept_length": [2, 4]}},
            "fb": {**hf, "speculative": {**SPEC, "num_draft_tokens": 8, "simulate_accept_length": [2, 4]}},
        },
        "workloads": {"throughput": {"concurrency": [1], "output_tokens": [8], "rounds": 6, "warmup": 0}},
    }
    return parse(doc, "m.yaml")


def _cells(m: Any) -> dict[str, Any]:
    return {c.method.name: c for c in m.cells()}


def _record(race: Race, cell: Any, speedup: float) -> None:
    """Three rounds of ``cell`` at ``speedup`` x its interleaved baseline's 100 tok/s."""
    own = [100.0 * speedup * f for f in (1.0, 1.01, 0.99)]
    ref = [100.0, 101.0, 99.0]
    result = {
        "cell_id": cell.id,
        "group": cell.group.id,
        "params": cell.params(),
        "metrics": {"round_tokens_per_s": own, "reference": {"round_tokens_per_s": ref}},
        "extra_info": {},
        "round_times": [1.0] * 3,
    }
    race.record(cell, result)


def test_a_drafter_and_a_forced_length_are_in_different_pools() -> None:
    m = _matrix()
    race, c = Race(m), _cells(m)
    shape = paired.axes(c["ng"].params())
    assert race.same_pool(c["ng"], shape, "ng2") is True
    assert race.same_pool(c["ng"], shape, "ar") is True  # its baseline's own cell
    assert race.same_pool(c["ng"], shape, "fa-a4") is False  # a drafter never races a forced length
    assert race.same_pool(c["fa-a2"], shape, "ng") is False
    assert race.same_pool(c["fa-a2"], shape, "fa-a4") is True  # the lengths of one sweep race
    assert race.same_pool(c["fa-a2"], shape, "fb-a4") is False  # another sweep's lengths do not


def test_a_shapes_family_counts_the_methods_of_the_cells_pool_only() -> None:
    """Each verdict and drop is at 5 % / the pool's size: two drafters, two lengths per sweep."""
    m = _matrix()
    race, c = Race(m), _cells(m)
    assert {n: race.family(c[n]) for n in ("ng", "ng2", "fa-a2", "fb-a4")} == {
        "ng": 2,
        "ng2": 2,
        "fa-a2": 2,
        "fb-a4": 2,
    }
    assert race.rule(c["ng"]).looks.family == 2


def test_a_drafters_leader_is_never_a_forced_length_however_fast() -> None:
    m = _matrix()
    race, c = Race(m), _cells(m)
    _record(race, c["fa-a4"], 3.0)  # a forced length: x3 over AR, but not the drafters' rival
    _record(race, c["fb-a4"], 2.5)
    _record(race, c["ng2"], 1.2)
    lead = race.leader(c["ng"], relative=True)
    assert lead is not None and (lead.method, lead.cell_id) == ("ng2", c["ng2"].id)
    # the forced lengths race among their own sweep: fa-a2's leader is fa-a4, not fb-a4
    lead = race.leader(c["fa-a2"], relative=True)
    assert lead is not None and lead.method == "fa-a4"


def test_against_a_leader_measured_apart_the_interval_is_widened_by_the_drift_allowed() -> None:
    """No baseline beside them: ng against ng2 from their own tok/s (deciding/selection.py's gap:
    every round of both, the shape's round variance pooled), the bounds widened by the drift
    allowed between their groups, x(1 - 0.05) below and / (1 - 0.05) above (race-drift-widen);
    without an allowed drift such a comparison never drops."""
    m = _matrix()
    c = _cells(m)
    own, lead_rates = [100.0, 101.0, 99.0, 100.0], [120.0, 121.0, 119.0, 120.0]
    looks = sequential.Looks(4, 4)
    for drift, widened in ((0.05, True), (None, False)):
        race = Race(m, drift=drift)
        lead = c["ng2"]
        race.record(
            lead,
            {
                "cell_id": lead.id,
                "group": lead.group.id,
                "params": lead.params(),
                "metrics": {"round_tokens_per_s": lead_rates},
                "extra_info": {},
                "round_times": [1.0] * 4,
            },
        )
        got = race.vs_leader(c["ng"], list(own), False, looks)
        if not widened:
            assert got is None
            continue
        assert got is not None
        iv, info = got
        raw = selection.gap(own, lead_rates, looks, race.delta, shape_var=selection.pooled([own, lead_rates]))
        assert raw is not None
        assert (iv.point, iv.lo, iv.hi) == pytest.approx((raw.point, raw.lo * 0.95, raw.hi / 0.95))
        assert info["drift_allowed"] == 0.05 and info["lost_to"] == lead.id
