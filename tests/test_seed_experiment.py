"""benches/examples/seed-experiment.yaml, an 8-GPU experiment deciding DDTree vs DFlash on a 27B
hybrid, and seed-experiment-full.yaml, the same experiment without its economies: they load,
collect and plan, with their cell counts worked out by hand."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from bench_project import write_project

from pytest_specbench.matrix.schema import load

ROOT = Path(__file__).parent.parent
SEED = ROOT / "benches" / "examples" / "seed-experiment.yaml"
FULL = ROOT / "benches" / "examples" / "seed-experiment-full.yaml"
# the experiment's machine: planned on 8 x RTX PRO 6000, one worker per GPU
PLAN_ON_8 = (
    "--specbench-plan",
    "--specbench-gpu",
    "RTX PRO 6000",
    "--specbench-gpus",
    "0,1,2,3,4,5,6,7",
    "-n",
    "8",
)
SEVEN = {"chat", "code", "math", "translation", "summarization", "qa", "rag"}


def _by_workload(path: Path) -> dict[str, int]:
    return dict(Counter(c.workload.name for c in load(path).cells()))


# settings at every TP size: ar, mtp, dflash and ddtree b8/b16/b32/b64/b128/b256 (9) on every
# workload; dflash-forced a2/a4/a8 (3) on decode at 256 out, batch and long_context only
#   decode: 9 x 3 out + 3 x 1 = 30 a TP size, x 4 TP sizes = 120
#   batch: 12 x c4/c16/c64 = 36 a TP size: 144 (the concurrency sweep at every TP size)
#   long_context: 12 x 3k/30k/100k at TP2/4/8 (108), 12 x 3k/30k at TP1 (24): 132
#   agentic: 9 x 2 scenarios = 18 a TP size: 72; categories: 9 x 7 categories = 63: 252
BY_HAND = {"decode": 120, "batch": 144, "long_context": 132, "agentic": 72, "categories": 252}


def test_seed_experiment_cells_by_hand() -> None:
    m = load(SEED)
    assert _by_workload(SEED) == BY_HAND
    assert len(m.groups()) == 12 * 4
    assert sorted(m.tp) == [1, 2, 4, 8]  # TP2: the fallback should TP8 not serve
    g = {x.id: x for x in m.groups()}
    assert dict(g["ddtree-b32-tp1"].method.engine_args) == {
        "speculative_ddtree_budget": 32,
        "mem_fraction_static": 0.80,
        "context_length": 32768,
    }
    assert dict(g["ddtree-b256-tp8"].method.engine_args)["mem_fraction_static"] == 0.85
    assert dict(g["ar-tp2"].method.engine_args) == {"mem_fraction_static": 0.85, "context_length": 131072}
    assert g["ar-tp4"].method.name == g["ar-tp1"].method.name == "ar"  # the TP view lines it up
    assert all(x.method.backend == "sglang-server" for x in m.groups())  # a launched server
    assert all(dict(x.method.env) == {"SGLANG_ENABLE_SPEC_V2": "1"} for x in m.groups())
    # GPU 0's service: the hooks run for the groups that lease GPU 0
    assert all(dict(x.method.hooks)["gpus"] == "0" for x in m.groups())
    assert all(set(dict(x.method.hooks)) == {"gpus", "before_group", "after_group"} for x in m.groups())
    # real weights: no model loads random ones (a dry run's dummy lines are comments)
    assert [mo.load_format for mo in m.models] == ["auto", "auto"]
    # MTP: the target is its own draft (its MTP layer); the expected acceptance each method's ETA
    # assumes, within what its verify step commits; the forced lengths expect nothing
    assert g["mtp-tp1"].method.speculative.draft_model == g["mtp-tp1"].method.model.name == "q27h"
    spec = {
        k: g[k].method.speculative for k in ("mtp-tp1", "dflash-tp1", "ddtree-b8-tp1", "dflash-forced-a8-tp1")
    }
    assert {k: s.expect_accept_length for k, s in spec.items()} == {
        "mtp-tp1": 3.0,
        "dflash-tp1": 3.5,
        "ddtree-b8-tp1": 4.5,
        "dflash-forced-a8-tp1": None,
    }
    assert m.compare == (("ddtree", "dflash"), ("ddtree", "mtp"), ("dflash", "mtp"))
    # the budget is decided where the experiment sweeps it: at TP1, on every TP1 cell
    assert g["ddtree-b8-tp1"].method.tune.label == "tp=1"
    assert g["ddtree-b8-tp1"].method.tune.keep == 2
    cells = m.cells()
    assert not any(c.tp == 1 and c.context_tokens == 100000 for c in cells)
    # every method at every TP size at every concurrency of the sweep, and on every category
    for grp in m.groups():
        mine = [c for c in cells if c.group.id == grp.id]
        assert {c.concurrency for c in mine if c.workload.name == "batch"} == {4, 16, 64}, grp.id
        cats = {c.params().get("category") for c in mine if c.workload.name == "categories"}
        assert cats == (set() if "forced" in grp.id else SEVEN), grp.id


def test_the_full_experiment_is_the_example_without_its_economies() -> None:
    """seed-experiment-full.yaml: the example's cells, in-process, no tune (every budget at every
    TP size); the same settings, shapes, hooks and expected acceptance."""
    ex, full = load(SEED), load(FULL)
    assert _by_workload(FULL) == BY_HAND
    assert sorted(c.id for c in full.cells()) == sorted(c.id for c in ex.cells())
    assert all(x.method.backend == "sglang" for x in full.groups())
    assert all(x.method.tune is None for x in full.groups())
    for a, b in zip(
        sorted(ex.groups(), key=lambda x: x.id), sorted(full.groups(), key=lambda x: x.id), strict=True
    ):
        assert dict(a.method.engine_args) == dict(b.method.engine_args), a.id
        assert dict(a.method.hooks) == dict(b.method.hooks), a.id
        assert a.method.speculative == b.method.speculative, a.id
    assert full.compare == ex.compare


def _args(pytester: pytest.Pytester, path: Path = SEED) -> tuple[str, ...]:
    """The repository's bench file in a pytester project, and the arguments that run it on the
    experiment's matrix."""
    write_project(pytester, None, None)
    return ("benches", "--specbench-matrix", str(path), "-p", "no:cacheprovider")


def _seed_args(pytester: pytest.Pytester) -> tuple[str, ...]:
    return _args(pytester)


# the settings the plan says cannot start, each with its own reason: DDTREE budgets 64, 128 and
# 256 at TP1 (what one GPU has left after the 27B's weights holds no request with a tree's
# draft-token states) and 256 at TP2; their cells skipped: 3 x 17 at TP1, 18 at TP2 = 69
CANNOT = {"ddtree-b64-tp1", "ddtree-b128-tp1", "ddtree-b256-tp1", "ddtree-b256-tp2"}


def test_seed_experiment_collects_and_plans(pytester: pytest.Pytester) -> None:
    args = _seed_args(pytester)
    res = pytester.runpytest(*args, "--specbench-plan", "--specbench-gpu", "RTX PRO 6000")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    res.stdout.fnmatch_lines(
        [
            "GPU: RTX PRO 6000, 95.6 GiB, 1.79 TB/s*",
            # 48 groups less the 4 that cannot start; AR restarts for a bracket after each member
            # that runs (none fits beside AR on its GPUs): 44 - 4 AR groups = 40
            "cells: 651 to run, 69 skipped; engine starts: 44 + 40 baseline restarts for brackets; ETA *",
        ]
    )
    out = res.stdout.str()
    cannot = dict(re.findall(r"^group (\S+) \(.*\): CANNOT RUN: (.+)$", out, re.M))
    assert set(cannot) == CANNOT, cannot
    assert all(cannot[g] for g in CANNOT)  # a reason per budget, not a silent drop
    assert "long_context-ar-tp1-c1-ctx100k" not in out and "long_context-ar-tp2-c1-ctx100k-out256" in out
    # the 100k cells: long_context 12 settings x TP2/4/8 = 36
    sel = pytester.runpytest(*args, "--collect-only", "-q", "-k", ":ctx100k:")
    sel.stdout.fnmatch_lines(["36/* tests collected *"])


def test_the_experiment_raced_on_eight_gpus(pytester: pytest.Pytester) -> None:
    """The experiment raced on 8 x RTX PRO 6000 by 8 workers: the budget decided on TP1's cells
    (every TP1 cell of a budget that starts), the best 2 carried to TP2/4/8, no engine started
    twice for it (a TP size decides whole); the full factorial is the packed schedule's makespan;
    the expected and worst cell counts by hand."""
    res = pytester.runpytest(*_seed_args(pytester), *PLAN_ON_8, "--specbench-race")
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    got = {
        k: float(v)
        for k, v in re.findall(r"^  (full factorial|expected|worst case): ([\d.]+) min", out, re.M)
    }
    packed = re.search(r"^makespan ([\d.]+) min with 8 workers", out, re.M)
    assert packed and got["full factorial"] == float(packed.group(1)), out
    assert got["expected"] <= got["worst case"] <= got["full factorial"], got
    res.stdout.fnmatch_lines(
        [
            "racing/tuning (ddtree: decided on cells with tp=1, best 2 carried), packed on the GPU pool (8 "
            "GPUs) by 8 worker(s), *",
            "  full factorial: * min, 651 cells, 44 engine starts *",
            # TP1: ar, mtp, dflash and budgets 8/16/32 x 17 shapes + 3 forced x 6 = 120; TP2/4/8:
            # ar, mtp, dflash x 18 + 3 forced x 7 + 2 carried budgets x 18 = 111 each: 453
            "  expected: * min (the deciding cells done by * min), 453 cells, *",
            "  worst case: * min (the deciding cells done by * min), * cells, *",
            # deciding: budgets 8/16/32 x 17 TP1 shapes = 51 (64-256 cannot start at TP1); the
            # others: 5 budgets x 18 at TP2 (256 cannot start) + 6 x 18 at TP4 and TP8 = 306; at
            # most 2 x 18 x 3 = 108 of them
            "tune ddtree: 6 settings decided on 51 cells (tp=1) that run first; the best 2 run the sweep's "
            "other 306 cells' shapes: at most 108 of them, at least 198 skipped; two-phase order: 0 extra "
            "engine starts (0 for the kept settings among the 0 tuned groups with cells in both phases)",
        ]
    )


def test_the_shard_split_packs_drift_families_as_the_schedule_does(pytester: pytest.Pytester) -> None:
    """On 8 x RTX PRO 6000 with 2 hosts: each host packs its groups with every drift family (a
    baseline and the methods compared with it, at one TP: back to back, then its sentinel) as one
    job, as the run's packed schedule does, so the split's "one host" figure is the schedule's
    makespan, and two hosts are never slower than one."""
    import re

    res = pytester.runpytest(
        *_seed_args(pytester),
        *PLAN_ON_8,
        "--specbench-shards",
        "2",
    )
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    packed = re.search(r"^makespan ([\d.]+) min with 8 workers", out, re.M)
    hosts = re.search(
        r"^shards: makespan ([\d.]+) min on 2 hosts, packed on 8 GPUs each \(one host: ([\d.]+) min\)",
        out,
        re.M,
    )
    assert packed and hosts, out
    assert hosts.group(2) == packed.group(1)
    assert float(hosts.group(1)) <= float(hosts.group(2))


def _variants(out: str) -> dict[str, tuple[float, float, float, list[float]]]:
    """Each raced variant's makespan, its GPU-minute bound, the ratio printed and its idle minutes
    by GPU, as the plan prints them under the variant's line."""
    got = {}
    for name in ("full factorial", "expected", "worst case"):
        m = re.search(
            rf"^  {name}: ([\d.]+) min.*\n    bound ([\d.]+) min .*, makespan ([\d.]+)x the bound\n"
            r"    GPU-minutes .*\n    idle minutes by GPU: (.+)$",
            out,
            re.M,
        )
        assert m, (name, out)
        idle = [float(x.split()[-1]) for x in m.group(4).split(", ")]
        got[name] = (float(m.group(1)), float(m.group(2)), float(m.group(3)), idle)
    return got


@pytest.mark.parametrize("path", [SEED, FULL], ids=["example", "full"])
def test_each_raced_makespan_is_said_against_its_bound_with_idle_time_by_gpu(
    pytester: pytest.Pytester, path: Path
) -> None:
    """Both files raced on 8 x RTX PRO 6000: under each variant its GPU-minute bound, the ratio of
    the makespan to it (as printed, to two places) and the idle minutes of each of the 8 GPUs; the
    GPU-0 service window said once for the full factorial's schedule and once for the expected
    run's, each one stop and one start."""
    res = pytester.runpytest(*_args(pytester, path), *PLAN_ON_8, "--specbench-race")
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    for name, (makespan, bound, ratio, idle) in _variants(out).items():
        assert len(idle) == 8, name
        assert bound <= makespan and abs(makespan / bound - ratio) < 0.006, (name, makespan, bound, ratio)
    windows = re.findall(
        r"^ +GPU 0 \(its hooks' service\): (\d+) engine start\(s\) lease it, (.+)$", out, re.M
    )
    assert len(windows) == 2, windows
    assert all(
        w.endswith("stopped once before the first start and started once after the last") for _, w in windows
    )
