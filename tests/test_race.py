"""--specbench-race through the plugin, on fake engines whose speeds are set per method: early
stopping, a loser dropped from its shape and its costlier shape (never measured, never a
baseline, never ranked, never on a Pareto frontier), and a swept knob tuned on its deciding cells
first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import count_starts, fake_conftest, write_project

HERE = Path(__file__).parent
CONFTEST = fake_conftest(
    "FakeRacingEngine", 'register_backend("fake-racing", FakeRacingEngine, gpu=False, interleave=True)'
)
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-racing, model: m}
  quick: {backend: fake-racing, model: m}
  laggard: {backend: fake-racing, model: m}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 4
    warmup: 0
"""
TUNED = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-racing, model: m}
  knob:
    backend: fake-racing
    model: m
    speculative: {algorithm: ngram, num_draft_tokens: [1, 2, 4]}
    tune: {at: {concurrency: 1}, keep: 1}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 4
    warmup: 0
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, matrix: str, speeds: str, *args: str
) -> tuple[dict, str, Path]:
    # a test that wrote its own conftest.py keeps it
    write_project(pytester, matrix, None if (pytester.path / "conftest.py").exists() else CONFTEST)
    from pytest_specbench.plugin import runner
    from pytest_specbench.workloads import rounds

    # a round's rate from the fake's reported latencies (its speed), not the loaded machine's clock
    monkeypatch.setattr(
        rounds,
        "_round_rate",
        lambda recs, dt, c, closed: (
            sum(r.output_tokens for r in recs) / max(r.latency_s for r in recs),
            None,
        ),
    )
    monkeypatch.setattr(runner, "_meters", lambda st, cell: None)  # no disturbance check: no verdict withheld
    starts = count_starts(monkeypatch, pytester.path / "starts.txt")
    monkeypatch.setenv("FAKE_TOKEN_S", "0.002")
    monkeypatch.setenv("FAKE_RACE_SPEED", speeds)
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--benchmark-json=out.json", *args)
    out_json = pytester.path / "out.json"
    doc = json.loads(out_json.read_text()) if out_json.exists() else {}
    return doc, res.stdout.str(), starts


def test_a_loser_is_dropped_from_its_shape_and_its_costlier_one_and_never_counts_as_measured(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_specbench.report import decide, pareto

    doc, out, _ = _run(pytester, monkeypatch, MATRIX, "quick=2,laggard=0.5", "--specbench-race")
    measured = sorted(b["param"] for b in doc["benchmarks"])
    assert measured == ["ar-tp1-c1-out8", "ar-tp1-c2-out8", "quick-tp1-c1-out8", "quick-tp1-c2-out8"]
    race = doc["specbench"]["race"]
    dropped = {d["cell_id"]: d for d in race["dropped_cells"]}
    assert sorted(dropped) == ["laggard-tp1-c1-out8", "laggard-tp1-c2-out8"]
    lost = dropped["laggard-tp1-c1-out8"]["extra_info"]
    # x0.25 of the leader (quick at 2, laggard at 0.5), out at the first look
    assert lost["rounds_run"] == 2 and lost["stop_reason"] == "dropped", lost
    info = lost["race"]
    assert info["status"] == "dropped" and info["lost_to"] == "quick-tp1-c1-out8"
    assert info["shape"] == "tp1-c1-out8" and info["hi"] < 0.98 and 0.15 < info["ratio"] < 0.4, info
    # its costlier shape (c2): one method (quick) measured at both shapes is no evidence that the
    # loss carries over, so laggard ran there and lost again after its own first look
    again = dropped["laggard-tp1-c2-out8"]["extra_info"]
    assert again["rounds_run"] == 2 and not again["race"].get("skipped"), again
    assert "laggard-tp1-c1-out8: out of the race: lost to quick-tp1-c1-out8 by x0." in out
    assert "laggard-tp1-c2-out8: out of the race: lost to quick-tp1-c2-out8 by x0." in out
    # the clear winner settled at the first look
    quick = next(b for b in doc["benchmarks"] if b["param"] == "quick-tp1-c1-out8")["extra_info"]
    assert quick["rounds_run"] == 2 and quick["stop_reason"] == "settled", quick
    assert quick["sequential"]["looks"] == [2, 4]
    # never ranked, never a baseline, never on a Pareto frontier
    for label, rows in decide.ranked_shapes(doc):
        assert not any("laggard" in str(r) for r in rows), (label, rows)
    assert all(b["extra_info"].get("speedup_baseline") != "laggard" for b in doc["benchmarks"])
    assert "laggard" not in repr(pareto.points(doc))


def test_without_race_every_cell_runs_its_rounds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, _, _ = _run(pytester, monkeypatch, MATRIX, "quick=2,laggard=0.5")
    assert len(doc["benchmarks"]) == 6 and "race" not in doc["specbench"]
    for b in doc["benchmarks"]:
        assert b["extra_info"]["rounds_run"] == 4 and b["extra_info"]["stop_reason"] == "fixed", b["param"]
        assert "sequential" not in b["extra_info"]


def test_a_tuned_sweep_is_decided_on_its_deciding_cells_first_and_only_the_best_runs_elsewhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, out, starts = _run(
        pytester, monkeypatch, TUNED, "knob-d1=1.5,knob-d2=2,knob-d4=4", "--specbench-race", "-v"
    )
    seen = [ln.split("[", 1)[1].split("]")[0] for ln in out.splitlines() if "::test_throughput[" in ln]
    order = list(dict.fromkeys(seen))
    # the deciding cells (c1) and the baseline's at their shape first
    assert order[:4] == [
        "ar-tp1-c1-out8",
        "knob-d1-tp1-c1-out8",
        "knob-d2-tp1-c1-out8",
        "knob-d4-tp1-c1-out8",
    ]
    measured = sorted(b["param"] for b in doc["benchmarks"])
    assert "knob-d4-tp1-c2-out8" in measured
    assert "knob-d1-tp1-c2-out8" not in measured and "knob-d2-tp1-c2-out8" not in measured
    race = doc["specbench"]["race"]
    assert race["tuning"]["knob"]["kept"] == ["knob-d4"]
    assert race["tuning"]["knob"]["at"] == "concurrency=1"
    reasons = {t["cell_id"]: t["reason"] for t in race["tuned_out"]}
    assert reasons == {
        "knob-d1-tp1-c2-out8": "tuned out at concurrency=1: best was knob-d4",
        "knob-d2-tp1-c2-out8": "tuned out at concurrency=1: best was knob-d4",
    }
    # the two-phase order: knob-d4's group starts again for c2 (and ar's, whose c1 cell ran first),
    # the tuned-out ones do not
    started = [e["group"] for e in doc["specbench"]["engine_groups"] if e.get("ok")]
    assert sorted(started) == ["ar-tp1", "ar-tp1", "knob-d1-tp1", "knob-d2-tp1", "knob-d4-tp1", "knob-d4-tp1"]


def test_the_plan_counts_the_extra_engine_starts_of_the_two_phase_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, out, _ = _run(pytester, monkeypatch, TUNED, "", "--specbench-race", "--specbench-plan")
    assert (
        "tune knob: 3 settings decided on 3 cells (concurrency=1) that run first; the best 1 run the "
        "sweep's other 3 cells' shapes: at most 1 of them, at least 2 skipped; two-phase order: 2 extra "
        "engine starts (ar-tp1, and 1 for the kept settings among the 3 tuned groups with cells in both "
        "phases)"
    ) in out


def test_tune_refuses_what_it_cannot_decide() -> None:
    from pytest_specbench.matrix.checks import MatrixError
    from pytest_specbench.matrix.schema import parse

    base = {"models": {"m": "embedded:tiny"}, "workloads": {"throughput": {}}}
    one = {"backend": "hf", "model": "m", "tune": {"at": {"tp": 1}, "keep": 1}}
    with pytest.raises(MatrixError, match=r"m.yaml: methods.x.tune: tunes a sweep"):
        parse({**base, "methods": {"ar": {"backend": "hf", "model": "m"}, "x": one}}, "m.yaml")
    sweep = {
        "backend": "hf",
        "model": "m",
        "speculative": {"algorithm": "ngram", "num_draft_tokens": [2, 4]},
        "tune": {"at": {"gpu": 1}, "keep": 1},
    }
    with pytest.raises(MatrixError, match=r"methods.x.tune.at.gpu: not an axis; axes: method, tp"):
        parse({**base, "methods": {"x": sweep}}, "m.yaml")
    forced = {
        "backend": "hf",
        "model": "m",
        "speculative": {"algorithm": "draft", "draft_model": "m", "simulate_accept_length": [1, 2]},
        "tune": {"at": {"tp": 1}, "keep": 1},
    }
    with pytest.raises(MatrixError, match=r"methods.x.tune: a forced accept length is a cost curve"):
        parse({**base, "methods": {"x": forced}}, "m.yaml")
    m = parse(
        {**base, "methods": {"x": {**sweep, "tune": {"at": {"concurrency": [1, 4]}, "keep": 2}}}}, "m.yaml"
    )
    assert m.methods[0].tune.keep == 2 and m.methods[0].tune.label == "concurrency=1/4"


@pytest.mark.slow
def test_a_tuned_race_under_xdist_waits_for_every_deciding_cell_and_decides_as_one_process(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deciding cells (c1) go out first; a worker that reaches a carried cell (c2) waits until
    every deciding cell is done on any worker, then takes the one-process decision. The best
    setting's deciding cell is slow (its engine sleeps), so a worker that did not wait would
    decide without it."""
    pytester.makeconftest(CONFTEST + WORKER_PATCHES)
    monkeypatch.setenv("FAKE_SLOW_S", "0.2")
    matrix = TUNED.replace("knob:", "slowknob:")
    speeds = "slowknob-d1=1.5,slowknob-d2=2,slowknob-d4=4"
    two, out, _ = _run(pytester, monkeypatch, matrix, speeds, "--specbench-race", "-n", "2")
    race = two["specbench"]["race"]
    assert race["tuning"]["slowknob"]["kept"] == ["slowknob-d4"], out
    assert "decided_without" not in race["tuning"]["slowknob"]
    measured = sorted(b["param"] for b in two["benchmarks"])
    assert "slowknob-d4-tp1-c2-out8" in measured and "slowknob-d1-tp1-c2-out8" not in measured
    assert sorted(t["cell_id"] for t in race["tuned_out"]) == [
        "slowknob-d1-tp1-c2-out8",
        "slowknob-d2-tp1-c2-out8",
    ]


WORKER_PATCHES = """
# xdist workers: a round's rate from the fake's latencies, no disturbance check (as _run patches)
from pytest_specbench.plugin import runner
from pytest_specbench.workloads import rounds
rounds._round_rate = lambda recs, dt, c, closed: (
    sum(r.output_tokens for r in recs) / max(r.latency_s for r in recs), None)
runner._meters = lambda st, cell: None
"""


def test_a_race_under_xdist_takes_the_one_process_decisions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers share one decision state: the same cells measured, the loser out of the race
    at both shapes (dropped at c1; at c2 skipped on evidence or dropped after its own looks,
    whichever the workers' timing allows), recorded once in the controller's JSON."""
    pytester.makeconftest(CONFTEST + WORKER_PATCHES)
    one, _, _ = _run(pytester, monkeypatch, MATRIX, "quick=2,laggard=0.5", "--specbench-race")
    (pytester.path / "out.json").unlink()
    two, out, _ = _run(pytester, monkeypatch, MATRIX, "quick=2,laggard=0.5", "--specbench-race", "-n", "2")
    assert sorted(b["param"] for b in two["benchmarks"]) == sorted(b["param"] for b in one["benchmarks"])
    dropped = sorted(d["cell_id"] for d in two["specbench"]["race"]["dropped_cells"])
    assert dropped == ["laggard-tp1-c1-out8", "laggard-tp1-c2-out8"], out
    for d in two["specbench"]["race"]["dropped_cells"]:
        assert d["extra_info"]["race"]["lost_to"].startswith(("quick-tp1-", "ar-tp1-")), d


FORCED = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-racing, model: m}
  quick: {backend: fake-racing, model: m}
  fx:
    backend: fake-racing
    model: m
    speculative: {algorithm: ngram, simulate_accept_length: [1, 4]}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 4
    warmup: 0
"""


def test_forced_lengths_race_in_their_own_pool_and_never_lead_a_drafter(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced sweep is a ground truth whose order is known: its slow length loses to its own
    pool (AR or the fast length) and skips its costlier shape; its fast length, 8 times a drafter's
    speed, never drops the drafter (a cost curve does not lead a drafter)."""
    pytester.makeconftest(CONFTEST.replace("interleave=True)", 'interleave=True, forced_accept="engine")'))
    doc, out, _ = _run(pytester, monkeypatch, FORCED, "quick=1.2,fx-a1=0.25,fx-a4=10", "--specbench-race")
    dropped = {d["cell_id"]: d for d in doc["specbench"]["race"]["dropped_cells"]}
    assert sorted(dropped) == ["fx-a1-tp1-c1-out8", "fx-a1-tp1-c2-out8"], sorted(dropped)
    lost_to = dropped["fx-a1-tp1-c1-out8"]["extra_info"]["race"]["lost_to"]
    assert lost_to in ("ar-tp1-c1-out8", "fx-a4-tp1-c1-out8"), lost_to
    measured = sorted(b["param"] for b in doc["benchmarks"])
    assert "quick-tp1-c1-out8" in measured and "quick-tp1-c2-out8" in measured
    assert "fx-a4-tp1-c2-out8" in measured


def test_a_forced_length_is_led_by_its_baseline_own_cell_where_nothing_interleaves() -> None:
    """On sglang the baseline is its own cell (not interleaved): a forced length's leader at its
    shape is that cell when nothing of its own sweep ran yet, and a drafter's never a forced cell."""
    from pytest_specbench.deciding.race import Entry, Race
    from pytest_specbench.matrix.schema import parse

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "m"},
            "quick": {"backend": "hf", "model": "m", "speculative": {"algorithm": "ngram"}},
            "fx": {
                "backend": "hf",
                "model": "m",
                "speculative": {"algorithm": "ngram", "simulate_accept_length": [1, 4]},
            },
        },
        "workloads": {"throughput": {"concurrency": [1], "rounds": 4}},
    }
    m = parse(doc, "m.yaml")
    race = Race(m)
    cells = {c.method.name: c for c in m.cells()}
    shape = next(iter(race.shapes), None) or __import__(
        "pytest_specbench.stats.paired", fromlist=["axes"]
    ).axes(cells["ar"].params())
    race.shapes[shape] = [
        Entry(cells["ar"].id, "ar", [100.0] * 4, False, None, True),
        Entry(cells["fx-a4"].id, "fx-a4", [400.0] * 4, False, None, True),
    ]
    lead = race.leader(cells["fx-a1"], relative=False)
    assert lead is not None and lead.method == "fx-a4"
    race.shapes[shape] = race.shapes[shape][:1]
    lead = race.leader(cells["fx-a1"], relative=False)
    assert lead is not None and lead.method == "ar"
    race.shapes[shape].append(Entry(cells["fx-a4"].id, "fx-a4", [400.0] * 4, False, None, True))
    lead = race.leader(cells["quick"], relative=False)
    assert lead is not None and lead.method == "ar"


DRIFTING = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-slowing, model: m}
  e1: {backend: fake-slowing, model: m}
  e2: {backend: fake-slowing, model: m}
  fast: {backend: fake-slowing, model: m}
workloads:
  throughput:
    concurrency: [1, 4]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 1
    rounds: 6
    warmup: 0
"""


def test_on_a_drifting_machine_without_a_baseline_beside_them_no_equal_method_is_dropped(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine registered like sglang (not interleaved, drift sentinels) on a machine that slows
    3 % with every engine start and 12 % once: e1 and e2 are as fast as AR, fast is 10 % faster
    and runs last, when the machine is slowest. Measured apart from AR, none is dropped; every
    cell is measured."""
    pytester.makeconftest(
        CONFTEST.replace("FakeRacingEngine", "FakeSlowingEngine")
        + 'register_backend("fake-slowing", FakeSlowingEngine, gpu=False, sentinel=True)\n'
    )
    monkeypatch.setenv("FAKE_DRIFT_PER_START", "0.03")
    monkeypatch.setenv("FAKE_DRIFT_STEP", "0.12")
    monkeypatch.setenv("FAKE_DRIFT_STEP_AT", "2")
    monkeypatch.setenv("FAKE_NOISE_CV", "0.02")
    doc, out, starts = _run(pytester, monkeypatch, DRIFTING, "fast=1.1", "--specbench-race")
    assert "out of the race:" not in out and "out of the race 0" in out
    assert doc["specbench"]["race"]["dropped_cells"] == []
    measured = sorted(b["param"] for b in doc["benchmarks"])
    assert measured == sorted(f"{m}-tp1-c{c}-out8" for m in ("ar", "e1", "e2", "fast") for c in (1, 4)), (
        measured
    )
    assert len(starts.read_text().splitlines()) >= 4  # AR, e1, e2, fast (and the drift sentinel)


BEHIND = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-slowing, model: m}
  lead: {backend: fake-slowing, model: m}
  m13: {backend: fake-slowing, model: m}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 3
    max_rounds: 10
    warmup: 0
"""


def test_a_method_13_percent_behind_its_leader_is_dropped_before_the_cap_at_every_shape(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake engines with AR interleaved beside each member and 3 % noise per request: lead is x1.30
    over AR, m13 13 % behind it (x1.131). Raced with max_rounds 10, m13 is out of the race at each
    shape (dropped there, or skipped as its costlier shape), never running to the cap."""
    pytester.makeconftest(
        CONFTEST.replace("FakeRacingEngine", "FakeSlowingEngine")
        + 'register_backend("fake-slowing", FakeSlowingEngine, gpu=False, interleave=True)\n'
    )
    monkeypatch.setenv("FAKE_NOISE_CV", "0.03")
    doc, out, _ = _run(pytester, monkeypatch, BEHIND, "lead=1.3,m13=1.131", "--specbench-race")
    dropped = {d["cell_id"]: d for d in doc["specbench"]["race"]["dropped_cells"]}
    for c in (1, 2):
        cid = f"m13-tp1-c{c}-out8"
        assert cid in dropped, (cid, out)
        assert dropped[cid]["extra_info"]["rounds_run"] < 10, dropped[cid]["extra_info"]
    assert not any(b["param"].startswith("m13-") for b in doc["benchmarks"])
    assert not any(d.startswith("lead-") for d in dropped)


def test_a_race_setting_without_the_race_is_said(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--specbench-race-delta without --specbench-race: the run warns that it does not race."""
    doc, out, _ = _run(pytester, monkeypatch, MATRIX, "quick=2", "--specbench-race-delta", "0.05")
    assert "applies only under --specbench-race" in out, out
