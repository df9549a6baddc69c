"""Behaviour tests that kill scripts/mutants.py's store, Holm, run-wide gate, tune and control
mutants: each fails when its one line changes; expected values by hand."""

from __future__ import annotations

import fcntl
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_deciding import _tuned_matrix
from test_instance_control import _race_matrix, _record

from pytest_specbench.deciding import tune
from pytest_specbench.deciding.race import Race
from pytest_specbench.deciding.store import Store, StoreLockTimeout
from pytest_specbench.report import gate
from pytest_specbench.stats import paired
from pytest_specbench.stats.gate_stats import ALPHA, CellTest, holm
from pytest_specbench.stats.sequential import Looks, t_quantile

# ------------------------------------------------------------------ the decision store


def test_a_reader_reads_whole_lines_only_and_picks_up_the_rest_once_whole(tmp_path: Path) -> None:
    """A line still being written (no newline yet) is not consumed (store-partial-line): once
    its writer ends it, the reader reads it whole, once, from where it stopped."""
    s = Store.create(str(tmp_path))
    r = Store(s.dir)
    s.append({"i": 1})
    with open(s.path, "ab") as f:
        f.write(b'{"i":')  # half of the next line
    assert r.read_new() == [{"i": 1}]
    with open(s.path, "ab") as f:
        f.write(b"2}\n")  # its writer ends it
    assert r.read_new() == [{"i": 2}]
    assert r.read_new() == []


def test_a_reader_never_reads_an_event_twice(tmp_path: Path) -> None:
    """Each read_new returns only what was appended since the last (store-reread-all)."""
    s = Store.create(str(tmp_path))
    r = Store(s.dir)
    s.append({"i": 1})
    assert r.read_new() == [{"i": 1}]
    s.append({"i": 2})
    s.append({"i": 3})
    assert r.read_new() == [{"i": 2}, {"i": 3}]
    assert r.read_new() == []


def test_an_append_waits_for_the_exclusive_lock(tmp_path: Path) -> None:
    """While another holder has the store's lock, an append writes nothing and times out
    (store-no-lock): flock locks belong to the open file, so a second open of it conflicts."""
    s = Store.create(str(tmp_path), lock_timeout=0.2)
    with open(s.lock_path, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # a reader mid-read
        with pytest.raises(StoreLockTimeout):
            s.append({"i": 1})
        fcntl.flock(held, fcntl.LOCK_UN)
    assert s.path.read_bytes() == b""
    s.append({"i": 1})
    assert Store(s.dir).read_new() == [{"i": 1}]


# ------------------------------------------------------------------ the gate


def test_holm_stops_at_its_first_non_rejection() -> None:
    """p ~ 0.0002, 0.018, 0.018 (floor 1, se 1, df 1000): bars 0.025/3, /2, /1. The first is
    rejected; the second (0.018 > 0.0125) is not, and Holm stops there: the third is not
    rejected either, though 0.018 <= 0.025 (holm-step-down-stop)."""
    tests = [CellTest(c, d, 1.0, 1000, 5, 5) for c, d in (("a", -3.5), ("b", -2.1), ("c", -2.1))]
    holm(tests, 1.0, None)
    a, b, c = tests
    assert a.p < ALPHA / 3 and ALPHA / 2 < b.p == c.p <= ALPHA
    assert [t.regressed for t in tests] == [True, False, False]


def test_the_run_wide_check_fails_on_its_interval_not_its_point() -> None:
    """Four cells' log new/old -0.4, 0.2, -0.4, 0.2: mean -0.1 (x0.905, below the floor 0.95),
    sd 0.3464, t(3) 3.182: interval x[0.523, 1.568], not wholly below 0.95: no run-wide
    regression (gate-run-wide-interval); -0.2 x 4 with tiny spread is one."""
    out = gate.Gate()
    gate._run_wide([-0.4, 0.2, -0.4, 0.2], 0.95, out)
    assert not out.run_wide_failed and not out.regressions
    assert "0.905 [0.52" in out.run_wide[0] and "not wholly below 0.950" in out.run_wide[0]
    out = gate.Gate()
    gate._run_wide([-0.2, -0.21, -0.2, -0.19], 0.95, out)
    assert out.run_wide_failed and "wholly below 0.950" in out.regressions[0]


# ------------------------------------------------------------------ tuning


def _entry(method: str, logs: list[float]) -> SimpleNamespace:
    return SimpleNamespace(method=method, relative=True, speeds=[math.exp(x) for x in logs])


def test_tunes_interval_uses_each_means_standard_error() -> None:
    """a's logs 0.1, 0.3 (mean 0.2, variance 0.02, n 2), b's -0.1, 0.1, 0 (mean 0, variance 0.01,
    n 3): se = sqrt(0.02/2 + 0.01/3) = 0.11547, df min(2, 3) - 1 = 1, one-sided 5 % (family 1):
    t(0.10, 1) = 6.3138, so log interval 0.2 +- 0.72906 (tune-standard-error)."""
    race = SimpleNamespace(shapes={"s": [_entry("a", [0.1, 0.3]), _entry("b", [-0.1, 0.1, 0.0])]}, drift=None)
    iv = tune.against(race, ["s"], "a", "b", 1)
    assert iv is not None
    assert math.log(iv[0]) == pytest.approx(0.2)
    assert math.log(iv[1]) == pytest.approx(0.2 - 0.72906, abs=1e-4)
    assert math.log(iv[2]) == pytest.approx(0.2 + 0.72906, abs=1e-4)


def test_the_pooled_interval_takes_the_fewest_degrees_of_freedom() -> None:
    """(0.2, 0.01, df 1) and (0, 0.01, df 3): mean 0.1, se sqrt(0.02) / 2 = 0.070711, t at the
    fewest df (1) at 10 %: 6.3138, half 0.44646; at df 3 it would be 2.3534 (pooled-df-fewest)."""
    ratio, lo, hi = paired.pooled_log_interval([(0.2, 0.01, 1), (0.0, 0.01, 3)], 0.10)
    assert t_quantile(0.10, 1) == pytest.approx(6.3138, abs=1e-3)
    assert math.log(ratio) == pytest.approx(0.1)
    assert math.log(lo) == pytest.approx(0.1 - 0.44646, abs=1e-4)
    assert math.log(hi) == pytest.approx(0.1 + 0.44646, abs=1e-4)


def test_when_two_processes_decide_a_sweep_the_first_decision_in_the_store_wins(tmp_path: Path) -> None:
    """Two processes decide the same sweep before seeing each other's: every process keeps the
    one appended first (tune-first-decision-wins)."""
    store = Store.create(str(tmp_path))
    m = _tuned_matrix(4)
    a, b = Race(m, store=Store(store.dir)), Race(m, store=Store(store.dir))
    first = {"at": "c1", "kept": ["knob-d3"], "ranking": [{"method": "knob-d3"}]}
    second = {"at": "c1", "kept": ["knob-d1"], "ranking": [{"method": "knob-d1"}]}
    store.append({"kind": "tuning", "sweep": "knob", "decision": first})
    b._emit({"kind": "tuning", "sweep": "knob", "decision": second})  # b had not seen a's yet
    a.sync()
    assert a.tuning["knob"] == b.tuning["knob"] == first
    c = Race(m, store=Store(store.dir))
    c.sync()
    assert c.tuning["knob"] == first


# ------------------------------------------------------------------ the A/A control


def test_a_controls_band_widens_a_drops_interval_on_both_sides() -> None:
    """The control's instance effect (x1.30 read) could go either way: the drop's interval is
    widened by its band below as above (race-control-side)."""
    m = _race_matrix()
    cells = {(c.method.name, c.concurrency): c for c in m.cells()}
    ng = cells[("ng", 1)]
    own = [0.80, 0.82, 0.79, 0.81, 0.80, 0.80]
    looks = Looks(3, 6, 1)
    from pytest_specbench.deciding import selection

    race = Race(m)
    _record(race, cells[("twin", 1)], 1.30)
    starts = race.starts()  # the control is also the run's one pair of starts
    lead = race.leader(ng, True)
    plain = selection.gap(
        own, [b for b in lead.speeds if b], looks, race.delta, starts.var(), selection.pooled([own]), starts.k
    )
    iv, info = race.vs_leader(ng, own, True, looks)
    band = info["control_band"]
    assert band > 1.25
    assert iv.lo == pytest.approx(plain.lo / band, rel=1e-5)
    assert iv.hi == pytest.approx(plain.hi * band, rel=1e-5)
