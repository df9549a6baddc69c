"""The baseline instances a process runs beside its groups' engines (docs/metrics.md "Interleaved
baseline"): in the same process on the CPU (hf), or, on a backend registered ``resident``
(sglang-server), a launched server on the live group's GPUs sized beside it (plugin/resident.py).
Mixed into the session state (state.py), whose fields it reads: ``references``,
``reference_gpus``, ``reference_held``, ``reference_failed``, ``lease``, ``live``,
``saved_environ``, ``matrix``, ``config``, ``pending``, ``gpu_baseline``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..engines import BACKENDS, forced_env
from ..matrix.cells import EngineGroup
from ..matrix.interleave import interleaves


class EngineStartTimeout(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: float | None, what: str) -> Iterator[None]:
    """SIGALRM after ``seconds`` (main thread only): a start that hangs fails its group.

    An alarm already set (pytest-timeout's ``--timeout`` covering the item) keeps running: when
    it is due first, this one is not set at all; otherwise it is set again afterwards with the
    time it had left, so the first cell of a group stays under ``--timeout``."""
    import signal
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:  # the outer limit comes first: it covers the start
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise EngineStartTimeout(f"{what} took longer than {seconds:g} s (--specbench-start-timeout)")

    t0 = time.monotonic()
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - t0), 0.001))


def interleaving_backends() -> frozenset[str]:
    """Backends whose baseline can run beside a member, as registered now: in one process
    (Backend.interleave: hf) or on the member's GPUs (Backend.resident: sglang-server)."""
    return frozenset(n for n, b in BACKENDS.items() if b.interleave or b.resident)


def jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is None or type(v) in (str, int, float, bool):  # exact types: execnet rejects subclasses
        return v
    if isinstance(v, (int, float)):
        return bool(v) if isinstance(v, bool) else int(v) if isinstance(v, int) else float(v)
    return str(v)


class BaselineInstances:
    # the session state's fields this mixin reads and writes (declared there)
    config: Any
    matrix: Any
    lease: Any
    live: Any
    pending: list[dict[str, Any]]
    saved_environ: dict[str, str] | None
    gpu_baseline: dict[int, int]
    references: dict[str, Any]
    reference_gpus: dict[str, tuple[int, ...]]
    reference_held: dict[str, dict[int, int]]
    reference_failed: dict[str, str]

    _residency: tuple[Any, dict[str, Any]] | None = None  # (the GPU budget it was sized for, it)

    def residency(self) -> dict[str, Any]:
        """Member group id -> its ``planning.residency.Residency``: whether its baseline fits
        beside it on its GPUs (resident backends only; none under --specbench-no-interleave).
        The plan prints it and the run starts resident baselines by it: one rule."""
        if self.matrix is None or self.config.getoption("specbench_no_interleave", False):
            return {}
        if self._residency is None or self._residency[0] is not self.gpu_budget:
            from ..planning.residency import resident_members

            resident = frozenset(n for n, b in BACKENDS.items() if b.resident)
            gpu_backends = frozenset(n for n, b in BACKENDS.items() if b.gpu)
            self._residency = (
                self.gpu_budget,
                resident_members(
                    self.matrix.cells(), self.matrix.baselines(), resident, self.gpu_budget, gpu_backends
                ),
            )
        return self._residency[1]

    def bracketed_groups(self) -> frozenset[str]:
        """Member groups of a resident backend whose baseline does not fit beside them: measured
        apart, between two brackets of their baseline (deciding/families.py)."""
        return frozenset(g for g, r in self.residency().items() if not r.fits)

    def note_residency(self, plan: Any) -> None:
        """Each member group's plan notes say whether its baseline is resident beside it (and
        its shares) or why it is bracketed."""
        for g, r in self.residency().items():
            gp = plan.groups.get(g)
            if gp is not None:
                gp.notes.append(r.note())

    def interleaved_baseline(self, cell: Any) -> Any:
        """The method whose rounds are interleaved with ``cell``'s (cells.interleaves): its
        baseline (same model and TP) where both backends can share a process, unless
        --specbench-no-interleave or the two do not fit side by side (``residency``); else None
        (also for the baseline itself)."""
        if self.matrix is None or self.config.getoption("specbench_no_interleave", False):
            return None
        name = self.matrix.baselines().get(cell.method.name)
        base = self.matrix.method(name) if name else None
        if base is None or cell.group.id in self.bracketed_groups():
            return None
        return base if interleaves(cell, base, interleaving_backends()) else None

    def not_bracketed(self, interleaved: dict[str, str]) -> dict[str, str]:
        """Cell id -> its interleaved baseline's cell (matrix.interleave.interleaved_baselines)
        without the cells of bracketed groups (the plan's ETA counts no interleaved rounds there)."""
        out = self.bracketed_groups()
        if not out or self.matrix is None:
            return interleaved
        group = {c.id: c.group.id for c in self.matrix.cells()}
        return {k: v for k, v in interleaved.items() if group.get(k) not in out}

    def reference_for(self, cell: Any, shapes: Callable[[], list[Any]]) -> Any:
        """A ``rounds.Reference`` for ``cell``: its baseline method (same model and TP) as a
        second engine in this process, started and warmed at the cells ``shapes()`` gives on
        first use;
        None where the cell is its own baseline, the baseline does not run this workload, either
        backend cannot share the process, or --specbench-no-interleave."""
        base = self.interleaved_baseline(cell)
        if base is None:
            return None
        name = base.name
        from ..matrix.selectors import apply_includes
        from ..workloads.kinds import Reference, warm_engine

        group = EngineGroup(apply_includes(base, cell.tp, self.matrix.include), cell.tp)  # its TP's settings
        if group.id in self.reference_failed:  # one start per baseline: its cells fail with why
            raise RuntimeError(self.reference_failed[group.id])
        if group.id not in self.references:
            ev = {"group": group.id, "worker": self.worker, "event": "reference", "for": cell.group.id}
            leased = self.lease.gpus if self.lease is not None else ()
            t0 = time.perf_counter()
            try:
                with self._baseline_environ(base):
                    sized = self._beside(group, leased, ev) if leased else group
                    t0 = time.perf_counter()
                    with _alarm(
                        self.config.getoption("specbench_start_timeout"), f"{group.id}: baseline start"
                    ):
                        eng = self.config.hook.pytest_specbench_make_engine(config=self.config, group=sized)
            except Exception as e:
                why = f"the baseline {group.id} beside {cell.group.id} did not start: {type(e).__name__}: {e}"
                ev.update(ok=False, start_s=time.perf_counter() - t0, error=why)
                self.pending.append(ev)
                self.reference_failed[group.id] = why
                raise
            ev["start_s"] = time.perf_counter() - t0
            self.references[group.id] = eng
            if leased and "resident" in ev:  # on the member's GPUs: what it holds there
                from ..gpus.inventory import inventory

                before = ev["resident"]["used_mib_before"]
                held = {
                    g.index: g.memory_used_mib - before.get(str(g.index), 0)
                    for g in inventory()
                    if g.index in leased
                }
                self.reference_gpus[group.id], self.reference_held[group.id] = leased, held
                ev["resident"]["held_mib"] = {str(k): v for k, v in held.items()}
                ev["lease_gpus"] = list(leased)
            ev["warm"] = jsonable(warm_engine(eng, shapes()))
            self.pending.append(ev)
        return Reference(self.references[group.id], name, group.id)

    def _beside(self, group: EngineGroup, leased: tuple[int, ...], ev: dict[str, Any]) -> EngineGroup:
        """A group of a resident backend (plugin/resident.py) that starts where a baseline is or
        will be beside it: its mem_fraction_static counts what is held on its GPUs, plus its share.
        Any other group: unchanged."""
        from . import resident

        if not resident.is_resident(group) or self.config.getoption("specbench_no_interleave", False):
            return group
        beside = any(set(g) & set(leased) for g in self.reference_gpus.values())
        cells = [
            c for c in (self.matrix.cells() if self.matrix is not None else ()) if c.group.id == group.id
        ]
        member = any(self.interleaved_baseline(c) is not None for c in cells)
        if not (beside or member or ev.get("event") == "reference"):
            return group
        gp = self.get_plan().groups.get(group.id)
        sized, ev["resident"] = resident.sized(group, leased, getattr(gp, "mem_fraction_static", None))
        return sized

    @contextlib.contextmanager
    def _baseline_environ(self, base: Any) -> Iterator[None]:
        """The baseline's own environment while its engine starts beside the live one: the run's
        (not the member's method env or forced accept length), its method's env, the same GPUs."""
        keep = dict(os.environ)
        if self.saved_environ is not None:
            pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
            os.environ.clear()
            os.environ.update(self.saved_environ)
            if pinned is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = pinned
        os.environ.update(dict(base.env))
        os.environ.update(forced_env(base))
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(keep)

    def resident_baseline(self) -> dict[int, int]:
        """MiB used per GPU before the run plus what resident baselines hold there now."""
        out = dict(self.gpu_baseline)
        for held in self.reference_held.values():
            for i, mib in held.items():
                out[i] = out.get(i, 0) + max(0, mib)
        return out

    def _baseline_group_id(self, group: EngineGroup) -> str | None:
        """The group id of ``group``'s baseline at its TP (the instance that may stay beside it);
        None for a bracketed group (its baseline does not fit beside it)."""
        if group.id in self.bracketed_groups():
            return None
        name = self.matrix.baselines().get(group.method.name) if self.matrix is not None else None
        return f"{name}-tp{group.tp}" if name else None

    def close_references(self, where: Callable[[str, tuple[int, ...]], bool] | None = None) -> None:
        """Stop the baseline instances (``where(group id, GPUs)``: only the resident ones it picks)."""
        for gid in list(self.references):
            if where is not None and not (
                gid in self.reference_gpus and where(gid, self.reference_gpus[gid])
            ):
                continue
            eng = self.references.pop(gid)
            self.reference_gpus.pop(gid, None)
            self.reference_held.pop(gid, None)
            eng.close()
