"""Drift sentinels where the baseline is not interleaved: a family's groups run back to back, the
baseline's first shape runs once more after them, the drift it measures is reported per family,
and a verdict smaller than the drift is withheld (docs/metrics.md "Drift sentinel")."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from bench_project import count_starts, fake_conftest, write_project

from pytest_specbench.deciding.families import families, group_order
from pytest_specbench.matrix.schema import parse
from pytest_specbench.plugin import disturbance  # imported before pytester's sys.modules snapshot
from pytest_specbench.report import drift

HERE = Path(__file__).parent
CONFTEST = fake_conftest(
    "FakeStepDriftEngine",
    'register_backend("fake-step", FakeStepDriftEngine, gpu=False, sentinel=True, max_tp=2)',
)
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-step, model: m}
  fast: {backend: fake-step, model: m}
workloads:
  throughput:
    concurrency: [2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 4
    rounds: 5
    warmup: 1
"""


# ------------------------------------------------------------------------------ families (pure)


def _matrix(tp: str = "[1, 2]") -> Any:
    doc = {
        "models": {"m": "/nonexistent/model"},
        "methods": {
            "ar": {"backend": "sglang", "model": "m"},
            "a": {"backend": "sglang", "model": "m"},
            "b": {"backend": "sglang", "model": "m"},
        },
        "tp": json.loads(tp),
        "workloads": {"throughput": {"concurrency": [1, 4]}},
    }
    return parse(doc, "m.yaml")


def test_a_family_is_a_baseline_and_the_groups_compared_with_it_at_one_tp() -> None:
    m = _matrix()
    fams = families(m.cells(), m.baselines(), {"sglang"}, set())
    assert [(f.baseline, f.members, f.sentinel_id) for f in fams] == [
        ("ar-tp1", ("a-tp1", "b-tp1"), "ar-tp1-c1-out64-sentinel"),
        ("ar-tp2", ("a-tp2", "b-tp2"), "ar-tp2-c1-out64-sentinel"),
    ]
    groups = list(dict.fromkeys(c.group.id for c in m.cells()))
    assert groups[:2] == ["ar-tp1", "ar-tp2"]  # the matrix's own order: by method
    assert group_order(groups, fams) == ["ar-tp1", "a-tp1", "b-tp1", "ar-tp2", "a-tp2", "b-tp2"]
    (cell,) = [c for c in [fams[0].sentinel_cell()]]
    # as many rounds as the baseline's cell, 3 to 5 (drift.sentinel_rounds): an interval for the drift
    assert cell.workload.rounds == min(max(fams[0].first.workload.rounds, 3), 5)
    assert cell.workload.rounds >= 3 and cell.id == "ar-tp1-c1-out64" and cell.workload.warmup == 1
    # interleaved baselines (hf) have no family; nor a backend without sentinels
    assert families(m.cells(), m.baselines(), {"sglang"}, {"sglang"}) == []
    assert families(m.cells(), m.baselines(), set(), set()) == []
    # a selection without a member of a TP has no family there
    only = [c for c in m.cells() if c.tp == 1 or c.method.name == "ar"]
    assert [f.baseline for f in families(only, m.baselines(), {"sglang"}, set())] == ["ar-tp1"]


# ------------------------------------------------------------------------------ drift (pure)


def _result(cell_id: str, group: str, rates: list[float], digests: list[str] | None = None) -> dict:
    return {
        "cell_id": cell_id,
        "group": group,
        "params": {"method": group.split("-")[0]},
        "round_times": [1.0] * len(rates),
        "metrics": {"round_tokens_per_s": rates, "request_digests": digests or []},
    }


def _sentinel(rate: float, at: float = 600.0) -> dict:
    return {
        "family": "ar-tp1",
        "groups": ["ar-tp1", "m-tp1"],
        "cell_id": "ar-tp1-c1-sentinel",
        "baseline_cell": "ar-tp1-c1",
        "round_tokens_per_s": [rate],
        "request_digests": ["d0"],
        "at": at,
        "baseline_at": 0.0,
    }


def test_drift_is_the_sentinel_round_over_the_baselines_rounds_with_a_prediction_interval() -> None:
    base = _result("ar-tp1-c1", "ar-tp1", [100.0, 100.0 * 1.02, 100.0 / 1.02], ["d0", "d1", "d2"])
    (rec,) = drift.measure([base], [_sentinel(90.0)])
    assert rec["drift"] == pytest.approx(-0.10)  # the rounds' geometric mean is 100
    assert rec["minutes"] == pytest.approx(10.0) and rec["same_requests"] is True
    # logs 0, ±log 1.02: sd = log 1.02; t(2) = 4.303; x sqrt(1 + 1/3)
    import math

    half = 4.303 * math.log(1.02) * math.sqrt(4 / 3)
    assert rec["drift_ci95"] == pytest.approx([0.9 * math.exp(-half) - 1, 0.9 * math.exp(half) - 1])
    line = drift.lines({"specbench": {"drift": [rec]}})[0]
    assert line.startswith("drift ar-tp1: -10.0% [") and (
        " over 10.0 min (ar-tp1-c1-sentinel: 90 tok/s over 1 round against 100 over the baseline's 3;" in line
    )
    from pytest_specbench.report.summary import markdown

    assert f"- {line}" in markdown({"benchmarks": [], "specbench": {"engine_starts": 3, "drift": [rec]}})


def _verdicts(sentinel_rate: float, comparison: dict[str, Any]) -> tuple[dict, dict]:
    base = _result("ar-tp1-c1", "ar-tp1", [100.0, 100.0 * 1.01, 100.0 / 1.01])
    cell = _result("m-tp1-c1", "m-tp1", [1.0])
    comps = {0: {"speedup_vs_ar": 1.0, "speedup_verdict": "baseline"}, 1: dict(comparison)}
    spec: dict[str, Any] = {"sentinels": [_sentinel(sentinel_rate)]}
    drift.apply([base, cell], comps, spec)
    return comps[1], spec["drift"][0]


def test_a_verdict_smaller_than_the_drift_is_withheld_and_a_larger_one_stands() -> None:
    """The baseline's rounds 100, 101, 99.01 (log sd = log 1.01), the sentinel's one round 90:
    drift -10 %, its interval 0.9 x exp(-/+ 4.303 x log 1.01 x sqrt(1 + 1/3)) - 1 = [-14.3 %, -5.4 %],
    established (it excludes 0); the band is its far end, |log 0.857| = x0.857..x1.167."""
    small = {"speedup_vs_ar": 1.08, "speedup_vs_ar_ci95": [1.05, 1.11], "speedup_verdict": "faster"}
    got, rec = _verdicts(90.0, small)
    assert rec["established"] is True and rec["drift_ci95"] == pytest.approx([-0.1434, -0.0543], abs=5e-4)
    assert got["speedup_verdict"].startswith("no verdict: x1.080 is smaller than the band x0.857..x1.167")
    assert (
        "of the drift its family ar-tp1 measured (-10.0% [-14.3%, -5.4%] over 10.0 min)"
        in got["speedup_verdict"]
    )
    assert got["speedup_verdict_before_drift"] == "faster" and rec["withheld"] == ["m-tp1-c1"]
    reaching = {"speedup_vs_ar": 1.20, "speedup_vs_ar_ci95": [1.10, 1.30], "speedup_verdict": "faster"}
    got, _ = _verdicts(90.0, reaching)  # the point is beyond the band, the interval is not
    assert got["speedup_verdict"].startswith("no verdict: x1.200 [1.100, 1.300] reaches into the band")
    slower = {"speedup_vs_ar": 0.8, "speedup_vs_ar_ci95": [0.75, 0.85], "speedup_verdict": "slower"}
    got, rec = _verdicts(90.0, slower)
    assert got["speedup_verdict"] == "slower" and rec["withheld"] == []
    assert got["speedup_drift"]["drift"] == pytest.approx(-0.10)
    tie = {"speedup_vs_ar": 1.0, "speedup_vs_ar_ci95": [0.99, 1.01], "speedup_verdict": "within ±2%"}
    got, _ = _verdicts(90.0, tie)
    assert got["speedup_verdict"].startswith("no verdict: a tie within ±2% says nothing")
    got, _ = _verdicts(99.5, tie)  # drift -0.5 %: inside the margin, the tie stands
    assert got["speedup_verdict"] == "within ±2%"
    got, _ = _verdicts(100.0, small)  # no drift: x1.08 [1.05, 1.11] stands
    assert got["speedup_verdict"] == "faster" and "speedup_verdict_before_drift" not in got
    # -3 %: its interval [-7.7 %, +1.9 %] reaches 0, the rounds' spread: nothing withheld
    got, rec = _verdicts(97.0, small)
    assert rec["established"] is False and rec["withheld"] == [] and got["speedup_verdict"] == "faster"
    assert "within the rounds' spread: no verdict withheld" in drift.lines({"specbench": {"drift": [rec]}})[0]
    from pytest_specbench.report.screen import drift_view

    assert drift_view({"specbench": {"drift": [rec]}}) == [
        "drift ar-tp1: -3.0% [-7.7%, +1.9%] over 10.0 min; within the rounds' spread; 0 verdicts withheld"
    ]


def test_the_drift_interval_pools_the_baselines_and_the_sentinels_rounds() -> None:
    """Baseline logs 0, ±log 1.02 and sentinel logs log 0.9 ± log 1.02 (3 rounds each): the
    difference of means log 0.9, the pooled sd log 1.02 x sqrt(4 / 4) = log 1.02, 4 degrees of
    freedom (t 2.776), the standard error x sqrt(1/3 + 1/3)."""
    import math

    base = _result("ar-tp1-c1", "ar-tp1", [100.0, 102.0, 100.0 / 1.02])
    sent = _sentinel(90.0) | {"round_tokens_per_s": [90.0, 90.0 * 1.02, 90.0 / 1.02]}
    (rec,) = drift.measure([base], [sent])
    half = 2.776 * math.log(1.02) * math.sqrt(2 / 3)
    assert rec["sentinel_rounds"] == 3 and rec["drift"] == pytest.approx(-0.10)
    assert rec["drift_ci95"] == pytest.approx([0.9 * math.exp(-half) - 1, 0.9 * math.exp(half) - 1], abs=1e-3)
    assert rec["band"] == pytest.approx(-math.log(0.9) + half, abs=1e-3)


# ------------------------------------------------------------------------------ the plugin


def _project(pytester: pytest.Pytester, matrix: str = MATRIX) -> None:
    write_project(pytester, matrix, CONFTEST)


def test_a_familys_groups_run_together_and_its_sentinel_after_them(pytester: pytest.Pytester) -> None:
    _project(pytester, MATRIX.replace("  fast:", "  slow:") + "tp: [1, 2]\n")
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--collect-only", "-q")
    ids = [ln.split("[", 1)[1].rstrip("]") for ln in res.stdout.lines if "::test_throughput[" in ln]
    assert ids == [
        "ar-tp1-c2-out8",
        "slow-tp1-c2-out8",
        "ar-tp1-c2-out8-sentinel",
        "ar-tp2-c2-out8",
        "slow-tp2-c2-out8",
        "ar-tp2-c2-out8-sentinel",
    ]
    res = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", "--collect-only", "-q", "-k", "tp1 and not slow"
    )
    assert "sentinel" not in res.stdout.str()  # no member selected: no family, no sentinel
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--specbench-plan", "-n", "2")
    out = res.stdout.str()
    assert "drift sentinels (2; a family's groups run back to back" in out
    assert "ar-tp1-c2-out8-sentinel: engine start" in out and "(family ar-tp1, slow-tp1)" in out
    # what keeping the families together costs: beside the makespan without families or drift
    assert "  keeping each family back to back on one GPU set: makespan " in out
    assert "with every group packed on its own and no drift measured (--specbench-no-sentinel)" in out
    # the sentinels are in the serial total too, and its line says so
    total = next(ln for ln in res.stdout.lines if ln.startswith("cells: "))
    assert "engine starts 240 s, drift sentinels 120 s, one process)" in total, total
    rows = [ln.split() for ln in res.stdout.lines if "GPUs -" in ln]
    # each family on one worker, back to back: its rows end where the next one starts
    by_group = {r[0] if r[1] != "(sentinel)" else r[0] + "*": (r[-3], r[-1]) for r in rows}
    for tp in ("tp1", "tp2"):
        a, s, sent = by_group[f"ar-{tp}"], by_group[f"slow-{tp}"], by_group[f"ar-{tp}*"]
        assert a[1] == s[0] and s[1] == sent[0], rows
    res = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", "--collect-only", "-q", "--specbench-no-sentinel"
    )
    assert "sentinel" not in res.stdout.str()


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, per_start: str, *args: str) -> dict:
    _project(pytester)
    # the suite's other processes may take the CPU: the disturbance meter is off here (its own
    # tests cover it), so the verdicts are the comparison's alone
    monkeypatch.setattr(disturbance.DisturbanceMeter, "start", lambda self: None)
    monkeypatch.setattr(disturbance.DisturbanceMeter, "stop", lambda self: {})
    monkeypatch.setenv("FAKE_STEP_RUN", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_DRIFT_PER_START", per_start)
    monkeypatch.setenv("FAKE_TOKEN_S", "0.005")
    starts = count_starts(monkeypatch, pytester.path / "starts.txt")
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--benchmark-json=out.json", *args)
    doc = json.loads((pytester.path / "out.json").read_text())
    return {
        "res": res,
        "doc": doc,
        "cells": {b["param"]: b["extra_info"] for b in doc["benchmarks"]},
        "starts": [ln.split()[0] for ln in starts.read_text().splitlines()],
    }


def test_a_machine_that_slows_between_groups_withholds_the_small_verdict(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each engine start takes one more unit of token time (1, 2, 3): fast (a quarter of ar's
    token time) reads x2 against ar, run a start before it; the sentinel, two starts later, reads
    ar 67 % slower, more than x2. Effects this large stand out of a loaded box's noise."""
    got = _run(pytester, monkeypatch, "1.0")
    got["res"].assert_outcomes(passed=3)
    assert got["starts"] == ["ar-tp1", "fast-tp1", "ar-tp1"]  # the sentinel's own start of ar
    (rec,) = got["doc"]["specbench"]["drift"]
    assert rec["family"] == "ar-tp1" and rec["groups"] == ["ar-tp1", "fast-tp1"]
    assert rec["sentinel_cell"] == "ar-tp1-c2-out8-sentinel" and rec["same_requests"] is True
    assert rec["drift"] < -0.5, rec
    assert rec["minutes"] > 0  # from the baseline's cell to the sentinel
    e = got["cells"]["fast-tp1-c2-out8"]
    assert e["speedup_verdict_before_drift"] == "faster", e["speedup_verdict"]
    assert (
        e["speedup_verdict"].startswith("no verdict: ")
        and "drift its family ar-tp1 measured" in e["speedup_verdict"]
    )
    assert rec["withheld"] == ["fast-tp1-c2-out8"]
    assert "ar-tp1-c2-out8-sentinel" not in got["cells"]  # not a cell of the results
    out = got["res"].stdout.str()
    assert "drift ar-tp1: -" in out and "1 verdict withheld (fast-tp1-c2-out8)" in out


@pytest.mark.slow
def test_without_drift_the_verdict_stands(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """fast reads x4 against ar; the sentinel reads ar as before, within the box's noise."""
    got = _run(pytester, monkeypatch, "0")
    got["res"].assert_outcomes(passed=3)
    (rec,) = got["doc"]["specbench"]["drift"]
    assert abs(rec["drift"]) < 0.5, rec  # none but the loaded box's noise
    e = got["cells"]["fast-tp1-c2-out8"]
    assert e["speedup_verdict"] == "faster" and "speedup_verdict_before_drift" not in e
    assert e["speedup_drift"]["family"] == "ar-tp1" and rec["withheld"] == []
    # planned from this run, the end-of-run ETA is the plan's serial total: the cells, the engine
    # starts and the sentinel (ar's restart and its round), in one process and under xdist alike
    import re

    (pytester.path / "prev.json").write_text((pytester.path / "out.json").read_text())
    plan = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", "--specbench-plan-from", "prev.json", "--specbench-plan"
    )
    total = next(ln for ln in plan.stdout.lines if ln.startswith("cells: "))
    m = re.search(r"\(cells (\d+) s, engine starts (\d+) s, drift sentinels (\d+) s, one process\)", total)
    assert m, total
    planned = sum(int(x) for x in m.groups())
    for args in ((), ("-n", "2")):
        again = _run(pytester, monkeypatch, "0", "--specbench-plan-from", "prev.json", *args)
        wall = next(ln for ln in again["res"].stdout.lines if ln.startswith("run wall "))
        assert "for 2 of 2 cells and 3 engine starts (drift sentinels included: 1)" in wall, wall
        eta = int(re.search(r"plan ETA (\d+) s", wall).group(1))
        assert abs(eta - planned) <= 2, (wall, total)


def test_under_xdist_a_family_runs_on_one_worker_back_to_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-n 2: each family (its groups and its sentinel's restart of the baseline) is one unit of
    work: the starts of one worker are [ar-tpN, ngram-tpN, ar-tpN] blocks."""
    conftest = fake_conftest(
        "FakeEngine", 'register_backend("fake", FakeEngine, gpu=False, sentinel=True, max_tp=2)'
    )
    matrix = MATRIX.replace("fake-step", "fake").replace("  fast:", "  ngram:") + "tp: [1, 2]\n"
    write_project(pytester, matrix, conftest)
    starts = count_starts(monkeypatch, pytester.path / "starts.txt")
    res = pytester.runpytest_subprocess(
        "benches", "-p", "no:cacheprovider", "-n", "2", "--benchmark-json=out.json"
    )
    res.assert_outcomes(passed=6)
    by_worker: dict[str, list[str]] = {}
    for ln in starts.read_text().splitlines():
        group, worker = ln.split()[:2]
        by_worker.setdefault(worker, []).append(group)
    blocks = sorted(tuple(s[i : i + 3]) for s in by_worker.values() for i in range(0, len(s), 3))
    assert blocks == [("ar-tp1", "ngram-tp1", "ar-tp1"), ("ar-tp2", "ngram-tp2", "ar-tp2")], by_worker
    doc = json.loads((pytester.path / "out.json").read_text())
    assert sorted(r["family"] for r in doc["specbench"]["drift"]) == ["ar-tp1", "ar-tp2"]


def test_a_disturbed_sentinel_is_said_and_still_withholds() -> None:
    small = {"speedup_vs_ar": 1.08, "speedup_vs_ar_ci95": [1.05, 1.11], "speedup_verdict": "faster"}
    base = _result("ar-tp1-c1", "ar-tp1", [100.0, 100.0 * 1.01, 100.0 / 1.01])
    comps = {1: dict(small)}
    spec: dict[str, Any] = {"sentinels": [_sentinel(90.0) | {"disturbed": "other processes took 40%"}]}
    drift.apply([base, _result("m-tp1-c1", "m-tp1", [1.0])], comps, spec)
    assert spec["drift"][0]["sentinel_disturbed"] == "other processes took 40%"
    assert comps[1]["speedup_verdict_before_drift"] == "faster"
    line = drift.lines({"specbench": spec})[0]
    assert line.endswith(
        "1 verdict withheld (m-tp1-c1); the sentinel was disturbed: other processes took 40%)"
    )


def test_a_plan_without_a_gpu_pool_still_counts_the_sentinels(pytester: pytest.Pytester) -> None:
    """A GPU backend planned where no pool is known (no NVML, no --specbench-gpus): no packed
    schedule, but the serial total still holds the family's sentinel (a restart of ar and its
    round), as the same plan with a pool does."""
    conftest = CONFTEST.replace(
        'register_backend("fake-step", FakeStepDriftEngine, gpu=False,',
        'register_backend("fake-step", FakeStepDriftEngine, gpu=True,',
    )
    write_project(pytester, MATRIX, conftest)
    totals = []
    for pool in ([], ["--specbench-gpus", "0"]):
        res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--specbench-plan", *pool)
        totals.append(next(ln for ln in res.stdout.lines if ln.startswith("cells: ")))
    assert "drift sentinels 60 s" in totals[0] and totals[0] == totals[1], totals
