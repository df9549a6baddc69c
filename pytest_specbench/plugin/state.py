"""Per-process plugin state: the matrix, the live engine, what was measured, the plan.

Kept apart from the hooks and fixtures (hooks.py, collection.py, fixtures.py). One live engine per
process: starting a group's engine stops the previous one first. Beside it, on backends whose
engines share a process (``Backend.interleave``: hf), one instance per baseline group, whose
rounds are interleaved with the cells that compare with it (``reference_for``); they stop at the
session's end.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..engines import BACKENDS, forced_env
from ..matrix.cells import EngineGroup, Matrix
from ..matrix.interleave import interleaved_baselines
from . import group_hooks
from .references import BaselineInstances, EngineStartTimeout, _alarm, interleaving_backends, jsonable  # noqa: F401

STATE = pytest.StashKey["SpecbenchState"]()
DEFAULT_MATRIX = "benches/specbench.yaml"
RESULT_PROP = "specbench_result"
ENGINE_PROP = "specbench_engine"
FAILED_PROP = "specbench_failed"
SPLIT_PROP = "specbench_shard_split"  # a worker's shard split, for the controller (sharding.py)
PARTIAL = pytest.StashKey[dict]()  # a failed cell's metrics, for its failed_cells entry
TIMEOUT_GRACE_S = 60.0  # pytest-timeout fires this long after a cell's timeout_s


@dataclass
class SpecbenchState(BaselineInstances):
    config: pytest.Config
    matrix: Matrix | None = None
    live: tuple[EngineGroup, Any] | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)  # engine events, not yet on a report
    events_sent: int = 0  # engine events put on reports by this process (their "seq")
    events_seen: set[str] = field(default_factory=set)  # controller: seqs of events taken
    # controller side
    results: list[dict[str, Any]] = field(default_factory=list)
    engine_events: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    doc: dict[str, Any] | None = None
    _cells_by_id: dict[str, Any] | None = None  # cell_of's map, made at its first call
    write_errors: list[str] = field(default_factory=list)  # failed writes of the JSON, in order
    crashed_workers: list[str] = field(default_factory=list)  # xdist's words for each crashed worker
    written_to: str | None = None  # where the last successful write went (None: the last failed)
    gpus: tuple[int, ...] | None = None  # the run's GPU pool (None: unknown, no NVML)
    gpu_notes: list[str] = field(default_factory=list)
    gpu_unavailable: list[str] = field(default_factory=list)  # GPUs left out of the pool, and why
    gpu_busy: list[dict[str, Any]] = field(default_factory=list)  # busy GPUs of the pool (busy_gpus.py)
    gpu_baseline: dict[int, int] = field(default_factory=dict)  # MiB used per GPU at the start
    leases: Any = None  # leases.LeasePool of the run (None: GPUs unknown)
    lease: Any = None  # leases.Lease of the live engine
    lease_dir_owned: bool = False  # this process created the lease directory (removes it)
    next_group: EngineGroup | None = None  # the group of the item being set up (its engine starts next)
    # the drift family scope of the item being set up (sentinel.scope_of_item), the live lease's,
    # and the GPU set each scope started on: a family's starts keep their GPU set
    next_scope: str | None = None
    lease_scope: str | None = None
    scope_gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the live engine when it is the first on its GPU set (workloads.kinds.warm_machine warms the machine)
    cold_engine: Any = None
    host_warm: bool = False  # a GPU engine has started in this process (GPUs not leased)
    plan_workers: int | None = None  # --specbench-plan under -n K: K
    cells_run: dict[str, int] = field(default_factory=dict)  # per group, for --specbench-kill-engine
    torn_down: dict[str, str] = field(default_factory=dict)  # group -> why its engine was abandoned
    machine_info: dict[str, Any] | None = None
    commit_info: dict[str, Any] | None = None
    gpu_budget: Any = None  # plan.GPUBudget: NVML or --specbench-gpu-memory
    gpus_at_start: list[dict[str, Any]] | None = None  # NVML before any engine (machine_info)
    plan: Any = None  # plan.Plan of every cell of the matrix
    previous_doc: Any = None  # the results JSON --specbench-plan-from read (None without one)
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)  # --specbench-resume: id -> result
    saved_environ: dict[str, str] | None = None  # os.environ before the live engine's start
    interrupted: dict[str, Any] | None = None  # SIGTERM / Ctrl-C during a cell: which, and why
    signal: str | None = None  # the signal that stopped the run outside a cell (SIGTERM)
    running: dict[str, None] = field(default_factory=dict)  # controller: nodeids started, not finished
    resume_refused: list[str] = field(default_factory=list)  # --specbench-resume: cells not copied, why
    resumed_groups: list[dict[str, Any]] = field(default_factory=list)  # their engines, as recorded then
    shard: Any = None  # shards.Shard this machine runs (None: every selected cell)
    shard_split: Any = None  # shards.Split of the selected cells (with --specbench-shard(s))
    shard_count: int | None = None  # N of --specbench-shard I/N or --specbench-shards N
    shard_doc: Any = None  # under -n: the split as the workers computed it (sharding.receive)
    _provenance: dict[str, Any] | None = None
    references: dict[str, Any] = field(default_factory=dict)  # baseline group id -> its engine here
    # a resident baseline's GPUs and the MiB it holds on each (plugin/resident.py)
    reference_gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    reference_held: dict[str, dict[int, int]] = field(default_factory=dict)
    reference_failed: dict[str, str] = field(default_factory=dict)  # baseline group id -> why
    stopped: list[Any] = field(default_factory=list)  # the engines stopped (stop_engine once each)
    sentinels: list[dict[str, Any]] = field(default_factory=list)  # controller: drift sentinels run
    plot_error: str | None = None  # --specbench-plots failed (the JSON was written)
    plots_not_made: list[tuple[str, str]] = field(default_factory=list)  # --specbench-plots: (plot, why)
    hook_errors: list[str] = field(default_factory=list)  # the matrix's after_run hook failed: why
    t_start: float = field(default_factory=time.monotonic)  # the session's start (wall vs plan)
    race: Any = None  # race.Race under --specbench-race
    race_store_owned: bool = False  # this process created the race's decision store (removes it)
    engine_warmed: Any = None  # the engine last warmed at its group's shapes (a restarted group warms again)

    def provenance(self) -> dict[str, Any]:
        """Where and from what a cell is measured: the commit (pytest-benchmark's commit info) and
        the machine (GPU names, driver, CPU, core count, backend versions). Resume compares them."""
        if self._provenance is None:
            import platform

            from ..gpus.inventory import driver_info

            commit = self.config.hook.pytest_benchmark_generate_commit_info(config=self.config) or {}
            versions: dict[str, str | None] = {}
            for name in ("torch", "transformers", "sglang"):
                from importlib.metadata import PackageNotFoundError, version

                try:
                    versions[name] = version(name)
                except PackageNotFoundError:
                    versions[name] = None
            import socket

            self._provenance = {
                "host": socket.gethostname(),  # not compared by resume: hosts of one kind are alike
                **({"shard": str(self.shard)} if self.shard is not None else {}),
                "commit": commit.get("id"),
                "dirty": commit.get("dirty"),
                "machine": {
                    "gpus": [g["name"] for g in self.gpus_at_start or []],
                    "driver": driver_info().get("driver") if self.gpus_at_start else None,
                    "cpu": _cpu_model() or platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(),
                    "versions": versions,
                },
            }
        return self._provenance

    def cell_of(self, nodeid: str) -> Any:
        """The matrix cell a bench item's node id names (``...[cell-id]``), or None."""
        if self._cells_by_id is None:
            self._cells_by_id = {c.id: c for c in self.matrix.cells()} if self.matrix is not None else {}
        return self._cells_by_id.get(nodeid.rpartition("[")[2].rstrip("]")) if "[" in nodeid else None

    def get_plan(self) -> Any:
        if self.plan is None and self.matrix is not None:
            from ..planning import plan

            prev = None
            path = self.config.getoption("specbench_plan_from")
            if path:
                import json

                try:
                    prev = json.loads(Path(path).read_text())
                except (OSError, ValueError) as e:
                    raise pytest.UsageError(
                        f"--specbench-plan-from {path}: cannot read a results JSON: {e}"
                    ) from None
            gpu_backends = frozenset(n for n, b in BACKENDS.items() if b.gpu)
            cells = self.matrix.cells()
            interleaved = (
                {}
                if self.config.getoption("specbench_no_interleave", False)
                else self.not_bracketed(
                    interleaved_baselines(cells, self.matrix.baselines(), interleaving_backends())
                )
            )
            self.previous_doc = prev
            self.plan = plan.make_plan(
                cells,
                self.gpu_budget,
                prev,
                gpu_backends,
                self.config.getoption("specbench_timeout", None),
                interleaved,
                previous_source=str(path or ""),
            )
            self.note_residency(self.plan)  # per member group: its baseline beside it, or bracketed
            for c in cells:  # wider than the run's GPU pool: skipped, and not in the plan's ETA
                why = self.gpu_skip_reason(c)
                cp = self.plan.cells.get(c.id)
                if why and cp is not None and cp.feasible:
                    cp.feasible, cp.reason = False, why
        return self.plan

    def gpu_skip_reason(self, cell: Any) -> str | None:
        """A cell of a GPU backend needing more GPUs than the pool has, e.g. "needs 8 GPUs; 7
        free: GPU 0 busy, 56 GB used by another process"."""
        if self.gpus is None or not BACKENDS[cell.method.backend].gpu or cell.tp <= len(self.gpus):
            return None
        why = "; ".join(self.gpu_unavailable)
        return f"needs {cell.tp} GPUs; {len(self.gpus)} free" + (f": {why}" if why else "")

    @property
    def worker(self) -> str:
        return os.environ.get("PYTEST_XDIST_WORKER", "main")

    def start_engine(self, group: EngineGroup) -> Any:
        if self.live is not None:  # one live engine per process, whatever pytest's order
            self.stop_engine(*self.live)
        ev: dict[str, Any] = {"group": group.id, "worker": self.worker, "backend": group.method.backend}
        gp = self.get_plan().groups.get(group.id)
        if gp is not None:  # the planner's numbers next to what the engine reports
            ev["planned"] = {
                k: getattr(gp, k)
                for k in (
                    "weight_bytes_per_gpu",
                    "kv_bytes_per_token",
                    "kv_tokens_capacity",
                    "state_pool_bytes_per_gpu",
                    "budget_bytes_per_gpu",
                    "mem_fraction_static",
                    "context_length",
                    "notes",
                )
            }
        lease = None
        if self.leases is not None and BACKENDS[group.method.backend].gpu:
            try:  # waits while the GPUs are taken by other engines of the run
                keep = self.scope_gpus.get(self.next_scope or "", ())
                lease = self.leases.acquire(group.id, group.tp, self.worker, keep=keep)
            except BaseException as e:
                ev.update(ok=False, start_s=0.0, error=f"{type(e).__name__}: {e}")
                self.pending.append(ev)
                raise
            ev["lease"] = lease.event()
            self.lease_scope = self.next_scope
            if self.next_scope:
                self.scope_gpus[self.next_scope] = lease.gpus
        leased = lease.gpus if lease is not None else ()
        token = lease.token if lease is not None else ""
        t0 = time.perf_counter()
        try:
            group_hooks.before(self, group, leased, ev, token)  # a failure fails this group's start
            if leased:  # the previous holder's memory must be back before this engine sizes its pools
                from ..gpus.inventory import wait_released

                keep = self._baseline_group_id(group)  # resident on other GPUs, or another's baseline
                self.close_references(lambda gid, gpus: gpus != leased or gid not in (keep, group.id))
                ev["gpu_used_mib_before"] = {
                    str(k): v
                    for k, v in wait_released(leased, self.resident_baseline(), timeout_s=90).items()
                }
                group = self._beside(group, leased, ev)
            t0 = time.perf_counter()
            # the method's env for this engine only: the environment is restored when it stops (an
            # engine may also write variables of its own into os.environ, as sglang does)
            self.saved_environ = dict(os.environ)
            os.environ.update(dict(group.method.env))
            os.environ.update(forced_env(group.method))  # a forced accept length (SGLang)
            if lease is not None:  # this start's GPUs (a launched server inherits them)
                from ..gpus.inventory import pin

                pin(leased)
            ev["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
            # provenance: every SGLANG_* variable the engine starts with (the method's env, a
            # forced accept length, the host's own), so two groups can be diffed
            ev["sglang_env"] = {
                k: v
                for k, v in sorted(os.environ.items())
                if k.startswith("SGLANG_") or k in dict(group.method.env)
            }
            with _alarm(self.config.getoption("specbench_start_timeout"), f"{group.id}: engine start"):
                eng = self.config.hook.pytest_specbench_make_engine(config=self.config, group=group)
        except BaseException as e:
            ev.update(ok=False, start_s=time.perf_counter() - t0, error=f"{type(e).__name__}: {e}")
            self._restore_environ()
            group_hooks.after(self, group, leased, ev, False, token)  # also when the group failed
            if lease is not None:
                ev["lease"].update(self.leases.release(lease))
            self.pending.append(ev)
            raise
        ev.update(ok=True, start_s=time.perf_counter() - t0, info=jsonable(getattr(eng, "info", {})))
        if leased:  # what the engine holds once started (weights, KV, graphs, CUDA context)
            from ..gpus.inventory import inventory

            ev["gpu_used_mib_after_start"] = {
                str(g.index): g.memory_used_mib for g in inventory() if g.index in leased
            }
        # the first engine on its GPU set (leased; else this process's first GPU engine) warms
        # the machine before any timed round (workloads/kinds.py warm_machine)
        b = BACKENDS[group.method.backend]
        cold = b.gpu and not b.external and (lease.cold if lease is not None else not self.host_warm)
        self.host_warm = self.host_warm or (b.gpu and not b.external)
        self.cold_engine = eng if cold else None
        if cold:
            ev["machine_warm"] = True
        self.pending.append(ev)
        self.live = (group, eng)
        self.lease = lease
        return eng

    def _restore_environ(self) -> None:
        saved, self.saved_environ = self.saved_environ, None
        if saved is None:
            return
        for k in set(os.environ) - set(saved):
            del os.environ[k]
        os.environ.update(saved)

    def abandon_engine(self, group: EngineGroup, why: str) -> None:
        """A hung engine: its group's remaining cells fail at once; its processes are killed now."""
        self.torn_down[group.id] = why
        if self.live is not None and self.live[0] == group:
            abandon = getattr(self.live[1], "abandon", None)
            if abandon is not None:
                abandon(why)

    def stop_other_engine(self, group: EngineGroup) -> None:
        """Stop the live engine when it is another group's (its GPUs back to the pool), e.g.
        before this process waits for other workers' cells; its fixture's teardown then finds it
        stopped."""
        if self.live is not None and self.live[0] != group:
            self.stop_engine(*self.live)

    def stop_engine(self, group: EngineGroup, eng: Any) -> None:
        if any(e is eng for e in self.stopped):  # stopped already (stop_other_engine): nothing twice
            return
        self.stopped.append(eng)
        lease = None
        if self.live is not None and self.live[1] is eng:
            self.live = None
            lease, self.lease = self.lease, None
        if lease is not None and self.worker != "main":  # under -n: another worker may lease these GPUs next
            self.close_references(lambda gid, gpus: bool(set(gpus) & set(lease.gpus)))
        t0 = time.perf_counter()
        ev: dict[str, Any] = {"group": group.id, "worker": self.worker, "event": "stop"}
        try:
            eng.close()
        finally:
            self._restore_environ()
            ev["stop_s"] = time.perf_counter() - t0
            ok = group.id not in self.torn_down
            leased = lease.gpus if lease is not None else ()
            group_hooks.after(self, group, leased, ev, ok, lease.token if lease is not None else "")
            if lease is not None:  # GPU memory must be back after shutdown (NVML), then they go back
                from ..gpus.inventory import wait_released

                ev["gpu_used_mib_after"] = {
                    str(k): v for k, v in wait_released(lease.gpus, self.resident_baseline()).items()
                }
                nxt = self.next_group  # queued in the same step, keeping its place in the order
                # (and its GPU set: the next start of the same drift family scope)
                same = self.next_scope is not None and self.next_scope == self.lease_scope
                then = (
                    (nxt.id, nxt.tp, lease.gpus if same else ())
                    if nxt is not None and nxt != group and BACKENDS[nxt.method.backend].gpu
                    else None
                )
                ev["lease"] = self.leases.release(lease, then)
            self.pending.append(ev)


def _cpu_model() -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo), e.g. "AMD EPYC 9654 96-Core Processor"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def get_state(config: pytest.Config) -> SpecbenchState:
    return config.stash[STATE]
