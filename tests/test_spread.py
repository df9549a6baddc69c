"""A drift family spread over its TP size's GPU sets, each set with its own baseline measurement
(deciding/spread.py, docs/metrics.md "Drift sentinel"); the plan's GPU-minute bound; the machine's
warm-up pass on each fresh GPU set."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from bench_project import fake_conftest, write_project

from pytest_specbench.deciding.families import Family, families, merge_jobs
from pytest_specbench.deciding.spread import choose, spread
from pytest_specbench.gpus.leases import LeasePool
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import schedule

ROOT = Path(__file__).resolve().parents[1]


def _fams(brackets: bool = False) -> list[Family]:
    doc = {
        "models": {"m": "/nonexistent/model"},
        "methods": {n: {"backend": "sglang", "model": "m"} for n in ("ar", "m1", "m2", "m3", "m4")},
        "workloads": {"throughput": {"concurrency": [1]}},
    }
    m = parse(doc, "m.yaml")
    return families(m.cells(), m.baselines(), {"sglang"}, set(), brackets=brackets)


DUR = {"ar-tp1": 100.0, "m1-tp1": 60.0, "m2-tp1": 50.0, "m3-tp1": 40.0, "m4-tp1": 30.0}


# ------------------------------------------------------------------------------ the split (pure)


def test_a_family_is_spread_longest_member_first_each_set_opened_and_closed_by_its_own_bracket() -> None:
    """Baseline 100 s, members 60/50/40/30 s, a bracket 10 s, 3 GPU sets. Longest first, each
    where it would end first: m1 on set 2 (0 + 60 + its two brackets = 80, against 100 + 60 + 10
    beside the baseline's group), m2 on set 3 (70), m3 on set 3 (110 against 120), m4 on set 2
    (110 against 140 and 140)."""
    (fam,) = _fams()
    out = spread([fam], DUR, lambda f: 3, lambda f: 10.0)
    assert [(f.gpu_set, f.gpu_sets, f.groups) for f in out] == [
        (0, 3, ("ar-tp1",)),  # the baseline's own group, on a set of its own
        (1, 3, ("m1-tp1", "m4-tp1")),
        (2, 3, ("m2-tp1", "m3-tp1")),
    ]
    one = out[1]
    first = "ar-tp1-c1-out64"
    assert one.scope == "family ar-tp1 (GPU set 2 of 3)"
    # opened by a bracket on its own GPUs, closed by one after its last member: both members
    # read the level those two bound
    assert one.runs() == [
        (f"{first}-before-m1-tp1-sentinel", None),
        (f"{first}-after-m4-tp1-sentinel", "m4-tp1"),
    ]
    assert one.before("m1-tp1") == one.before("m4-tp1") == f"{first}-before-m1-tp1-sentinel"
    assert one.span("m4-tp1") == ("m1-tp1", "m4-tp1") and one.bracketed
    # bracketed: a bracket after each member, the set's first one opened by its own bracket
    b = spread(_fams(brackets=True), DUR, lambda f: 3, lambda f: 10.0)[1]
    assert [r for r, _ in b.runs()] == [
        f"{first}-before-m1-tp1-sentinel",
        f"{first}-after-m1-tp1-sentinel",
        f"{first}-after-m4-tp1-sentinel",
    ]
    assert b.before("m4-tp1") == f"{first}-after-m1-tp1-sentinel" and b.span("m4-tp1") == ("m4-tp1",)
    # one GPU set of the size: the family as it was (its sentinel after its last member)
    assert spread([fam], DUR, lambda f: 1, lambda f: 10.0) == [fam]
    # every process splits alike, whatever order it collected the members in (equal durations
    # go by the matrix's order of groups, else by id)
    eq = dict.fromkeys(DUR, 50.0)
    backwards = dataclasses.replace(fam, members=fam.members[::-1])
    assert spread([backwards], eq, lambda f: 3, lambda f: 10.0) == spread(
        [fam], eq, lambda f: 3, lambda f: 10.0
    )
    # members too short to pay for another set's two brackets stay beside the baseline's group:
    # 30 + 2 + its closing 40 = 72 there (78 with all four), 2 + 40 + 40 = 82 on a set of its own
    short = {"ar-tp1": 30.0} | {f"m{i}-tp1": 2.0 for i in range(1, 5)}
    assert spread([fam], short, lambda f: 2, lambda f: 40.0) == [fam]


def test_each_spread_set_is_a_job_of_its_own_with_its_brackets() -> None:
    (fam,) = _fams()
    split = spread([fam], DUR, lambda f: 3, lambda f: 10.0)
    jobs = [schedule.Job(g, 1, d, 1, "sglang") for g, d in DUR.items()]

    class Plan:
        cells: dict[str, Any] = {}
        groups: dict[str, Any] = {}

    def planned(plan: Any, group: Any, cells: Any) -> Any:
        return type("P", (), {"start_s": 10.0})()

    fj = merge_jobs(split, jobs, Plan(), planned)
    # the baseline's set holds no member: its group is a job as any other
    assert sorted((j.group, j.duration_s) for j in fj.jobs) == [
        ("ar-tp1", 100.0),
        ("family ar-tp1 (GPU set 2 of 3)", 10 + 60 + 30 + 10),
        ("family ar-tp1 (GPU set 3 of 3)", 10 + 50 + 40 + 10),
    ]
    assert fj.parts["family ar-tp1 (GPU set 2 of 3)"] == [
        ("ar-tp1 (bracket before m1-tp1)", 10.0),
        ("m1-tp1", 60.0),
        ("m4-tp1", 30.0),
        ("ar-tp1 (bracket after m4-tp1)", 10.0),
    ]
    assert fj.restarts() == {"brackets": 4, "sentinels": 0}
    assert fj.scope_of_run("ar-tp1-c1-out64-after-m3-tp1-sentinel") == "family ar-tp1 (GPU set 3 of 3)"


def _packed(pool: tuple[int, ...], *extra: schedule.Job) -> Any:
    """The makespan of a split family's jobs (and ``extra`` ones) on ``pool`` by 3 workers."""

    def makespan(split: list[Family]) -> float:
        jobs = [schedule.Job(g, 1, d, 1, "sglang") for g, d in DUR.items()]
        plan = type("P", (), {"cells": {}})()
        fj = merge_jobs(split, jobs, plan, lambda *a: type("P", (), {"start_s": 10.0})())
        return schedule.pack(schedule.longest_first([*fj.jobs, *extra]), pool, 3).makespan_s

    return makespan


def test_a_set_that_buys_nothing_but_its_brackets_is_not_opened() -> None:
    """``choose``: each family gets the fewest GPU sets among those whose packed schedule ends
    first. On one GPU every set runs after the other; beside a 1000 s job on a third GPU, the
    family ends before it however it is split: one set, no opening bracket, either way."""
    (fam,) = _fams()
    assert choose([fam], DUR, lambda f: 3, lambda f: 10.0, _packed((0,))) == [fam]
    long = schedule.Job("x", 1, 1000.0, 1, "sglang")
    assert choose([fam], DUR, lambda f: 3, lambda f: 10.0, _packed((0, 1, 2), long)) == [fam]
    # on three GPUs alone, three sets end first (100, 110, 110 against 160 on two)
    got = choose([fam], DUR, lambda f: 3, lambda f: 10.0, _packed((0, 1, 2)))
    assert [f.gpu_set for f in got] == [0, 1, 2]


def test_each_familys_sets_are_chosen_again_once_the_others_changed() -> None:
    """Two families (TP1, TP2), each splittable in two. Ends: both split 100, TP1 joined alone
    110, TP2 joined alone 90, both joined 80. From both split, TP1 alone gains nothing; once TP2
    is joined (90), TP1 joined too ends first (80): a second pass finds it."""
    doc = {
        "models": {"m": "/nonexistent/model"},
        "methods": {n: {"backend": "sglang", "model": "m"} for n in ("ar", "m1", "m2")},
        "tp": [1, 2],
        "workloads": {"throughput": {"concurrency": [1]}},
    }
    mx = parse(doc, "m.yaml")
    fams = families(mx.cells(), mx.baselines(), {"sglang"}, set())
    dur = {c.group.id: 100.0 for c in mx.cells()}
    ends = {(2, 2): 100.0, (1, 2): 110.0, (2, 1): 90.0, (1, 1): 80.0}

    def makespan(split: list[Family]) -> float:
        n = tuple(max(f.gpu_sets for f in split if f.baseline == b) for b in ("ar-tp1", "ar-tp2"))
        return ends[n]

    got = choose(fams, dur, lambda f: 2, lambda f: 1.0, makespan)
    assert [(f.baseline, f.gpu_sets) for f in got] == [("ar-tp1", 1), ("ar-tp2", 1)]


def test_a_sets_closing_bracket_widens_every_member_of_the_set() -> None:
    """A spread family's GPU set bracketed at its end: its two members both read the level its
    opening (x0.6) and closing (x0.5) brackets bound: [0.5, 0.6] / [0.5, 0.6] -> [0.833, 1.2]."""
    from pytest_specbench.report import brackets

    spec: dict[str, Any] = {
        "sentinels": [
            {"cell_id": "x-before-m1-sentinel", "baseline_cell": "x", "bracket_opens": "m1"},
            {
                "cell_id": "x-after-m2-sentinel",
                "baseline_cell": "x",
                "bracket_after": "m2",
                "bracket_before": "x-before-m1-sentinel",
                "bracket_members": ["m1", "m2"],
            },
        ],
        "drift": [
            {"sentinel_cell": "x-before-m1-sentinel", "ratio": 0.6},
            {"sentinel_cell": "x-after-m2-sentinel", "ratio": 0.5},
        ],
    }
    cmp = {
        "speedup_vs_ar": 0.55,
        "speedup_vs_ar_ci95": [0.5, 0.6],
        "speedup_verdict": "slower",
        "speedup_pairs": 5,
    }
    comps = {0: dict(cmp), 1: dict(cmp)}
    brackets.apply([{"group": "m1"}, {"group": "m2"}], comps, spec)
    for c in comps.values():
        assert c["speedup_brackets"]["before"] == "x-before-m1-sentinel"
        assert c["speedup_brackets"]["ci95"] == pytest.approx([0.5 / 0.6, 0.6 / 0.5])
        assert c["speedup_verdict"] == "not separated" and c["speedup_verdict_before_brackets"] == "slower"


# ------------------------------------------------------------------------------ GPU sets kept, warmed


def test_a_start_that_keeps_its_gpu_set_gets_it_before_a_better_ranked_start() -> None:
    got = schedule.grant([0, 1, 2, 3], [("a", 1), ("b", 1)], wants={"b": (0,)})
    assert got == {"b": (0,), "a": (1,)}
    # its GPUs held by another: it waits, and no one else takes the ones it keeps
    got = schedule.grant([1, 2, 3], [("a", 2), ("b", 2)], wants={"b": (0, 1)})
    assert got == {"a": (2, 3)}


def test_the_lease_pool_keeps_a_family_sets_gpus_and_says_which_set_is_cold(tmp_path: Path) -> None:
    pool = LeasePool.create(tmp_path / "leases", (0, 1, 2, 3))
    pool.set_order(["x-tp2", "ar-tp2", "m-tp2"])  # x ranks before m: by rank alone it would get 0, 1
    first = pool.acquire("ar-tp2", 2, "w0")
    assert first.gpus == (0, 1) and first.cold and first.event()["cold"] is True
    # released with its next start keeping the set: another start asking first gets the others
    pool.release(first, then=("m-tp2", 2, first.gpus))
    other = LeasePool(tmp_path / "leases").acquire("x-tp2", 2, "w1", timeout_s=2)  # another worker
    assert other.gpus == (2, 3) and other.cold
    again = pool.acquire("m-tp2", 2, "w0", keep=(0, 1), timeout_s=2)
    assert again.gpus == (0, 1) and not again.cold  # the set has had an engine: warm


def test_the_first_job_on_a_gpu_set_pays_the_warm_up_pass() -> None:
    js = [schedule.Job(f"g{i}-tp1", 1, 100, 1, "x", warm_s=30) for i in range(3)]
    s = schedule.pack(js, (0, 1), 2)
    assert s.makespan_s == 130 + 100  # GPUs 0 and 1 warmed once each, the third job warm
    assert sorted(x.extra_s for x in s.slots) == [0, 30, 30]


def test_the_bound_is_the_cells_gpu_minutes_over_the_gpus_or_the_longest_group() -> None:
    b = schedule.bound(8 * 60 * 60.0, {"a": 30 * 60.0, "b": 90 * 60.0}, 8)
    assert (b.area_s, b.longest, b.bound_s, b.ratio(78 * 60)) == (3600.0, "b", 5400.0, 78 / 90)
    assert "bound 90.0 min (cells' 480 GPU-minutes / 8 GPUs = 60.0; longest group b 90.0)" in b.said(78 * 60)
    sched = schedule.pack([schedule.Job("a", 2, 100, 2, "x"), schedule.Job("b", 1, 50, 1, "x")], (0, 1, 2), 2)
    sp = schedule.spent(sched, 200.0, 30.0, 10.0)
    assert sp.idle == {0: 0.0, 1: 0.0, 2: 50.0} and sp.total == 300.0 and sp.other == pytest.approx(10.0)


# ------------------------------------------------------------------------------ planned and run

# each GPU a machine of its own speed: a token takes FAKE_TOKEN_S x (1 + its first GPU)
CONFTEST = fake_conftest(
    "FakeTimedEngine",
    """
import os
import pytest


class FakeSetEngine(FakeTimedEngine):
    def token_s(self):
        gpu = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
        return super().token_s() * (1 + gpu)


register_backend("fakegpu", FakeSetEngine, gpu=True, sentinel=True)

# the suite's other processes may take the CPU: the disturbance meter is off in every worker
# (its own tests cover it), so the verdicts are the comparisons' alone
from pytest_specbench.plugin import disturbance

disturbance.DisturbanceMeter.start = lambda self: None
disturbance.DisturbanceMeter.stop = lambda self: {}

from pytest_specbench.gpus import inventory as gpus

gpus.inventory = lambda: [gpus.GPU(i, "NVIDIA H200", 143771, 618, 0) for i in range(3)]
gpus.driver_info = lambda: {"driver": "fake", "cuda_driver": "fake"}
gpus.memory_bandwidth = lambda index: None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    cs = getattr(item, "callspec", None)
    if cs is not None:
        with open(os.environ["FAKE_ITEM_LOG"], "a") as f:
            f.write(cs.id + " " + os.environ.get("CUDA_VISIBLE_DEVICES", "-") + "\\n")
""",
)
MATRIX = f"""
models: {{m: {{path: {ROOT / "benches/examples/configs/qwen3-8b"}, load_format: dummy}}}}
methods:
  ar: {{backend: fakegpu, model: m}}
  a: {{backend: fakegpu, model: m, env: {{FAKE_METHOD: a}}}}  # not twins of ar: methods of their own
  b: {{backend: fakegpu, model: m, env: {{FAKE_METHOD: b}}}}
  c: {{backend: fakegpu, model: m, env: {{FAKE_METHOD: c}}}}
  d: {{backend: fakegpu, model: m, env: {{FAKE_METHOD: d}}}}
workloads:
  throughput:
    concurrency: [2]
    output_tokens: [8]
    prompt_tokens: 16
    waves: 2
    rounds: 5
    warmup: 1
"""


def test_the_plan_spreads_the_family_over_the_gpu_sets_and_prints_its_bound(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester, MATRIX, CONFTEST)
    res = pytester.runpytest_subprocess(  # its conftest replaces NVML's inventory: not in this process
        "benches", "-p", "no:cacheprovider", "--specbench-plan", "-n", "3", "--specbench-plan-json", "p.json"
    )
    out = res.stdout.str()
    assert res.ret == 0, out
    rows = [ln.split() for ln in res.stdout.lines if re.match(r"  \S.*GPUs \d", ln)]
    gpus_of = {" ".join(r[: r.index("GPUs")]): r[r.index("GPUs") + 1] for r in rows}
    members = {g: gpus_of[g] for g in ("a-tp1", "b-tp1", "c-tp1")}
    assert len(set(members.values()) | {gpus_of["ar-tp1"]}) >= 2, out  # not all on one GPU
    for g, on in members.items():  # each member between brackets (or the baseline) on its own GPU
        around = [k for k in gpus_of if k.startswith("ar-tp1 (") and gpus_of[k] == on] + (
            ["ar-tp1"] if gpus_of["ar-tp1"] == on else []
        )
        assert around, (g, out)
    assert "the family spread over" in out
    # the bound, from the plan's own numbers: the cells' GPU-seconds over 3 GPUs, or the longest group
    doc = json.loads((pytester.path / "p.json").read_text())
    cells = [c for c in doc["cells"] if c["eta_s"]]
    area = sum(c["eta_s"] for c in cells) / 3
    longest = max(
        g["start_s"] + sum(c["eta_s"] for c in cells if c["group"] == g["group"]) for g in doc["groups"]
    )
    bound = doc["schedule"]["bound"]
    assert bound["bound_s"] == pytest.approx(max(area, longest))
    assert bound["ratio"] == pytest.approx(doc["schedule"]["makespan_s"] / max(area, longest))
    said = f"bound {max(area, longest) / 60:.1f} min (cells' "
    assert said in out and f"makespan {bound['ratio']:.2f}x the bound" in out, out
    assert "idle minutes by GPU: GPU 0 " in out


@pytest.mark.slow
def test_under_n_each_member_is_compared_on_its_own_gpu_set(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-n 3 on 3 fake GPUs, each slower than the one before (a token takes x1, x2, x3), four
    methods on the same engine (every true ratio 1). The family is spread: each member runs
    between two measurements of the baseline on its own GPU (its set's brackets, or the
    baseline's own cells), so a member on another GPU than the baseline's cells reads that GPU's
    speed measured apart (x0.5 or so, or x2), and its interval, read at its own set's level,
    holds 1. The first engine on each GPU warms the machine (an untimed pass), no other."""
    write_project(pytester, MATRIX, CONFTEST)
    monkeypatch.setenv("FAKE_ITEM_LOG", str(pytester.path / "items.txt"))
    monkeypatch.setenv("FAKE_TOKEN_S", "0.004")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    res = pytester.runpytest_subprocess(
        "benches", "-p", "no:cacheprovider", "-n", "3", "--benchmark-json=out.json"
    )
    assert res.ret == 0, res.stdout.str()
    ran = dict(ln.split() for ln in (pytester.path / "items.txt").read_text().splitlines())
    doc = json.loads((pytester.path / "out.json").read_text())
    cells = {b["param"]: b["extra_info"] for b in doc["benchmarks"]}
    spread_over = {tuple(s["gpu_set"]) for s in doc["specbench"]["sentinels"] if "gpu_set" in s}
    assert len(spread_over) >= 2, doc["specbench"]["sentinels"]  # the family ran on several sets
    base_gpu = ran["ar-tp1-c2-out8"]
    apart = 0
    for m in ("a", "b", "c"):
        cid = f"{m}-tp1-c2-out8"
        e = cells[cid]
        br = e["speedup_brackets"]  # its two baseline measurements, on its own GPU
        assert ran[br["before"]] == ran[br["after"]] == ran[cid], (cid, br, ran)
        lo, hi = br["ci95"]  # the interval at its own set's level
        assert lo <= 1 <= hi and e["speedup_verdict"] not in ("slower", "faster"), (cid, e)
        if ran[cid] != base_gpu:  # on another GPU than the baseline's cells: apart, it reads that GPU's speed
            apart += 1
            slower = int(ran[cid]) > int(base_gpu)
            assert e["speedup_vs_ar"] < 0.8 if slower else e["speedup_vs_ar"] > 1.25, (cid, e)
    assert apart >= 1
    # the machine's warm-up pass: once per GPU, by the first engine on it
    warmed = [
        ran[k]
        for k, w in [(c, x.get("engine_warm") or {}) for c, x in cells.items()]
        + [(s["cell_id"], s.get("engine_warm") or {}) for s in doc["specbench"]["sentinels"]]
        if "machine" in w
    ]
    assert sorted(warmed) == sorted(set(ran.values())), (warmed, ran)
