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
    # methods at TP1: ar, dflash, ddtree b8..b256 (6) = 8, and dflash-forced a2/a4/a8 (TP1 only);
    # at TP4 and TP8 the same 8 (the tuning at TP1 keeps two budgets when racing)
    # long_context: 3 contexts x 3 concurrencies, no 100k at TP1:
    #   TP1 (8 + 3) x 2 x 3 = 66, TP4 8 x 3 x 3 = 72, TP8 72
    # ttft (ar, dflash, ddtree): TP1 8 x 2 contexts = 16, TP4 8 x 3 = 24, TP8 24
    # agentic (ar, dflash, ddtree): 8 x 2 scenarios x 2 concurrencies x 3 TP sizes = 96
    assert by == {"long_context": 66 + 72 + 72, "ttft": 16 + 24 + 24, "agentic": 96}
    assert len(m.groups()) == 8 * 3 + 3
    g = {x.id: x for x in m.groups()}
    assert dict(g["ddtree-b64-tp1"].method.engine_args) == {
        "speculative_ddtree_budget": 64,
        "mem_fraction_static": 0.80,
        "context_length": 32768,
    }
    assert dict(g["ddtree-b64-tp8"].method.engine_args)["mem_fraction_static"] == 0.85
    assert dict(g["ar-tp4"].method.engine_args) == {"mem_fraction_static": 0.85, "context_length": 131072}
    assert g["ar-tp4"].method.name == g["ar-tp1"].method.name == "ar"  # the TP view lines it up
    assert all(dict(x.method.env) == {"SGLANG_ENABLE_SPEC_V2": "1"} for x in m.groups())
    assert all(set(dict(x.method.hooks)) == {"before_group", "after_group"} for x in m.groups())
    forced = g["dflash-forced-a4-tp1"].method.speculative
    assert forced.algorithm == "dflash" and forced.simulate_accept_length == 4.0
    assert "dflash-forced-a4-tp4" not in g
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
            # DDTREE budgets 64/128/256 cannot start at TP1 (draft-token states, docs/plan.md):
            # 3 settings x 12 TP1 cells skipped, their 3 engine starts never made
            "cells: 334 to run, 36 skipped; engine starts: 24; ETA *",
        ]
    )
    out = res.stdout.str()
    assert "long_context-ar-tp1-c1-ctx100k" not in out and "long_context-ar-tp4-c1-ctx100k-out256" in out
    # GPU 0's live service: the plan says how long the hooks keep it stopped in the packed schedule
    on8 = pytester.runpytest(*args, *PLAN_ON_8)
    on8.stdout.fnmatch_lines(
        [
            "hooks: after_group, before_group around 24 group(s) of the schedule (docs/matrix.md)",
            "  GPU 0: 16 hooked group(s) between 0:00 and *: a service their hooks stop while they hold "
            "GPU 0 is down * min of those * min",
        ]
    )
    # the 100k cells: long_context 8 methods x 3 concurrencies x TP4/TP8 = 48, ttft 8 x 2 = 16 (376
    # items: 370 cells, 3 drift sentinels, 3 bench functions without cells)
    sel = pytester.runpytest(*args, "--collect-only", "-q", "-k", ":ctx100k:")
    sel.stdout.fnmatch_lines(["64/376 tests collected (312 deselected)*"])


def test_the_shard_split_packs_drift_families_as_the_schedule_does(pytester: pytest.Pytester) -> None:
    """On 8 x RTX PRO 6000 with 2 hosts: each host packs its groups with every drift family (a
    baseline and the methods compared with it, at one TP: back to back, then its sentinel) as one
    job, as the run's packed schedule does, so the split's "one host" figure is the schedule's
    makespan (1169.2 min; packing the families apart would say 1011.4), and two hosts are never
    slower than one."""
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
