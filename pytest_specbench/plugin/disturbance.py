"""Disturbance, measured: the CPU time that processes outside the run took while a cell's timed
rounds ran. The run itself is this process and everything under it (the engine's processes), the
process that started it (pytest's controller under xdist) and that one's other children (the
other xdist workers are the run's too, but their engines compete for the same cores: they count
as disturbance). A cell over DISTURBED_SHARE of the machine's CPU capacity taken by others is
``disturbed``: its numbers are kept, and its comparisons get no faster/slower verdict. On GPUs, a
compute process on the engine's GPUs that is not the run's, seen by NVML at the start or the end
of the timed rounds, disturbs the cell too."""

from __future__ import annotations

import os
import time
from typing import Any

DISTURBED_SHARE = 0.10  # of all cores' time over the timed rounds
# and at least this much CPU time: process CPU times tick in 10 ms steps, so over a window of a
# few milliseconds one tick of a background daemon would read as a large share
MIN_OTHER_CPU_S = 0.05


def _cpu(p: Any) -> float | None:
    try:
        t = p.cpu_times()
        return float(t.user + t.system)
    except Exception:  # gone, or not ours to read
        return None


class DisturbanceMeter:
    """``start`` before a cell's first timed round, ``stop`` after its last: what other processes
    took of the CPU in between (psutil)."""

    def __init__(self, share: float = DISTURBED_SHARE, gpus: tuple[int, ...] = ()):
        self.share = share
        self.gpus = gpus
        self._t0 = 0.0
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
        self._t0 = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._t0
        taken: list[tuple[float, str]] = []
        ours = self._ours()
        for key, (p, t) in self._others(ours).items():
            d = t - self._before.get(key, 0.0)
            if d > 0:
                try:
                    name = p.name()
                except Exception:
                    name = "?"
                taken.append((d, f"{name} (pid {key[0]})"))
        cores = os.cpu_count() or 1
        total = sum(d for d, _ in taken)
        share = total / (wall * cores) if wall > 0 else 0.0
        top = sorted(taken, reverse=True)[:3]
        out: dict[str, Any] = {
            "other_cpu_share": round(share, 4),
            "other_cpu_s": round(total, 3),
            "other_cpu_top": [f"{name}: {d:.1f} s" for d, name in top],
        }
        self._look_at_gpus(ours)
        why = []
        if share > self.share and total >= MIN_OTHER_CPU_S:
            why.append(
                f"other processes took {share:.0%} of the {cores} cores over the timed rounds "
                f"(more than {self.share:.0%}): {', '.join(out['other_cpu_top'])}"
            )
        if self._gpu_others:
            out["other_gpu_processes"] = dict(self._gpu_others)
            why.append(
                "another process used the engine's GPUs: "
                + ", ".join(f"{k} ({v})" for k, v in self._gpu_others.items())
            )
        if why:
            out["disturbed"] = "; ".join(why)
        return out
