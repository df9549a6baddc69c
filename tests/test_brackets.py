"""Brackets (docs/metrics.md "Brackets"): a member whose baseline cannot run beside it sits
between two re-runs of its baseline's first shape, and its intervals against the baseline are
widened by the drift the two bound: the arithmetic (report/brackets.py), the family's items and
cost (deciding/families.py), a run on a drifting machine, and the race's drops simulated through
deciding/race.py."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from bench_project import count_starts, write_project
from test_race import CONFTEST

from pytest_specbench.deciding import families as fam
from pytest_specbench.deciding.race import Race
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import schedule
from pytest_specbench.report import brackets
from pytest_specbench.stats.sequential import Looks

# ------------------------------------------------------------------------------ the arithmetic


def test_a_member_interval_is_widened_by_the_levels_its_two_brackets_bound() -> None:
    # the first member: its first bracket is the baseline's own cell (1.0), the second read 0.96
    assert brackets.drift_range(None, 0.96) == (0.96, 1.0)
    assert brackets.drift_range(0.97, 0.95) == (0.95, 0.97)
    assert brackets.drift_range(0.95, 1.01) == (0.95, 1.01)
    # measured [1.00, 1.04] at a level between 0.95 and 0.97: the true ratio in [1/0.97, 1.04/0.95]
    lo, hi = brackets.widen(1.00, 1.04, (0.95, 0.97))
    assert (lo, hi) == pytest.approx((1 / 0.97, 1.04 / 0.95))
    # against a leader that ran at 0.98..0.99 itself
    lo, hi = brackets.widen(0.90, 0.94, (0.95, 0.97), (0.98, 0.99))
    assert (lo, hi) == pytest.approx((0.90 * 0.98 / 0.97, 0.94 * 0.99 / 0.95))


def _doc(after: float, before: float | None) -> dict:
    """Two bracketed members of ar-tp1 at one shape: m1 (first; brackets: AR's cell, then
    ``before``), m2 (brackets ``before`` and ``after``); their drift records as report/drift.py
    writes them."""
    b1 = "ar-tp1-c1-out8-after-m1-tp1-sentinel"
    b2 = "ar-tp1-c1-out8-after-m2-tp1-sentinel"
    sentinels = [
        {"cell_id": b1, "baseline_cell": "ar-tp1-c1-out8", "bracket_after": "m1-tp1", "bracket_before": None},
        {"cell_id": b2, "baseline_cell": "ar-tp1-c1-out8", "bracket_after": "m2-tp1", "bracket_before": b1},
    ]
    drift = [
        {"sentinel_cell": b1, "ratio": before, "drift": None if before is None else before - 1},
        {"sentinel_cell": b2, "ratio": after, "drift": after - 1},
    ]
    return {"sentinels": sentinels, "drift": drift}


def test_a_bracketed_member_verdict_reads_the_widened_interval() -> None:
    results = [{"group": "m1-tp1"}, {"group": "m2-tp1"}, {"group": "other-tp1"}]
    comps = {
        # m1 ran between AR's cell (1.0) and a bracket at 0.96: measured x0.962 [0.950, 0.975]
        0: {"speedup_vs_ar": 0.962, "speedup_vs_ar_ci95": [0.950, 0.975], "speedup_pairs": 6,
            "speedup_verdict": "slower", "speedup_pairing": "digest"},
        # m2 between 0.96 and 0.94: measured x1.045 [1.030, 1.060]: 10 % faster, ran 5 % slow
        1: {"speedup_vs_ar": 1.045, "speedup_vs_ar_ci95": [1.030, 1.060], "speedup_pairs": 6,
            "speedup_verdict": "faster", "speedup_pairing": "digest"},
        2: {"speedup_vs_ar": 0.9, "speedup_vs_ar_ci95": [0.85, 0.95], "speedup_pairs": 6,
            "speedup_verdict": "slower", "speedup_pairing": "digest"},
    }  # fmt: skip
    brackets.apply(results, comps, _doc(after=0.94, before=0.96))
    m1, m2, other = comps[0], comps[1], comps[2]
    # m1: [0.950 / 1.0, 0.975 / 0.96] = [0.950, 1.0156]: an equal method is not told apart
    assert m1["speedup_brackets"]["ci95"] == pytest.approx([0.950, 0.975 / 0.96])
    assert m1["speedup_verdict"] == "not separated"
    assert m1["speedup_verdict_before_brackets"] == "slower"
    assert m1["speedup_brackets"]["drift"] == [1.0, 0.96]
    assert m1["speedup_brackets"]["before"] == "ar-tp1-c1-out8"
    # m2: [1.030 / 0.96, 1.060 / 0.94] = [1.0729, 1.1277]: still faster
    assert m2["speedup_brackets"]["ci95"] == pytest.approx([1.030 / 0.96, 1.060 / 0.94])
    assert m2["speedup_verdict"] == "faster" and "speedup_verdict_before_brackets" not in m2
    assert "speedup_brackets" not in other and other["speedup_verdict"] == "slower"


def test_a_member_whose_bracket_measured_nothing_has_no_verdict() -> None:
    results = [{"group": "m2-tp1"}]
    comps = {0: {"speedup_vs_ar": 1.2, "speedup_vs_ar_ci95": [1.1, 1.3], "speedup_verdict": "faster"}}
    doc = _doc(after=0.94, before=0.96)
    doc["drift"][0]["ratio"] = None  # the bracket before m2 measured nothing
    brackets.apply(results, comps, doc)
    assert comps[0]["speedup_verdict"] == (
        "no verdict: its bracket ar-tp1-c1-out8-after-m1-tp1-sentinel measured nothing"
    )
    # a verdict already withheld (disturbed) stays as it is
    comps = {0: {"speedup_vs_ar": 1.2, "speedup_vs_ar_ci95": [1.1, 1.3], "speedup_verdict": "no verdict: x"}}
    brackets.apply(results, comps, _doc(after=0.94, before=0.96))
    assert comps[0]["speedup_verdict"] == "no verdict: x"


# ------------------------------------------------------------------------------ the family

DOC = {
    "models": {"m": "/nonexistent/model"},
    "methods": {n: {"backend": "sglang", "model": "m"} for n in ("ar", "e1", "e2", "e3")},
    "workloads": {"throughput": {"concurrency": [1, 4], "rounds": 6}},
}


def test_a_bracketed_family_reruns_its_baseline_after_each_member_and_the_plan_counts_each() -> None:
    m = parse(DOC, "m.yaml")
    cells = m.cells()
    plain = fam.families(cells, m.baselines(), {"sglang"}, set())
    assert [(f.brackets, f.runs()) for f in plain] == [(False, [("ar-tp1-c1-out64-sentinel", "e3-tp1")])]
    (f,) = fam.families(cells, m.baselines(), {"sglang"}, set(), brackets=True)
    assert f.runs() == [
        ("ar-tp1-c1-out64-after-e1-tp1-sentinel", "e1-tp1"),
        ("ar-tp1-c1-out64-after-e2-tp1-sentinel", "e2-tp1"),
        ("ar-tp1-c1-out64-after-e3-tp1-sentinel", "e3-tp1"),
    ]
    assert f.before("e1-tp1") is None  # AR's own cell
    assert f.before("e3-tp1") == "ar-tp1-c1-out64-after-e2-tp1-sentinel"
    # a resident backend's member that does not fit beside its baseline: bracketed, alone
    res = fam.families(cells, m.baselines(), set(), {"sglang"}, bracketed={"e2-tp1"})
    assert [(r.members, r.brackets) for r in res] == [(("e2-tp1",), True)]

    class FakePlan:
        cells: dict = {}

    class Start:
        start_s = 30.0

    jobs = [schedule.Job(g, 1, 100.0, 1, "sglang") for g in ("ar-tp1", "e1-tp1", "e2-tp1", "e3-tp1")]
    fj = fam.merge_jobs([f], jobs, FakePlan(), lambda plan, group, sel: Start())
    # AR, then each member followed by its bracket: 4 x 100 s + 3 x 30 s restarts (no rounds planned)
    assert [label for label, _ in fj.parts[f.scope]] == [
        "ar-tp1", "e1-tp1", "ar-tp1 (bracket after e1-tp1)", "e2-tp1", "ar-tp1 (bracket after e2-tp1)",
        "e3-tp1", "ar-tp1 (bracket after e3-tp1)",
    ]  # fmt: skip
    assert fj.jobs[0].duration_s == 490.0 and fj.total_s() == 90.0
    assert fj.lines()[1] == (
        "  brackets of ar-tp1: 3 x (engine start 30 s + warm-up and rounds 0 s) = 90 s, one after each "
        "of e1-tp1, e2-tp1, e3-tp1 (ar-tp1-c1-out64, on the same GPUs)"
    )


def test_a_member_that_cannot_run_has_no_bracket_and_the_plan_lines_add_up() -> None:
    """A member group with no cell to run (every cell skipped: its engine cannot start) is no
    member: the plan counts and names only the brackets the schedule has, and its total is
    theirs."""
    m = parse(DOC, "m.yaml")
    (f,) = fam.families(m.cells(), m.baselines(), {"sglang"}, set(), brackets=True)

    class FakePlan:
        cells: dict = {}

    class Start:
        start_s = 30.0

    # e2-tp1 cannot run: no job
    jobs = [schedule.Job(g, 1, 100.0, 1, "sglang") for g in ("ar-tp1", "e1-tp1", "e3-tp1")]
    fj = fam.merge_jobs([f], jobs, FakePlan(), lambda plan, group, sel: Start())
    brackets = [label for label, _ in fj.parts[f.scope] if "(bracket after" in label]
    assert brackets == ["ar-tp1 (bracket after e1-tp1)", "ar-tp1 (bracket after e3-tp1)"]
    assert fj.fams[0].members == ("e1-tp1", "e3-tp1")
    assert fj.fams[0].runs() == [
        ("ar-tp1-c1-out64-after-e1-tp1-sentinel", "e1-tp1"),
        ("ar-tp1-c1-out64-after-e3-tp1-sentinel", "e3-tp1"),
    ]
    assert fj.total_s() == 60.0 and fj.restarts() == {"brackets": 2, "sentinels": 0}
    lines = fj.lines()
    assert lines[1] == (
        "  brackets of ar-tp1: 2 x (engine start 30 s + warm-up and rounds 0 s) = 60 s, one after each "
        "of e1-tp1, e3-tp1 (ar-tp1-c1-out64, on the same GPUs)"
    )
    assert lines[2] == "  sentinels in all: 1.0 min (in the schedule above)"


# ------------------------------------------------------------------------------ a drifting machine


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, matrix: str, speeds: str, *args: str
) -> tuple[dict, Path]:
    """The matrix run with every round's tok/s read from the fake's reported latencies (its
    speed and the machine's level), as a steady window: the loaded test machine's clock aside."""
    write_project(pytester, matrix, None)
    from pytest_specbench.workloads import rounds

    def rate(recs: list, dt: float, c: int, closed: bool) -> tuple[float, dict]:
        wall = max(r.latency_s for r in recs)
        tokens = sum(r.output_tokens for r in recs)
        return tokens / wall, {"tokens_per_s": tokens / wall, "start_s": 0.0, "end_s": wall, "tokens": tokens}

    monkeypatch.setattr(rounds, "_round_rate", rate)
    from pytest_specbench.plugin import runner

    monkeypatch.setattr(runner, "_meters", lambda st, cell: None)  # no disturbance check
    starts = count_starts(monkeypatch, pytester.path / "starts.txt")
    monkeypatch.setenv("FAKE_RACE_SPEED", speeds)
    pytester.runpytest("benches", "-p", "no:cacheprovider", "--benchmark-json=out.json", *args)
    return json.loads((pytester.path / "out.json").read_text()), starts


DRIFTING = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-slowing, model: m}
  e1: {backend: fake-slowing, model: m}
  fast: {backend: fake-slowing, model: m}
workloads:
  throughput:
    concurrency: [1]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 1
    rounds: 6
    warmup: 0
"""


@pytest.mark.parametrize("race", [False, True], ids=["full", "raced"])
def test_with_brackets_an_equal_method_is_not_told_apart_and_a_faster_one_keeps_its_verdict(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, race: bool
) -> None:
    """An engine registered like sglang (not interleaved) on a machine that slows 3 % with every
    engine start: e1 is as fast as AR and reads 3 % slower measured apart; fast is 10 % faster and
    runs last. With brackets e1 is not told apart and fast stays faster."""
    pytester.makeconftest(
        CONFTEST.replace("FakeRacingEngine", "FakeSlowingEngine")
        + 'register_backend("fake-slowing", FakeSlowingEngine, gpu=False, sentinel=True)\n'
    )
    monkeypatch.setenv("FAKE_DRIFT_PER_START", "0.03")
    monkeypatch.setenv("FAKE_NOISE_CV", "0.002")
    args = ("--specbench-brackets", *(("--specbench-race",) if race else ()))
    doc, starts = _run(pytester, monkeypatch, DRIFTING, "fast=1.1", *args)
    if race:  # nothing out of the race: a member's own brackets are measured after its cells
        assert doc["specbench"]["race"]["dropped_cells"] == []
    # AR, e1, AR (bracket), fast, AR (bracket)
    assert [ln.split()[0] for ln in starts.read_text().splitlines()] == [
        "ar-tp1", "e1-tp1", "ar-tp1", "fast-tp1", "ar-tp1"
    ]  # fmt: skip
    cells = {b["param"]: b["extra_info"] for b in doc["benchmarks"]}
    e1, fast = cells["e1-tp1-c1-out8"], cells["fast-tp1-c1-out8"]
    if not race:  # 3 % slower measured apart (6 rounds; raced, the rule may stop it at 3)
        assert e1["speedup_verdict_before_brackets"] == "slower"
    assert e1["speedup_verdict"] == "not separated"
    lo, hi = e1["speedup_vs_ar_ci95"]
    b, a = e1["speedup_brackets"]["drift"]
    assert (b, a) == (1.0, pytest.approx(0.97**2, rel=0.01))
    assert e1["speedup_brackets"]["ci95"] == [pytest.approx(lo), pytest.approx(hi / a)]
    assert fast["speedup_verdict"] == "faster"
    if not race:  # measured apart, at the slowest level of the run: a tie
        assert fast["speedup_verdict_before_brackets"] == "within ±2%"
    lo, hi = fast["speedup_brackets"]["ci95"]
    assert lo > 1.02 and lo < 1.1 < hi
    assert [s["bracket_after"] for s in doc["specbench"]["sentinels"]] == ["e1-tp1", "fast-tp1"]


# ------------------------------------------------------------------------------ the race, simulated

SIM = {
    "models": {"m": "/nonexistent/model"},
    "methods": {n: {"backend": "sglang", "model": "m"} for n in ("ar", "e1", "e2", "win", "slow")},
    "workloads": {"throughput": {"concurrency": [1], "rounds": 6, "output_tokens": [64]}},
}


def _simulate(
    runs: int, per_start: float, step: float, widen_by_brackets: bool
) -> tuple[float, float, float]:
    """Runs of one shape on a machine that slows ``per_start`` with every engine start and
    ``step`` once (at the fourth start): AR, then e1, e2 (as fast as AR), win (5 % faster) and
    slow (20 % slower),
    each followed by its bracket (one round of AR); 6 rounds a cell at 2 % noise, looks 3..6 at
    5 % / 3. Each member races against the shape's leader on its rounds measured apart, with its
    brackets' range (``widen_by_brackets``), else on the raw interval (a drift allowance of 0).
    Returns the shares of runs where e1 or e2 was dropped, where win was, where slow was."""
    from pytest_specbench.stats.sequential import lost

    m = parse(SIM, "m.yaml")
    cells = {c.method.name: c for c in m.cells()}
    rng = random.Random(45)
    false_drop = win_drop = slow_drop = 0
    for _ in range(runs):
        race = Race(m, drift=None if widen_by_brackets else 0.0)
        starts = 0

        def rounds(speed: float, n: int, starts: int) -> list[float]:
            level = (1 - per_start) ** starts * ((1 - step) if starts >= 3 else 1.0)
            return [100 * speed * level * math.exp(rng.gauss(0, 0.02)) for _ in range(n)]

        ar = rounds(1.0, 6, starts)
        race._apply({"kind": "entry", "cell_id": cells["ar"].id, "speeds": ar, "relative": False,
                     "looks": [3, 6, 1], "can_lead": True})  # fmt: skip
        ref = statistics.geometric_mean(ar)
        before = None
        dropped: set[str] = set()
        for name, speed in (("e1", 1.0), ("e2", 1.0), ("win", 1.05), ("slow", 0.8)):
            starts += 1
            cell, own = cells[name], rounds(speed, 6, starts)
            starts += 1
            after = rounds(1.0, 1, starts)[0] / ref  # its bracket: one round of AR's first shape
            if widen_by_brackets:
                race.brackets[cell.group.id] = brackets.drift_range(before, after)
            before = after
            for n in range(3, 7):
                got = race.vs_leader(cell, list(own[:n]), False, Looks(3, 6, race.family(cell)))
                if got is not None and lost(got[0]):
                    dropped.add(name)
                    break
            if name not in dropped:
                race._apply({"kind": "entry", "cell_id": cell.id, "speeds": own, "relative": False,
                             "looks": [3, 6, 3], "can_lead": True})  # fmt: skip
        false_drop += bool(dropped & {"e1", "e2"})
        win_drop += "win" in dropped
        slow_drop += "slow" in dropped
    return false_drop / runs, win_drop / runs, slow_drop / runs


def test_widened_by_its_brackets_a_member_race_drops_no_equal_method_on_a_drifting_machine() -> None:
    # -2 % per engine start: brackets keep false drops at most 5 %, the 5 % winner in, and
    # still drop a method 20 % slower
    for step in (0.0, 0.12):  # and a -12 % step once
        false, win, slow = _simulate(300, 0.02, step, widen_by_brackets=True)
        assert false <= 0.05 and win <= 0.05 and slow >= 0.95, (step, false, win, slow)
    # the raw interval (no widening) drops equal methods and the winner
    false, win, slow = _simulate(300, 0.02, 0.0, widen_by_brackets=False)
    assert false >= 0.3 and win >= 0.2, (false, win)
