"""Disturbance, measured: the CPU time that processes outside the run took while a cell's timed
rounds ran. It is the machine's busy time over the window (on Linux /proc/stat, summed over the
cores this process may run on; elsewhere psutil's per-core times) minus the run's own: this
process with every descendant, the children it and they reaped (their times are kept by the
kernel after they end), and the own time of the process that started it (pytest's controller
under xdist). Nothing that ran in the window is missed this way, however briefly it lived: a
process that starts and ends between two readings is in the machine's busy time. The other
xdist workers are the run's too, but their engines compete for the same cores: they count as
disturbance, and so does time the hypervisor gave the cores to another machine (steal). A cell
over DISTURBED_SHARE of those cores' time taken by others is ``disturbed``: its numbers are kept,
and its comparisons get no faster/slower verdict unless their pairs bore the load alike
(stats/paired.py). Who took it is named from a per-process reading at the window's two ends
(what no process seen there explains is "short-lived processes"). On GPUs, a compute process on
the engine's GPUs that is not the run's, seen by NVML at the start or the end of the timed
rounds, disturbs the cell too."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

DISTURBED_SHARE = 0.10  # of all cores' time over the timed rounds
# and at least this much CPU time: CPU times tick in 10 ms steps, so over a window of a few
# milliseconds one tick of a background daemon would read as a large share
MIN_OTHER_CPU_S = 0.05


@dataclass(frozen=True)
class MachineCpu:
    """The cumulative CPU time (s) of the cores the run may use: busy (user, nice, system, irq,
    softirq; guest time is already inside user and nice) and stolen by the hypervisor."""

    busy_s: float
    steal_s: float
    cores: int
    source: str  # "/proc/stat" or "psutil"


@dataclass(frozen=True)
class Snapshot:
    """One reading: wall clock, the machine's CPU, the run's own CPU time (all s)."""

    wall_s: float
    machine: MachineCpu
    own_s: float


@dataclass(frozen=True)
class Others:
    """What others took between two snapshots: CPU seconds (steal included), its share of the
    cores' time over the window, and the steal part."""

    cpu_s: float
    share: float
    steal_s: float
    wall_s: float
    cores: int


def parse_proc_stat(text: str, cpus: Collection[int] | None = None, hz: int = 100) -> MachineCpu:
    """/proc/stat's per-core lines (``cpuN user nice system idle iowait irq softirq steal guest
    guest_nice``, in USER_HZ ticks), summed over ``cpus`` (None: all)."""
    busy = steal = n = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *vals = line.split()
        if not name[3:].isdigit() or (cpus is not None and int(name[3:]) not in cpus):
            continue
        v = [int(x) for x in vals] + [0] * 10
        user, nice, system, _idle, _iowait, irq, softirq, st = v[:8]
        busy += user + nice + system + irq + softirq
        steal += st
        n += 1
    if not n:
        raise ValueError("/proc/stat: no per-core lines for the cores this process may use")
    return MachineCpu(busy / hz, steal / hz, n, "/proc/stat")


def others(before: Snapshot, after: Snapshot) -> Others:
    """Machine busy time + steal over the window minus the run's own, as a share of the cores'
    time (clamped at 0: the kernel's per-process and per-core counters tick apart; and at 1: the
    counters tick in 10 ms steps and are read a moment after the wall clock, so over a short
    window on a saturated machine they can read more than all the cores' time, e.g. 1.0456)."""
    wall = after.wall_s - before.wall_s
    busy = after.machine.busy_s - before.machine.busy_s
    steal = max(0.0, after.machine.steal_s - before.machine.steal_s)
    taken = max(0.0, busy - (after.own_s - before.own_s)) + steal
    cores = after.machine.cores
    return Others(taken, min(1.0, taken / (wall * cores)) if wall > 0 else 0.0, steal, wall, cores)


def cpu_reason(o: Others, top: list[str], share: float = DISTURBED_SHARE) -> str | None:
    """Why a window counts as disturbed by other processes' CPU (None: it does not)."""
    if o.share > share and o.cpu_s >= MIN_OTHER_CPU_S:
        return (
            f"other processes took {o.share:.0%} of the {o.cores} cores over the timed rounds "
            f"(more than {share:.0%}): {', '.join(top)}"
        )
    return None


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def machine_cpu() -> MachineCpu:
    """The machine's CPU now: /proc/stat on Linux, else psutil's per-core times."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/stat") as f:
                return parse_proc_stat(f.read(), _affinity(), os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError):
            pass
    import psutil

    busy = steal = 0.0
    per = psutil.cpu_times(percpu=True)
    mine = _affinity()
    for i, t in enumerate(per):
        if mine is not None and i not in mine:
            continue
        d = t._asdict()
        idle = sum(d.get(k, 0.0) for k in ("idle", "iowait", "guest", "guest_nice", "steal"))
        busy += sum(d.values()) - idle
        steal += d.get("steal", 0.0)
    return MachineCpu(busy, steal, len(per) if mine is None else len(mine & set(range(len(per)))), "psutil")


def _cpu(p: Any, children: bool = False) -> float | None:
    try:
        t = p.cpu_times()
    except Exception:  # gone, or not ours to read
        return None
    own = float(t.user + t.system)
    if children:
        own += float(getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))
    return own


def own_cpu_s() -> float:
    """The run's CPU time so far: this process and the children it reaped (os.times), every live
    descendant with the children it reaped, and the own time of the process that started this
    one."""
    import psutil

    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        kids = []
    for c in kids:
        total += _cpu(c, children=True) or 0.0
    try:
        total += _cpu(psutil.Process(os.getppid())) or 0.0
    except psutil.Error:
        pass
    return total


def snapshot() -> Snapshot:
    """A cheap reading (one /proc/stat read and a walk of this process's tree): what
    ``others`` compares, e.g. around each timed round."""
    return Snapshot(time.perf_counter(), machine_cpu(), own_cpu_s())


class DisturbanceMeter:
    """``start`` before a cell's first timed round, ``stop`` after its last: what other processes
    took of the CPU in between. ``lap_start`` / ``lap_stop`` measure one round inside it."""

    def __init__(self, share: float = DISTURBED_SHARE, gpus: tuple[int, ...] = ()):
        self.share = share
        self.gpus = gpus
        self._start: Snapshot | None = None
        self._lap: Snapshot | None = None
        self._before: dict[tuple[int, float], float] = {}
        self._gpu_others: dict[str, str] = {}

    def _ours(self) -> set[int]:
        import psutil

        me = psutil.Process(os.getpid())
        ours = {me.pid, os.getppid()}
        try:
            ours.update(c.pid for c in me.children(recursive=True))
        except psutil.Error:
            pass
        return ours

    def _look_at_gpus(self, ours: set[int]) -> None:
        """Compute processes on the engine's GPUs that are not the run's (NVML)."""
        if not self.gpus:
            return
        from ..gpus.inventory import gpu_processes

        for gpu, procs in gpu_processes(self.gpus).items():
            for pid, mib in procs:
                if pid not in ours:
                    self._gpu_others[f"GPU {gpu}: pid {pid}"] = f"{mib} MiB"

    def _others(self, ours: set[int]) -> dict[tuple[int, float], tuple[Any, float]]:
        """Every other process's own CPU time now, to name who took it (not to count it)."""
        import psutil

        out = {}
        for p in psutil.process_iter():
            if p.pid in ours or p.pid == 0:
                continue
            t = _cpu(p)
            if t is not None:
                try:
                    out[(p.pid, p.create_time())] = (p, t)
                except psutil.Error:
                    continue
        return out

    def start(self) -> None:
        self._gpu_others = {}
        ours = self._ours()
        self._look_at_gpus(ours)
        self._before = {k: t for k, (_, t) in self._others(ours).items()}
        self._start = snapshot()

    def lap_start(self) -> None:
        self._lap = snapshot()

    def lap_stop(self) -> float | None:
        """Others' share of the cores over the lap since ``lap_start`` (None: no lap started)."""
        if self._lap is None:
            return None
        o = others(self._lap, snapshot())
        self._lap = None
        return o.share

    def stop(self) -> dict[str, Any]:
        end = snapshot()
        assert self._start is not None, "stop() before start()"
        o = others(self._start, end)
        ours = self._ours()
        taken: list[tuple[float, str]] = []
        for key, (p, t) in self._others(ours).items():
            d = t - self._before.get(key, 0.0)
            if d > 0:
                try:
                    name = p.name()
                except Exception:
                    name = "?"
                taken.append((d, f"{name} (pid {key[0]})"))
        # what no process seen at either end explains: processes that started and ended inside
        # the window, children that other processes reaped, the kernel's interrupt time
        short = max(0.0, o.cpu_s - o.steal_s - sum(d for d, _ in taken))
        if short > 0:
            taken.append((short, "short-lived processes"))
        if o.steal_s > 0:
            taken.append((o.steal_s, "hypervisor (steal)"))
        top = [f"{name}: {d:.1f} s" for d, name in sorted(taken, reverse=True)[:3]]
        out: dict[str, Any] = {
            "other_cpu_share": round(o.share, 4),
            "other_cpu_s": round(o.cpu_s, 3),
            "other_cpu_short_lived_s": round(short, 3),
            "other_cpu_top": top,
            "other_cpu_source": f"{end.machine.source} over {o.cores} cores",
        }
        self._look_at_gpus(ours)
        why = []
        cpu = cpu_reason(o, top, self.share)
        if cpu:
            why.append(cpu)
        if self._gpu_others:
            out["other_gpu_processes"] = dict(self._gpu_others)
            why.append(
                "another process used the engine's GPUs: "
                + ", ".join(f"{k} ({v})" for k, v in self._gpu_others.items())
            )
        if why:
            out["disturbed"] = "; ".join(why)
        return out
