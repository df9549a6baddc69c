"""GPU inventory (NVML), busy-GPU detection and CUDA_VISIBLE_DEVICES.

NVML queries never initialise CUDA, so they are safe in the pytest process. The run's GPUs are
chosen once (:func:`choose`: busy ones are left out) and lent to engine starts by leases.py;
each start sets CUDA_VISIBLE_DEVICES to its lease (:func:`pin`). pynvml (nvidia-ml-py) is
imported lazily; without it, or without a driver, the inventory is empty.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIN_FREE_FRACTION = 0.9  # a GPU with less free memory is taken as used by someone else


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    processes: int
    uuid: str = ""

    @property
    def busy_reason(self) -> str | None:
        if self.processes:
            return f"GPU {self.index} runs {self.processes} compute process(es)"
        free = self.memory_total_mib - self.memory_used_mib
        if free < MIN_FREE_FRACTION * self.memory_total_mib:
            return f"GPU {self.index} has {free} MiB free of {self.memory_total_mib} MiB"
        return None

    @property
    def busy_note(self) -> str | None:
        """Why it is left out, the way a skip reason says it: "GPU 0 busy, 56 GB used by another
        process" (GB = 10^9 bytes)."""
        if self.busy_reason is None:
            return None
        used = f"{self.memory_used_mib * 2**20 / 1e9:.0f} GB used"
        if self.processes == 1:
            return f"GPU {self.index} busy, {used} by another process"
        if self.processes:
            return f"GPU {self.index} busy, {used} by {self.processes} other processes"
        return f"GPU {self.index} busy, {used} of {self.memory_total_mib * 2**20 / 1e9:.0f} GB"


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def inventory() -> list[GPU]:
    nv = _nvml()
    if nv is None:
        return []
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        try:
            procs = len(nv.nvmlDeviceGetComputeRunningProcesses(h))
        except Exception:
            procs = 0
        name = nv.nvmlDeviceGetName(h)
        uuid = nv.nvmlDeviceGetUUID(h)
        out.append(
            GPU(
                i,
                name.decode() if isinstance(name, bytes) else str(name),
                mem.total >> 20,
                mem.used >> 20,
                procs,
                uuid.decode() if isinstance(uuid, bytes) else str(uuid),
            )
        )
    return out


def gpu_processes(indices: tuple[int, ...]) -> dict[int, list[tuple[int, int]]]:
    """Per GPU index, the compute processes NVML sees on it: (pid, MiB used). Empty without NVML."""
    nv = _nvml()
    if nv is None:
        return {}
    out: dict[int, list[tuple[int, int]]] = {}
    for i in indices:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception:
            continue
        out[i] = [(int(p.pid), int((p.usedGpuMemory or 0) >> 20)) for p in procs]
    return out


def process_name(pid: int) -> str | None:
    """A process's command name (Linux /proc; None where this host cannot see it, e.g. another
    container's process that NVML lists)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


def held(g: GPU, procs: list[tuple[int, int]]) -> dict[str, Any]:
    """What other processes hold on a GPU, for a refusal, a flag and the JSON: its used and total
    MiB, and each compute process NVML lists on it (pid, name, MiB)."""
    return {
        "gpu": g.index,
        "used_mib": g.memory_used_mib,
        "total_mib": g.memory_total_mib,
        "processes": [{"pid": pid, "name": process_name(pid), "used_mib": mib} for pid, mib in procs],
    }


def held_text(h: dict[str, Any]) -> str:
    """``held`` as words: "GPU 0: 53410 of 143771 MiB in use, by pid 4242 (sglang::scheduler,
    52000 MiB)"; "by processes NVML does not list" where it lists none (another container's)."""
    procs = [
        f"pid {p['pid']} ({p['name'] + ', ' if p['name'] else ''}{p['used_mib']} MiB)" for p in h["processes"]
    ]
    who = ", ".join(procs) if procs else "processes NVML does not list (another container's?)"
    return f"GPU {h['gpu']}: {h['used_mib']} of {h['total_mib']} MiB in use, by {who}"


def energy_mj(indices: tuple[int, ...]) -> dict[int, int] | None:
    """Each GPU's energy counter (millijoules since the driver loaded; NVML, Volta and newer),
    or None when NVML or the counter is not available."""
    nv = _nvml()
    if nv is None or not indices:
        return None
    try:
        return {
            i: int(nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(i))) for i in indices
        }
    except Exception:
        return None


class EnergyMeter:
    """GPU energy over a cell's timed rounds, from NVML's counters read before and after:
    joules in all (and per GPU), average power, and (by the caller) joules per output token."""

    def __init__(self, indices: tuple[int, ...]):
        self.indices = indices
        self._start: dict[int, int] | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._start = energy_mj(self.indices)
        self._t0 = time.monotonic()

    def stop(self) -> dict[str, Any]:
        end, seconds = energy_mj(self.indices), time.monotonic() - self._t0
        if not self._start or not end:
            return {}
        per = {str(i): (end[i] - self._start[i]) / 1e3 for i in self.indices}
        total = sum(per.values())
        return {
            "energy_j": total,
            "energy_j_per_gpu": per,
            "power_w_avg": total / seconds if seconds > 0 else None,
        }


def memory_bandwidth(index: int) -> float | None:
    """Peak memory bandwidth of a GPU (bytes/s) from NVML: bus width (bits) / 8 x max memory
    clock x 2 (double data rate). None where NVML cannot tell."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        bits = nv.nvmlDeviceGetMemoryBusWidth(h)
        mhz = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)
    except Exception:
        return None
    return bits / 8 * mhz * 1e6 * 2 if bits and mhz else None


def link(indices: tuple[int, ...]) -> tuple[str, int, int] | None:
    """The chosen GPUs' interconnect from NVML: ("nvlink", version, active links) when every
    chosen GPU has an active NVLink, else ("pcie", generation, lanes) of the narrowest PCIe link
    among them (its maximum), None where NVML cannot tell (no GPU, a VM without the calls)."""
    nv = _nvml()
    if nv is None or not indices:
        return None
    nvlinks, pcie = [], []
    try:
        for i in indices:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            active, version = 0, 0
            for n in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, n):
                        active += 1
                        version = max(version, int(nv.nvmlDeviceGetNvLinkVersion(h, n)))
                except Exception:
                    break
            nvlinks.append((active, version))
            pcie.append((nv.nvmlDeviceGetMaxPcieLinkGeneration(h), nv.nvmlDeviceGetMaxPcieLinkWidth(h)))
    except Exception:
        return None
    if all(a for a, _ in nvlinks):
        return ("nvlink", min(v for _, v in nvlinks), min(a for a, _ in nvlinks))
    gen, lanes = min(pcie)
    return ("pcie", int(gen), int(lanes))


def driver_info() -> dict[str, Any]:
    nv = _nvml()
    if nv is None:
        return {}

    def s(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    cuda = nv.nvmlSystemGetCudaDriverVersion()
    return {
        "driver": s(nv.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def describe(gpus: list[GPU]) -> list[dict[str, Any]]:
    return [dict(asdict(g), busy=g.busy_reason) for g in gpus]


def parse_gpu_list(value: str) -> tuple[int, ...]:
    """'0,1,3' -> (0, 1, 3); raises ValueError with what is allowed."""
    try:
        ids = tuple(int(x) for x in value.split(",") if x.strip() != "")
    except ValueError:
        raise ValueError(
            f"--specbench-gpus expects comma-separated GPU indices like 0,1,2; got {value!r}"
        ) from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError(f"--specbench-gpus expects distinct non-negative GPU indices; got {value!r}")
    return ids


def choose(gpus: list[GPU], explicit: tuple[int, ...] | None) -> tuple[tuple[int, ...], list[str]]:
    """GPUs to use and notes on the ones left out (busy, or not in the explicit list)."""
    if explicit is not None:
        known = {g.index for g in gpus}
        missing = [i for i in explicit if gpus and i not in known]
        if missing:
            raise ValueError(f"--specbench-gpus names GPU(s) {missing}; this host has {sorted(known)}")
        return explicit, []
    use, notes = [], []
    for g in gpus:
        reason = g.busy_reason
        if reason:
            notes.append(f"not using {reason}")
        else:
            use.append(g.index)
    return tuple(use), notes


def left_out(gpus: list[GPU], chosen: tuple[int, ...], explicit: tuple[int, ...] | None) -> list[str]:
    """Each GPU of the inventory not in ``chosen``, and why ("GPU 0 busy, 56 GB used by another
    process", "GPU 3 not in --specbench-gpus")."""
    rest = [g for g in gpus if g.index not in chosen]
    if explicit is not None:
        ids = ", ".join(str(g.index) for g in rest)
        return [f"GPU{'s' if len(rest) > 1 else ''} {ids} not in --specbench-gpus"] if rest else []
    return [g.busy_note or f"GPU {g.index} left out" for g in rest]


def worker_slice(gpus: tuple[int, ...], worker: int, workers: int) -> tuple[int, ...]:
    """Disjoint, contiguous slice of ``gpus`` for worker ``worker`` of ``workers`` (the plugin
    leases GPUs per engine start instead; kept for callers that split GPUs statically)."""
    n = len(gpus)
    lo, hi = worker * n // workers, (worker + 1) * n // workers
    return gpus[lo:hi]


def pin(indices: tuple[int, ...]) -> None:
    """CUDA_VISIBLE_DEVICES = NVML indices (set per engine start, to its lease); CUDA numbers
    devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML's order), so that is set
    too unless the user chose."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, indices))


def wait_released(
    indices: tuple[int, ...], baseline_mib: dict[int, int], timeout_s: float = 30.0, slack_mib: int = 1024
) -> dict[int, int]:
    """Wait until each GPU's used memory is back near its pre-engine value; returns used MiB."""
    deadline = time.monotonic() + timeout_s
    used: dict[int, int] = {}
    while True:
        inv = {g.index: g for g in inventory()}
        used = {i: inv[i].memory_used_mib for i in indices if i in inv}
        if (
            all(used.get(i, 0) <= baseline_mib.get(i, 0) + slack_mib for i in used)
            or time.monotonic() > deadline
        ):
            return used
        time.sleep(0.5)
