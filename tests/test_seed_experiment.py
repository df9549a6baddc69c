"""benches/examples/seed-experiment.yaml, an 8-GPU experiment deciding DDTree vs DFlash on a 27B
hybrid: it loads, collects and plans, with its cell counts worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_project import write_project

from pytest_specbench.matrix.schema import load

ROOT = Path(__file__).parent.parent
SEED = ROOT / "benches" / "examples" / "seed-experiment.yaml"
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
    assert all(x.method.backend == "sglang-server" for x in m.groups())  # a launched server
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
    experiment's matrix."""
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
            # never made: 15 - 1 = 14; AR restarts for a bracket after each member that runs:
            # TP1 3 (dflash, b8, b32), TP4 4, TP8 4 = 11
            "cells: 144 to run, 8 skipped; engine starts: 14 + 11 baseline restarts for brackets; ETA *",
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
            "*:*:* -> *:*:*: the service is down * min of the run's *, stopped and started 9 times (its "
            "hooks run around each start)",
        ]
    )
    slots = [ln.split() for ln in on8.stdout.lines if ln.startswith("  ") and " GPUs " in ln]
    on_0 = [s[0] for s in slots if "0" in s[s.index("GPUs") + 1].split(",")]
    assert len(on_0) == 9 and all(g.endswith("-tp8") for g in on_0), on_0
    # the 100k cells: long_context 5 methods x TP4/TP8 = 10 (155 items: 152 cells, 3 bench
    # functions without cells)
    sel = pytester.runpytest(*args, "--collect-only", "-q", "-k", ":ctx100k:")
    sel.stdout.fnmatch_lines(["10/155 tests collected (145 deselected)*"])


def test_the_experiment_raced_on_eight_gpus_within_two_hours(pytester: pytest.Pytester) -> None:
    """The experiment raced on 8 x RTX PRO 6000 by 8 workers: at most 120 min expected and 180
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
            "  full factorial: * min, 144 cells, 14 engine starts + 11 baseline restarts for brackets",
            # expected: b8 and b32 carried (the plan's times put b128 beyond what the decision can
            # separate); ar-tp4 and both kept budgets' TP4 groups start again after the decision
            # its brackets: TP4 3 after the deciding cells' members and 3 after the carried ones,
            # TP1 3 and TP8 3 (dflash and the two carried budgets) = 12
            "  expected: * min (the deciding cells done by * min), 123 cells, 16 engine starts + 12 "
            "baseline restarts for brackets, *; 3 extra "
            "engine start(s) for the two-phase order (ar-tp4, ddtree-b32-tp4, ddtree-b8-tp4)",
            # worst: every budget carried, every cell to its cap
            "  worst case: * min (the deciding cells done by * min), 144 cells, 18 engine starts + 14 "
            "baseline restarts for brackets, *",
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


def test_the_raced_plan_of_the_experiment_adds_up(pytester: pytest.Pytester) -> None:
    """Every count the raced plan prints agrees with the schedule it prints: each family's
    brackets are those of the members that run (ddtree-b128-tp1 cannot start: no bracket after
    it), their total is the sentinels' total, the baseline restarts beside the engine starts are
    the schedule's bracket slots; the GPU-0 window is said for the full factorial's schedule and
    for the expected run's, with the stop/start cycles each holds; the tune line's skipped cells
    are the full factorial's less the expected run's; the expected schedule is given per TP size."""
    import re

    res = pytester.runpytest(*_seed_args(pytester), *PLAN_ON_8, "--specbench-race")
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    slots = [ln.split()[0] for ln in res.stdout.lines if ln.startswith("  ") and " GPUs " in ln]
    brackets = [ln for ln in res.stdout.lines if "(bracket after " in ln and " GPUs " in ln]
    per = re.findall(
        r"^  brackets of (\S+): (\d+) x \(engine start (\d+) s \+ warm-up and rounds (\d+) s\) = (\d+) s, "
        r"one after each of ([^(]+) \(",
        out,
        re.M,
    )
    assert {b: int(n) for b, n, *_ in per} == {"ar-tp4": 4, "ar-tp1": 3, "ar-tp8": 4}, per
    for base, n, _, _, _, members in per:
        assert len(members.strip().split(", ")) == int(n)
        assert sum(1 for ln in brackets if ln.split()[0] == base) == int(n), (base, brackets)
    assert "ddtree-b128-tp1" not in slots and "ddtree-b128-tp1" not in "".join(m for *_, m in per)
    total = re.search(r"^  sentinels in all: ([\d.]+) min", out, re.M)
    assert total and abs(sum(int(t) for *_, t, _ in per) / 60 - float(total.group(1))) < 0.05, out
    # the restarts beside the starts: the schedule's 11 bracket slots
    assert len(brackets) == 11
    assert "; engine starts: 14 + 11 baseline restarts for brackets; ETA " in out
    # the GPU-0 window: the full factorial's (above), then the expected run's
    res.stdout.fnmatch_lines(
        [
            "hooks: after_group, before_group around 9 group(s) of the full factorial's schedule above; the "
            "expected raced run's below (docs/matrix.md)",
            "  GPU 0 (its hooks' service): 9 engine start(s) lease it, *: the service is down * min of the "
            "run's *, stopped and started 9 times (its hooks run around each start)",
            "  the expected run's schedule by TP size: TP1 on GPU * 0:00 -> *; TP4 on GPUs *,*,*,* "
            "0:00 -> *; TP8 on GPUs 0,1,2,3,4,5,6,7 * -> *",
            "  GPUs of the hooks' service in the expected run's schedule:",
            # TP8 expected: ar, dflash and the two carried budgets, a bracket after each member: 7
            "    GPU 0 (its hooks' service): 7 engine start(s) lease it, back to back in one window, *: the "
            "service is down * min of the expected run's *, stopped and started 7 times (its hooks run "
            "around each start)",
        ]
    )
    expected = re.search(r"^  expected: ([\d.]+) min .*, (\d+) cells, ", out, re.M)
    window = re.search(
        r"^    GPU 0 .* one window, ([\d:]+) -> ([\d:]+): the service is down ([\d.]+) min "
        r"of the expected run's ([\d.]+),",
        out,
        re.M,
    )
    tp8 = re.search(r"TP8 on GPUs [\d,]+ ([\d:]+) -> ([\d:]+) \(([\d.]+) min\)", out)
    assert expected and window and tp8, out
    assert window.group(4) == expected.group(1) and window.groups()[:2] == tp8.groups()[:2]
    assert window.group(3) == tp8.group(3)
    # the tune line: the cells skipped are the full factorial's 144 less the expected run's
    skipped = 144 - int(expected.group(2))
    res.stdout.fnmatch_lines(
        [
            "tune ddtree: 3 settings decided on 3 cells (tp=4, workload=decode, output_tokens=256) that "
            "run first; the best 2 run the sweep's other 79 cells' shapes: at most 58 of them, at least "
            f"{skipped} skipped; two-phase order: 3 extra engine starts (ar-tp4, and 2 for the kept "
            "settings among the 3 tuned groups with cells in both phases)",
        ]
    )
    assert skipped == 21


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
