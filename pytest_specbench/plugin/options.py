"""The plugin's command-line options and ini keys (``pytest_addoption``) and their value parsers.
Registered through hooks.py (the plugin's entry point), which imports the hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from .state import DEFAULT_MATRIX


def _existing_file(value: str) -> str:
    if not Path(value).is_file():
        import argparse

        raise argparse.ArgumentTypeError(f"matrix file {value!r} does not exist")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specbench", "speculative-decoding benchmarks (pytest-specbench)")
    g.addoption(
        "--specbench-matrix",
        metavar="PATH",
        type=_existing_file,
        default=None,
        help="benchmark matrix YAML. Default: ini specbench_matrix, else "
        f"{DEFAULT_MATRIX!r} under the rootdir when it exists.",
    )
    g.addoption(
        "--specbench-gpus",
        metavar="IDS",
        type=_gpu_list,
        default=None,
        help="comma-separated GPU indices the run may use (GPU backends). Default: the GPUs of "
        "CUDA_VISIBLE_DEVICES when it lists indices, else every GPU with no compute process and "
        ">= 90%% memory free. Every engine start leases its TP's worth of them from one pool "
        "shared by all -n workers.",
    )
    g.addoption(
        "--specbench-allow-busy-gpus",
        metavar="IDS",
        type=_busy_gpu_list,
        default=None,
        help="lease these GPUs although other processes hold memory on them (a busy GPU of the pool is "
        "refused otherwise, unless the matrix's hooks stop its service: hooks: {gpus: [0], ...}); "
        "each is flagged on the screen and in the JSON (specbench.gpus_busy). Default: none",
    )
    g.addoption(
        "--specbench-log-dir",
        metavar="DIR",
        default="specbench-logs",
        help="engine logs, one file per group. Default: %(default)r",
    )
    g.addoption(
        "--specbench-kill-engine",
        metavar="GROUP@N",
        type=_kill_spec,
        default=None,
        help="testing aid: SIGKILL the engine of GROUP (e.g. ar-tp1) before its N-th cell "
        "(0-based) to check that a crash fails only that group. Default: off",
    )
    g.addoption(
        "--specbench-hang-engine",
        metavar="GROUP@N",
        type=_kill_spec,
        default=None,
        help="testing aid: SIGSTOP the scheduler of GROUP before its N-th cell, so the cell "
        "hangs until pytest-timeout fails it and the engine is torn down. Default: off",
    )
    g.addoption(
        "--specbench-timeout",
        metavar="S",
        type=_seconds,
        default=None,
        help="every cell's time limit in seconds, overriding the workloads' timeout_s (enforced in "
        "the engine's event loop; a cell over it fails and its engine is torn down). pytest-timeout's "
        "--timeout would also cover engine starts. Default: each workload's timeout_s",
    )
    g.addoption(
        "--specbench-start-timeout",
        metavar="S",
        type=_seconds,
        default=900.0,
        help="an engine start taking longer fails its group's cells (the run goes on). "
        "Cells have their own limit (the workload's timeout_s or --specbench-timeout), "
        "engine start excluded. Default: %(default)s",
    )
    g.addoption(
        "--specbench-plan",
        action="store_true",
        default=False,
        help="print the feasibility plan (groups, cells, per-GPU weights and KV capacity, skip "
        "reasons, ETA) and exit without starting any engine",
    )
    g.addoption(
        "--specbench-shard",
        metavar="I/N",
        default=None,
        help="run shard I of N (0 <= I < N) of the selected cells: families (a baseline and the methods "
        "compared with it, at one TP) balanced by the plan's ETA; without it, Kubernetes' "
        "JOB_COMPLETION_INDEX with SPECBENCH_SHARDS, or SLURM's SLURM_ARRAY_TASK_ID/_COUNT, set it "
        "(docs/scale.md); merge the shards' JSONs with python -m pytest_specbench.report merge",
    )
    g.addoption(
        "--specbench-shards",
        metavar="N",
        type=int,
        default=None,
        help="with --specbench-plan: show the split into N shards (each shard's groups, ETA, the makespan)",
    )
    g.addoption(
        "--specbench-plan-json",
        metavar="PATH",
        default=None,
        help="write the plan as JSON to PATH (with or without --specbench-plan)",
    )
    g.addoption(
        "--specbench-gpu-memory",
        metavar="SIZE",
        type=_memory,
        default=None,
        help="plan for GPUs of SIZE memory (e.g. 80GiB) instead of what NVML reports; "
        "lets a machine without GPUs plan a GPU matrix",
    )
    g.addoption(
        "--specbench-gpu",
        metavar="NAME",
        type=_gpu_name,
        default=None,
        help="plan for this GPU (its memory, bandwidth and FLOP/s from the datasheet table: "
        "planning/gpu_specs.py), e.g. 'RTX PRO 6000', B200, H100, MI300X; lets a machine without "
        "NVML plan a GPU matrix. --specbench-gpu-memory / -bandwidth override its figures",
    )
    g.addoption(
        "--specbench-gpu-flops",
        metavar="TFLOP/S",
        type=_tflops,
        default=None,
        help="dense BF16 TFLOP/s per GPU for prefill and compute-bound steps. Default: the datasheet "
        "table by GPU name; a plan without a known GPU says what it assumed",
    )
    g.addoption(
        "--specbench-gpu-link",
        metavar="LINK",
        type=_link,
        default=None,
        help="the GPUs' interconnect for the all-reduce term: nvlink, nvlink3/4/5, xgmi, or pcieGxL "
        "(pcie4x16, pcie5x16, ...). Default: NVML's topology of the chosen GPUs, else the datasheet "
        "entry of --specbench-gpu, else nvlink",
    )
    g.addoption(
        "--specbench-plots",
        metavar="DIR",
        default=None,
        help="at the end of the run, write the run's plots (PNG + CSV each) and an index.md there",
    )
    g.addoption(
        "--specbench-summary",
        metavar="KIND",
        choices=("screen", "full"),
        default="screen",
        help="the end-of-run summary: 'screen' (about 40 lines: the decision per shape, what was "
        "withheld and why, where the full tables are) or 'full' (every table, per-cell reason and "
        "warning). Default: %(default)r",
    )
    g.addoption(
        "--specbench-gpu-bandwidth",
        metavar="TB/S",
        type=_bandwidth,
        default=None,
        help="HBM bandwidth per GPU in TB/s for the roofline and decode ETAs. Default: NVML's memory "
        "bus width x max memory clock, else a datasheet table by GPU name, else unknown",
    )
    g.addoption(
        "--specbench-plan-from",
        metavar="PATH",
        default=None,
        help="a previous results JSON: the plan's ETA uses its measured cell times",
    )
    g.addoption(
        "--specbench-resume",
        metavar="PATH",
        default=None,
        help="a results JSON of an earlier run that stopped halfway: its measured cells (same id and "
        "definition: method, model, engine args, workload) are skipped and copied into this run's JSON; "
        "failed, missing and changed cells run",
    )
    g.addoption(
        "--specbench-resume-any-machine",
        action="store_true",
        default=False,
        help="with --specbench-resume: also copy cells measured on another machine (GPU names, driver, "
        "CPU, torch/transformers/sglang versions); they are marked resumed_from_other_machine. "
        "Default: such cells run again",
    )
    g.addoption(
        "--specbench-no-interleave",
        action="store_true",
        default=False,
        help="on backends whose engines share one process (hf), do not run each cell's baseline "
        "interleaved with it (a second engine, round by round); the speedup then divides by the "
        "baseline's own cell, measured minutes apart",
    )
    g.addoption(
        "--specbench-no-sentinel",
        action="store_true",
        default=False,
        help="where a baseline is not interleaved (sglang; hf with --specbench-no-interleave), do "
        "not re-run its first shape after the groups compared with it (the drift sentinel), nor "
        "keep those groups together; no verdict is then withheld for drift. Default: sentinels run",
    )
    g.addoption(
        "--specbench-brackets",
        action="store_true",
        default=False,
        help="where a baseline is not interleaved, re-run its first shape after each member's group "
        "(a bracket: one engine start and the sentinel's warm-up and 3-5 timed rounds each), not "
        "once after all, and widen each "
        'member\'s intervals by the drift its two brackets bound (docs/metrics.md "Brackets"). '
        "Members whose baseline does not fit beside them on their GPUs are always bracketed",
    )
    g.addoption(
        "--specbench-race",
        action="store_true",
        default=False,
        help="decide rather than enumerate: a cell stops once its verdict against its baseline is "
        "settled (at least 3 rounds, at most max_rounds or rounds), a method whose interval "
        "against its shape's leader lies wholly below it stops and skips its costlier shapes, and "
        "a swept method's `tune` keeps only its best settings (docs/metrics.md \"Early stopping and "
        'racing"); with -n, every worker races on its GPU set and one decision state is shared',
    )
    g.addoption(
        "--specbench-race-drift",
        type=float,
        default=None,
        metavar="FRACTION",
        help="racing where a cell's baseline is not beside it (measured in another engine group): "
        "drop it only when its interval against the leader, widened by this drift between groups "
        "(e.g. 0.15), still lies below it; by default such a cell is never dropped (its verdict is "
        "read after the run, with the drift sentinel's)",
    )
    g.addoption(
        "--specbench-race-delta",
        type=float,
        default=None,
        metavar="FRACTION",
        help="the race's indifference zone: a member more than this behind its shape's leader, with "
        "the run's confidence, is dropped; one that cannot be is kept and said to be within it (a "
        "tuned sweep likewise; default 0.02, or the matrix's race: {delta: ...}; docs/metrics.md "
        '"Racing with an indifference zone")',
    )
    parser.addini("specbench_matrix", "benchmark matrix YAML (relative to the rootdir)", default=None)


def _gpu_list(value: str) -> tuple[int, ...]:
    import argparse

    from ..gpus.inventory import parse_gpu_list

    try:
        return parse_gpu_list(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _busy_gpu_list(value: str) -> tuple[int, ...]:
    import argparse

    from ..gpus.inventory import parse_gpu_list

    try:
        return parse_gpu_list(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            str(e).replace("--specbench-gpus", "--specbench-allow-busy-gpus")
        ) from None


def _memory(value: str) -> int:
    import argparse

    from ..planning.plan import parse_memory

    try:
        return parse_memory(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seconds(value: str) -> float:
    """A time limit: a finite number of seconds > 0 (a week at most)."""
    import argparse
    import math

    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 7 * 24 * 3600):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0 (at most a week); got {value!r}")
    return v


def _bandwidth(value: str) -> float:
    import argparse

    try:
        v = float(value.removesuffix("TB/s").removesuffix("TB/S"))
    except ValueError:
        v = -1.0
    if not 0 < v < 100:
        raise argparse.ArgumentTypeError(f"expected TB/s per GPU, e.g. 4.8 for an H200; got {value!r}")
    return v * 1e12


def _tflops(value: str) -> float:
    import argparse

    try:
        v = float(value.upper().removesuffix("TFLOP/S").removesuffix("T"))
    except ValueError:
        v = -1.0
    if not 0 < v < 100000:
        raise argparse.ArgumentTypeError(
            f"expected dense BF16 TFLOP/s per GPU, e.g. 989 for an H100; got {value!r}"
        )
    return v * 1e12


def _link(value: str) -> object:
    import argparse

    from ..planning.interconnect import parse

    try:
        return parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _kill_spec(value: str) -> tuple[str, int]:
    import argparse

    group, _, n = value.rpartition("@")
    if not group or not n.isdigit():
        raise argparse.ArgumentTypeError(f"expected GROUP@N like ar-tp1@1; got {value!r}")
    return group, int(n)


# ------------------------------------------------------------------------------ configure


def _gpu_name(value: str) -> str:
    import argparse

    from ..planning.gpu_specs import names, spec_for

    if spec_for(value) is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not in the GPU table; known: {', '.join(names())}")
    return value
