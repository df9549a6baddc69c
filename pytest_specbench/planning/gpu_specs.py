"""GPU datasheet: memory, memory bandwidth and dense BF16 tensor FLOP/s per GPU, with where each
figure comes from. The planner reads bandwidth (roofline, decode ETAs) and FLOP/s (prefill) by the
GPU's name (NVML's, or --specbench-gpu NAME where there is no NVML); memory sizes the plan when
--specbench-gpu names the GPU, in the bytes NVML reports for the card where known (SGLang sizes
from those: a "96 GB" card reports 97887 MiB, 95.6 GiB, not 89.4), else the datasheet's GB; the
link is the GPUs' interconnect in a typical box of them (interconnect.py). Names are matched as
fragments of the GPU's name, most specific first. Figures from the vendors' product datasheets
unless the source says derived. No pytest."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUSpec:
    fragment: str  # matched case-insensitively within the GPU's name
    memory_gb: float  # 10^9 bytes
    bandwidth: float  # bytes/s
    bf16_flops: float  # dense BF16 tensor FLOP/s
    source: str
    link: str = "nvlink4"  # interconnect.LINKS key
    nvml_mib: int | None = None  # memory.total as NVML reports it for this card (MiB), where known

    @property
    def memory_bytes(self) -> int:
        return self.nvml_mib * 2**20 if self.nvml_mib else int(self.memory_gb * 1e9)

    @property
    def memory_source(self) -> str:
        if self.nvml_mib:
            return f"NVML's memory.total for this card, {self.nvml_mib} MiB"
        return f"the datasheet's {self.memory_gb:g} GB (NVML reports more; --specbench-gpu-memory gives it)"


SPECS = (
    GPUSpec(
        "GH200", 96, 4.0e12, 989e12, "NVIDIA GH200 (HBM3): 96 GB, 4.0 TB/s; 144 GB HBM3e: give the memory"
    ),
    GPUSpec(
        "B300", 288, 8.0e12, 2250e12, "NVIDIA HGX B300: 288 GB HBM3e, 8 TB/s; BF16 dense as B200", "nvlink5"
    ),
    GPUSpec(
        "B200",
        180,
        8.0e12,
        2250e12,
        "NVIDIA DGX/HGX B200: 180 GB HBM3e, 8 TB/s, 4.5 PF BF16 sparse",
        "nvlink5",
    ),
    GPUSpec(
        "H200",
        141,
        4.8e12,
        989e12,
        "NVIDIA H200: 141 GB HBM3e, 4.8 TB/s, 1979 TF BF16 sparse",
        "nvlink4",
        143771,
    ),
    GPUSpec(
        "H100 NVL",
        94,
        3.9e12,
        835e12,
        "NVIDIA H100 NVL: 94 GB HBM3, 3.9 TB/s (NVLink bridges pairs)",
        "pcie5x16",
    ),
    GPUSpec("H100 PCIe", 80, 2.0e12, 756e12, "NVIDIA H100 PCIe: 80 GB HBM2e, 2.0 TB/s", "pcie5x16"),
    GPUSpec(
        "H100",
        80,
        3.35e12,
        989e12,
        "NVIDIA H100 SXM: 80 GB HBM3, 3.35 TB/s, 1979 TF BF16 sparse",
        "nvlink4",
        81559,
    ),
    GPUSpec("H20", 96, 4.0e12, 148e12, "NVIDIA H20: 96 GB HBM3, 4.0 TB/s, 148 TF BF16 dense"),
    GPUSpec(
        "RTX PRO 6000",
        96,
        1.792e12,
        500e12,
        "NVIDIA RTX PRO 6000 Blackwell: 96 GB GDDR7, 512-bit, 1792 GB/s; BF16 dense = its 4000 AI TOPS "
        "(FP4, sparse) / 8 (derived, not a datasheet line); PCIe 5.0 x16, no NVLink",
        "pcie5x16",
        97887,
    ),
    GPUSpec(
        "L40S",
        48,
        0.864e12,
        362e12,
        "NVIDIA L40S: 48 GB GDDR6, 864 GB/s, 733 TF BF16 sparse",
        "pcie4x16",
        46068,
    ),
    GPUSpec(
        "A100 80GB PCIe", 80, 1.935e12, 312e12, "NVIDIA A100: 80 GB HBM2e PCIe, 1935 GB/s", "pcie4x16", 81920
    ),
    GPUSpec(
        "A100-SXM4-80GB", 80, 2.039e12, 312e12, "NVIDIA A100: 80 GB HBM2e SXM, 2039 GB/s", "nvlink3", 81920
    ),
    GPUSpec("A100", 40, 1.555e12, 312e12, "NVIDIA A100: 40 GB HBM2, 1555 GB/s", "nvlink3"),
    GPUSpec("A10G", 24, 0.6e12, 125e12, "NVIDIA A10G (AWS G5): 24 GB GDDR6, 600 GB/s", "pcie4x16", 23028),
    GPUSpec(
        "MI325X", 256, 6.0e12, 1307e12, "AMD Instinct MI325X: 256 GB HBM3E, 6 TB/s, 1307 TF BF16", "xgmi"
    ),
    GPUSpec(
        "MI300X", 192, 5.3e12, 1307e12, "AMD Instinct MI300X: 192 GB HBM3, 5.3 TB/s, 1307 TF BF16", "xgmi"
    ),
)


def spec_for(name: str) -> GPUSpec | None:
    """The first entry whose fragment is in ``name`` (case-insensitive), None for a GPU not here."""
    n = name.lower()
    return next((s for s in SPECS if s.fragment.lower() in n), None)


def names() -> list[str]:
    return [s.fragment for s in SPECS]
