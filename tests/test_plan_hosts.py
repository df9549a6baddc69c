"""The plan's hosts and schedule by hand: the GPU line (memory as NVML reports it, the FLOP/s and
link with where they come from), shards packed on each host's GPUs, skipped cells costing nothing,
and the makespan with tuning / racing beside the full factorial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.deciding import raced_plan
from pytest_specbench.matrix import shards
from pytest_specbench.matrix.cells import Cell
from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.planning import schedule

HERE = Path(__file__).parent
ROOT = HERE.parent
Q27 = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-hybrid")


def _project(pytester: pytest.Pytester, matrix: str) -> Path:
    (pytester.path / "benches").mkdir()
    (pytester.path / "benches" / "test_specbench.py").write_text(
        (ROOT / "benches" / "test_specbench.py").read_text()
    )
    path = pytester.path / "m.yaml"
    path.write_text(matrix)
    return path


MATRIX = f"""
models:
  t: {{path: {Q27}, load_format: dummy}}
methods:
  ar: {{backend: sglang, model: t}}
  mtp:
    backend: sglang
    model: t
    speculative: {{algorithm: eagle, draft_model: t, num_steps: 3}}
tp: [1, 4]
workloads:
  long_context: {{context_tokens: [3000], concurrency: [1], output_tokens: [64], rounds: 1, warmup: 0}}
"""


def test_the_gpu_line_says_what_it_assumed(pytester: pytest.Pytester) -> None:
    m = str(_project(pytester, MATRIX))
    named = pytester.runpytest(
        "benches", "--specbench-matrix", m, "--specbench-plan", "--specbench-gpu", "RTX PRO 6000"
    )
    out = named.stdout.str()
    assert "GPU: RTX PRO 6000, 95.6 GiB, 1.79 TB/s" in out
    assert (
        "memory: NVML's memory.total for this card, 97887 MiB; 500 TFLOP/s (datasheet value for RTX PRO 6000)"
        in out
    )
    assert "link pcie5x16 (datasheet entry for RTX PRO 6000)" in out
    # the 1-token default is an upper bound, and the totals say so
    named.stdout.fnmatch_lines(
        ["*an upper bound for 2 speculative group(s) planned at 1 token per verify step*"]
    )
    # memory and bandwidth without a name: the FLOP/s are an assumption, said so; given, they are used
    bare = ["benches", "--specbench-matrix", m, "--specbench-plan", "--specbench-gpu-memory", "96GiB"]
    bare += ["--specbench-gpu-bandwidth", "1.792"]
    out = pytester.runpytest(*bare).stdout.str()
    assert "989 TFLOP/s (ASSUMED 989 TFLOP/s (H100/H200 class): no GPU name to look up" in out
    assert "give --specbench-gpu-flops or --specbench-gpu NAME" in out
    assert "link nvlink (assumed: what the calibration ran on" in out
    given = pytester.runpytest(
        *bare, "--specbench-gpu-flops", "500", "--specbench-gpu-link", "pcie4x16"
    ).stdout.str()
    assert "500 TFLOP/s (--specbench-gpu-flops); link pcie4x16 (--specbench-gpu-link)" in given
    # the prefill (TTFT) follows the FLOP/s: twice as long at 500 as at 989 (3k tokens, TP1)
    ttft = {}
    for text, key in ((out, "assumed"), (given, "given")):
        line = next(ln for ln in text.splitlines() if "run  long_context-ar-tp1" in ln)
        ttft[key] = float(line.split("TTFT ")[1].split(" s")[0])
    assert 1.6 < ttft["given"] / ttft["assumed"] < 2.0
    bad = pytester.runpytest(*bare, "--specbench-gpu-link", "token-ring")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*'token-ring': expected one of *pcieGxL (e.g. pcie4x16, pcie5x8)*"])


# ------------------------------------------------------------------------------ shards


def _cells(shapes: int, methods: int = 4, tp: tuple[int, ...] = (1,)) -> list[Cell]:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "t"}}
        | {
            f"m{i}": {"backend": "hf", "model": "t", "speculative": {"algorithm": "ngram"}}
            for i in range(1, methods)
        },
        "tp": list(tp),
        "workloads": {"throughput": {"concurrency": list(range(1, shapes + 1))}},
    }
    return parse(doc, "m.yaml").cells()


def _host(pool: int, cells: list[Cell]) -> Any:
    tp = {c.group.id: c.tp for c in cells}

    def host_s(load: dict[str, float]) -> float:  # each group: a 10 s start + its cells, on `pool` GPUs
        jobs = [schedule.Job(g, tp[g], 10.0 + s, tp[g]) for g, s in load.items()]
        return (
            schedule.pack(schedule.longest_first(jobs), tuple(range(pool)), pool).makespan_s if jobs else 0.0
        )

    return host_s


def test_two_hosts_pack_their_shards_and_are_never_slower_than_one_packed_host() -> None:
    """4 methods x 2 shapes, 50 s a cell, 10 s a start, 2 GPUs a host: one host packs the 4 groups
    (110 s each) two at a time: 220 s. Two hosts take a shape (a family) each: 4 groups of 60 s on
    2 GPUs, 120 s. Counted serially per shard, as before, a shard was 4 x 60 = 240 s: slower than
    the one packed host it was compared with."""
    cells = _cells(2)
    baselines = {f"m{i}": "ar" for i in range(1, 4)} | {"ar": None}
    host_s = _host(2, cells)
    packed = shards.split(cells, baselines, 2, lambda c: 50.0, lambda g: 10.0, host_s=host_s, host_gpus=2)
    assert (packed.one_host_s, packed.load_s, packed.packed_on) == (220.0, (120.0, 120.0), 2)
    serial = shards.split(cells, baselines, 2, lambda c: 50.0, lambda g: 10.0)
    assert (serial.one_host_s, serial.load_s) == (440.0, (240.0, 240.0))
    assert "on 2 hosts, packed on 2 GPUs each (one host: 3.7 min)" in shards.describe(packed)[-1]
    # an 8-GPU matrix (TP1/4/8, 4 methods, 6 shapes) over 2 hosts of 8 GPUs: never slower than one
    # host packed, and here much faster
    wide = _cells(6, 4, (1, 4, 8))
    w = shards.split(
        wide, baselines, 2, lambda c: 30.0 * c.concurrency, lambda g: 60.0, host_s=_host(8, wide)
    )
    assert w.makespan_s <= w.one_host_s and w.makespan_s < 0.7 * w.one_host_s
    assert sorted(w.families.values()).count(0) and sorted(w.families.values()).count(1)
    one_family = _cells(1)  # nothing to split: all on shard 0, at the one-host time
    f = shards.split(one_family, baselines, 2, lambda c: 50.0, lambda g: 10.0, host_s=_host(2, one_family))
    assert f.load_s == (f.one_host_s, 0.0) and f.one_host_s == 120.0


def test_skipped_cells_cost_nothing_and_start_no_engine() -> None:
    cells = _cells(2)
    baselines = {f"m{i}": "ar" for i in range(1, 4)} | {"ar": None}
    # m3's cells are skipped (say, they do not fit): its group never starts anywhere
    runs = lambda c: c.method.name != "m3"  # noqa: E731
    s = shards.split(cells, baselines, 2, lambda c: 50.0, lambda g: 10.0, runs=runs)
    assert s.load_s == (3 * 60.0, 3 * 60.0)  # ar, m1, m2: 50 s + a 10 s start each, per shard
    assert all("m3-tp1" not in gs for gs in s.groups)
    before = shards.split(
        cells, baselines, 2, lambda c: None if c.method.name == "m3" else 50.0, lambda g: 10.0
    )
    assert before.load_s == (240.0, 240.0)  # a cell without an ETA still counts at the mean, and starts


# ------------------------------------------------------------------------------ racing / tuning


def test_tuning_runs_the_deciding_cells_in_full_and_keep_settings_elsewhere() -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "t"},
            "ng": {
                "backend": "hf",
                "model": "t",
                "speculative": {"algorithm": "ngram", "num_draft_tokens": [2, 4, 8]},
                "tune": {"at": {"concurrency": 1}, "keep": 1},
            },
        },
        "workloads": {"throughput": {"concurrency": [1, 2, 4]}},
    }
    matrix = parse(doc, "m.yaml")
    cells = matrix.cells()
    tuned = raced_plan.tunes(matrix)
    # a cell's seconds: its draft length x its concurrency (ar: 1 x concurrency)
    d = {"ng-d2": 2, "ng-d4": 4, "ng-d8": 8, "ar": 1}

    def secs(c: Cell) -> float:
        return float(d[c.method.name] * c.concurrency)

    full, expected, worst = raced_plan.variants(cells, secs, tuned)
    assert (len(full.cells), sum(full.cells.values())) == (12, 7 + 14 * 7)  # ar 1+2+4, settings (2+4+8) x 7
    # deciding (c1): every setting, 2 + 4 + 8; elsewhere (c2, c4) one setting: d4 (median), d8 (worst)
    assert sorted(expected.cells) == sorted(
        [c.id for c in cells if c.method.name == "ar" or c.concurrency == 1 or c.method.name == "ng-d4"]
    )
    assert sum(expected.cells.values()) == 7 + 14 + 4 * 6
    assert sum(worst.cells.values()) == 7 + 14 + 8 * 6
    assert expected.extra_starts == ("ng-d4-tp1",)  # its c1 cell runs first, c2/c4 after the decision
    # the plan reads the tune the matrix parsed: a bad one never reaches it
    ng = doc["methods"]["ng"]
    with pytest.raises(MatrixError, match=r"m.yaml: methods.ng.tune.keep: expected a whole number >= 1"):
        parse(
            {**doc, "methods": {**doc["methods"], "ng": {**ng, "tune": {"at": {"tp": 1}, "keep": 0}}}},
            "m.yaml",
        )
    with pytest.raises(MatrixError, match=r"m.yaml: methods.ng.tune"):
        parse({**doc, "methods": {**doc["methods"], "ng": {**ng, "tune": {"keep": 2}}}}, "m.yaml")


def test_the_plan_prints_the_tuned_makespans_beside_the_full_factorial(pytester: pytest.Pytester) -> None:
    doc = """
models:
  t: embedded:tiny
methods:
  ar: {backend: hf, model: t}
  ng:
    backend: hf
    model: t
    speculative: {algorithm: ngram, num_draft_tokens: [2, 4, 8]}
    tune: {at: {concurrency: 1}, keep: 1}
workloads:
  throughput: {concurrency: [1, 4], output_tokens: [32], requests: 4, rounds: 1, warmup: 0}
"""
    m = str(_project(pytester, doc))
    res = pytester.runpytest("benches", "--specbench-matrix", m, "--specbench-plan")
    out = res.stdout.str()
    assert (
        "racing/tuning (ng: decided on cells with concurrency=1, best 1 carried), one process, its groups "
        "one after another:" in out
    )
    lines = {ln.split(":")[0].strip(): ln for ln in out.splitlines() if ln.startswith("  ") and " min" in ln}
    assert "8 cells, 4 engine starts" in lines["full factorial"]
    # the race's order: the deciding cells (ng at c1) and the baseline's at their shape first, so ar-tp1
    # and the kept setting start again for their other cells
    assert "6 cells, 6 engine starts, " in lines["expected"]
    assert "2 extra engine start(s) for the two-phase order (ar-tp1, ng-d4-tp1)" in lines["expected"]
    assert "6 cells" in lines["worst case"]
