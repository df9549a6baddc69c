"""benches/examples/seed-experiment.yaml: the seed's experiment loads, collects and plans, with
its cell counts worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_project import write_project

from pytest_specbench.matrix.schema import load

ROOT = Path(__file__).parent.parent
SEED = ROOT / "benches" / "examples" / "seed-experiment.yaml"
# the seed's machine: planned on 8 x RTX PRO 6000, one worker per GPU
PLAN_ON_8 = (
    "--specbench-plan",
    "--specbench-gpu",
    "RTX PRO 6000",
    "--specbench-gpus",
    "0,1,2,3,4,5,6,7",
    "-n",
    "8",
)


def test_seed_experiment_cells_by_hand() -> None:
    m = load(SEED)
    by: dict[str, int] = {}
    for c in m.cells():
        by[c.workload.name] = by.get(c.workload.name, 0) + 1
    # methods at every TP: ar, dflash, ddtree b8/b32/b128 (3) = 5, at TP1, TP4 and TP8 (the
    # race's tuning at TP4 carries two budgets or more; without it every budget runs)
    # decode: c1 x 256/1024/2048 out = 3 shapes: 5 x 3 x 3 TP sizes = 45
    # batch: c4/c16/c64 x 256 out = 3 shapes: 45, less dflash and ddtree's 3 budgets at TP1
    #   c16/c64: 45 - 4 x 2 = 37
    # long_context: 3k/30k/100k at c1, no 100k at TP1: 5 x (2 + 3 + 3) = 40
    # agentic: calculator/etl at c1: 5 x 2 x 3 = 30
    assert by == {"decode": 45, "batch": 37, "long_context": 40, "agentic": 30}
    assert len(m.groups()) == 5 * 3
    g = {x.id: x for x in m.groups()}
    assert dict(g["ddtree-b32-tp1"].method.engine_args) == {
        "speculative_ddtree_budget": 32,
        "mem_fraction_static": 0.80,
        "context_length": 32768,
    }
    assert dict(g["ddtree-b128-tp8"].method.engine_args)["mem_fraction_static"] == 0.85
    assert dict(g["ar-tp4"].method.engine_args) == {"mem_fraction_static": 0.85, "context_length": 131072}
    assert g["ar-tp4"].method.name == g["ar-tp1"].method.name == "ar"  # the TP view lines it up
    assert all(x.method.backend == "sglang-server" for x in m.groups())  # the seed's launched server
    assert all(dict(x.method.env) == {"SGLANG_ENABLE_SPEC_V2": "1"} for x in m.groups())
    # GPU 0's service: the hooks run for the groups that lease GPU 0
    assert all(dict(x.method.hooks)["gpus"] == "0" for x in m.groups())
    assert all(set(dict(x.method.hooks)) == {"gpus", "before_group", "after_group"} for x in m.groups())
    # real weights: no model loads random ones (a dry run's dummy lines are comments)
    assert [mo.load_format for mo in m.models] == ["auto", "auto"]
    # the expected acceptance each method's ETA assumes, within what its verify step commits
    spec = {k: g[k].method.speculative for k in ("dflash-tp1", "ddtree-b8-tp1")}
    assert {k: s.expect_accept_length for k, s in spec.items()} == {"dflash-tp1": 4.5, "ddtree-b8-tp1": 5.5}
    assert m.compare == (("ddtree", "dflash"),)
    # the budgets are decided where every one starts and none queues: TP4, one request
    assert g["ddtree-b8-tp4"].method.tune.label == "tp=4, workload=decode, output_tokens=256"
    assert not any(c.tp == 1 and c.context_tokens == 100000 for c in m.cells())


def _seed_args(pytester: pytest.Pytester) -> tuple[str, ...]:
    """The repository's bench file in a pytester project, and the arguments that run it on the
    seed's matrix."""
    write_project(pytester, None, None)
    return ("benches", "--specbench-matrix", str(SEED), "-p", "no:cacheprovider")


def test_seed_experiment_collects_and_plans(pytester: pytest.Pytester) -> None:
    args = _seed_args(pytester)
    res = pytester.runpytest(*args, "--specbench-plan", "--specbench-gpu", "RTX PRO 6000")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    res.stdout.fnmatch_lines(
        [
            "GPU: RTX PRO 6000, 95.6 GiB, 1.79 TB/s*",
            # DDTREE budget 128 cannot start at TP1 (draft-token states, docs/plan.md): its 8
            # TP1 cells (decode 3, batch 1, long_context 2, agentic 2) skipped, its engine start
            # never made: 15 - 1 = 14
            "cells: 144 to run, 8 skipped; engine starts: 14; ETA *",
        ]
    )
    out = res.stdout.str()
    assert "long_context-ar-tp1-c1-ctx100k" not in out and "long_context-ar-tp4-c1-ctx100k-out256" in out
    # GPU 0's live service: only the TP8 groups lease GPU 0 (its hooks' gpus), with their
    # baseline's brackets (5 groups, 4 brackets), back to back at the end of the run: one window,
    # the service's downtime
    on8 = pytester.runpytest(*args, *PLAN_ON_8)
    on8.stdout.fnmatch_lines(
        [
            "hooks: after_group, before_group around 9 group(s) of the schedule (docs/matrix.md)",
            "  GPU 0 (its hooks' service): 9 engine start(s) lease it, back to back in one window, "
            "*:*:* -> *:*:*: the service is down * min of the run's *",
        ]
    )
    slots = [ln.split() for ln in on8.stdout.lines if ln.startswith("  ") and " GPUs " in ln]
    on_0 = [s[0] for s in slots if "0" in s[s.index("GPUs") + 1].split(",")]
    assert len(on_0) == 9 and all(g.endswith("-tp8") for g in on_0), on_0
    # the 100k cells: long_context 5 methods x TP4/TP8 = 10 (155 items: 152 cells, 3 bench
    # functions without cells)
    sel = pytester.runpytest(*args, "--collect-only", "-q", "-k", ":ctx100k:")
    sel.stdout.fnmatch_lines(["10/155 tests collected (145 deselected)*"])


def test_the_seed_experiment_raced_on_eight_gpus_within_two_hours(pytester: pytest.Pytester) -> None:
    """The seed's matrix raced on 8 x RTX PRO 6000 by 8 workers: at most 120 min expected and 180
    at worst; the full factorial is the packed schedule's makespan; the expected GPU-minutes by
    workload, TP and method (docs/plan.md reads them)."""
    import re

    res = pytester.runpytest(*_seed_args(pytester), *PLAN_ON_8, "--specbench-race")
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    lines = re.findall(r"^  (full factorial|expected|worst case): ([\d.]+) min", out, re.M)
    got = {k: float(v) for k, v in lines}
    packed = re.search(r"^makespan ([\d.]+) min with 8 workers", out, re.M)
    assert packed and got["full factorial"] == float(packed.group(1)), out
    assert got["expected"] <= 120.0 and got["worst case"] <= 180.0, got
    assert got["expected"] <= got["worst case"], got
    res.stdout.fnmatch_lines(
        [
            "racing/tuning (ddtree: decided on cells with tp=4, workload=decode, output_tokens=256, best 2 "
            "carried), packed on the GPU pool (8 GPUs) by 8 worker(s), *",
            "  full factorial: * min, 144 cells, 14 engine starts",
            # expected: b8 and b32 carried (the plan's times put b128 beyond what the decision can
            # separate); ar-tp4 and both kept budgets' TP4 groups start again after the decision
            "  expected: * min (the deciding cells done by * min), 123 cells, 16 engine starts, *; 3 extra "
            "engine start(s) for the two-phase order (ar-tp4, ddtree-b32-tp4, ddtree-b8-tp4)",
            # worst: every budget carried, every cell to its cap
            "  worst case: * min (the deciding cells done by * min), 144 cells, 18 engine starts, *",
            "  where the expected time goes, GPU-minutes of cells (minutes x TP size; engine starts apart):",
            "    long_context: * (tp1 *, tp4 *, tp8 *)",
            "    method ddtree: * (tp1 *, tp4 *, tp8 *)",
            # on PCIe the plan puts TP8 within 2 % of TP4 per user at one request: no TP size is
            # expected to be dominated beyond the drift allowed, none of its cells expected skipped
            "  a TP size slower per user than a smaller one at a cheaper shape (beyond ±13% drift) skips "
            "its costlier shapes: planned per user, larger over smaller TP, x0.98 to x*: 0 cell(s) "
            "expected skipped",
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
