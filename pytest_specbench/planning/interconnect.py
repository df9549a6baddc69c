"""The GPUs' link and what an all-reduce over it costs (two per layer and step at TP > 1).

Where the link comes from (the plugin picks, first that applies): ``--specbench-gpu-link``,
NVML's topology of the chosen GPUs (NVLink between them, else their PCIe generation and lanes),
the datasheet entry of ``--specbench-gpu NAME`` (gpu_specs.py), else NVLink (what the calibration
ran on). An all-reduce of ``n`` bytes at TP ``k``:

- NVLink: SGLang's custom all-reduce (one kernel; every GPU reads its peers' buffers at once):
  a fixed latency, measured 13 us on the H200 at TP2 (h200-tp2: 2.08 ms vs 1.88 ms a step over
  56 all-reduces), the same at any TP, plus ``2 (k-1)/k x n`` bytes at the link's rate;
- PCIe: SGLang 0.5.17 turns its custom all-reduce off for 4 or more GPUs without full NVLink
  (distributed/device_communicators/custom_all_reduce.py:269-274), so NCCL's ring: a launch
  latency plus one PCIe round trip per ring step (``2 (k-1)`` steps), plus the same bytes at the
  link's rate. The PCIe latencies and every achieved rate are assumptions (datasheet rate x 0.8),
  not measurements: a run on the box replaces them (``--specbench-plan-from``).
No pytest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s an all-reduce moves per GPU and direction (achieved, assumed 0.8 x datasheet)
    latency_s: float  # fixed part of one all-reduce
    hop_s: float  # added per ring step (NCCL's ring over PCIe); 0 for NVLink's custom all-reduce
    source: str


NVLINK_LATENCY_S = 13e-6  # measured: h200-tp2 ar-tp2 c1 (the calibration's ALLREDUCE_S)
NCCL_LATENCY_S = 10e-6  # assumed: NCCL's launch and LL protocol on PCIe
PCIE_HOP_S = 4e-6  # assumed: one PCIe round trip through the host bridge per ring step
ACHIEVED = 0.8  # assumed fraction of the datasheet rate an all-reduce reaches

LINKS = {
    "nvlink3": Link(
        "nvlink3", 300e9 * ACHIEVED, NVLINK_LATENCY_S, 0.0, "NVLink 3 (A100 SXM): 600 GB/s both ways"
    ),
    "nvlink4": Link(
        "nvlink4", 450e9 * ACHIEVED, NVLINK_LATENCY_S, 0.0, "NVLink 4 (H100/H200 SXM): 900 GB/s both ways"
    ),
    "nvlink5": Link(
        "nvlink5", 900e9 * ACHIEVED, NVLINK_LATENCY_S, 0.0, "NVLink 5 (B200): 1.8 TB/s both ways"
    ),
    "xgmi": Link(
        "xgmi", 448e9 * ACHIEVED, NVLINK_LATENCY_S, 0.0, "AMD Infinity Fabric (MI300X): 7 x 64 GB/s"
    ),
    "pcie3x16": Link(
        "pcie3x16", 16e9 * ACHIEVED, NCCL_LATENCY_S, PCIE_HOP_S, "PCIe 3.0 x16: 16 GB/s a direction"
    ),
    "pcie4x16": Link(
        "pcie4x16", 32e9 * ACHIEVED, NCCL_LATENCY_S, PCIE_HOP_S, "PCIe 4.0 x16: 32 GB/s a direction"
    ),
    "pcie5x16": Link(
        "pcie5x16", 64e9 * ACHIEVED, NCCL_LATENCY_S, PCIE_HOP_S, "PCIe 5.0 x16: 64 GB/s a direction"
    ),
}
LINKS["nvlink"] = LINKS["nvlink4"]  # the calibration's
DEFAULT = LINKS["nvlink4"]


def pcie(gen: int, lanes: int) -> Link:
    """A PCIe link of ``gen`` and ``lanes`` (NVML's current or max link), per direction."""
    per_lane = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}.get(gen, 3.938e9)
    return Link(
        f"pcie{gen}x{lanes}",
        per_lane * lanes * ACHIEVED,
        NCCL_LATENCY_S,
        PCIE_HOP_S,
        f"PCIe {gen}.0 x{lanes}: {per_lane * lanes / 1e9:.0f} GB/s a direction",
    )


def parse(text: str) -> Link:
    """'pcie4x16', 'pcie5', 'nvlink', 'nvlink4' ... -> a Link; ValueError naming what is valid."""
    s = text.strip().lower().replace(" ", "").replace(".0", "").replace("-", "")
    if s in LINKS:
        return LINKS[s]
    if s.startswith("pcie"):
        gen, _, lanes = s[4:].replace("gen", "").partition("x")
        if gen.isdigit() and (lanes.isdigit() or not lanes):
            return pcie(int(gen), int(lanes or 16))
    raise ValueError(
        f"{text!r}: expected one of {', '.join(sorted(LINKS))}, or pcieGxL (e.g. pcie4x16, pcie5x8)"
    )


def allreduce_s(link: Link | None, tp: int, nbytes: float) -> float:
    """One all-reduce of ``nbytes`` per GPU over ``tp`` GPUs (0 at TP1)."""
    if tp <= 1:
        return 0.0
    link = link or DEFAULT
    ring = 2 * (tp - 1)
    return link.latency_s + ring * link.hop_s + ring / tp * nbytes / link.bandwidth
