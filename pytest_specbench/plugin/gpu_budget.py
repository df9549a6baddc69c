"""The GPU the plan sizes and times against (``SpecbenchState.gpu_budget``): its memory,
bandwidth, FLOP/s and interconnect, each from an option, NVML, or the datasheet table
(planning/gpu_specs.py), with where it came from."""

from __future__ import annotations

from typing import Any

import pytest

from .state import SpecbenchState


def gpu_budget(config: pytest.Config, st: SpecbenchState, inventory: list[Any] | None) -> None:
    """What the planner sizes against: --specbench-gpu-memory, else the smallest chosen GPU of
    the inventory (None: the matrix has no GPU backend); with FLOP/s and link (planning/interconnect.py)."""
    import dataclasses

    from ..gpus import inventory as gpus
    from ..planning import eta, plan
    from ..planning.gpu_specs import spec_for

    given = config.getoption("specbench_gpu_memory")
    bw_given = config.getoption("specbench_gpu_bandwidth")
    named = config.getoption("specbench_gpu", None)
    inv = [g for g in inventory or [] if st.gpus is None or g.index in st.gpus]
    g = min(inv, key=lambda g: g.memory_total_mib) if inv else None
    bw, src = (bw_given, "--specbench-gpu-bandwidth") if bw_given else (None, "")
    spec = spec_for(named) if named else None
    if spec is not None:  # --specbench-gpu NAME: the datasheet's figures, whatever NVML says
        bw, src = bw or spec.bandwidth, src or f"datasheet value for {named} ({spec.source})"
        mem = given or spec.memory_bytes
        mem_src = "--specbench-gpu-memory" if given else spec.memory_source
        st.gpu_budget = plan.GPUBudget(mem, bw, named, src, memory_source=mem_src)
    else:
        if bw is None and g is not None:  # NVML (bus width x max memory clock), else the name table
            bw, src = gpus.memory_bandwidth(g.index), "NVML: memory bus width x max memory clock"
            if bw is None:
                bw, src = eta.bandwidth_for(g.name), f"datasheet value for {g.name}"
        if given:
            st.gpu_budget = plan.GPUBudget(
                given, bw, "--specbench-gpu-memory", src if bw else "", memory_source="--specbench-gpu-memory"
            )
        elif g is not None:
            st.gpu_budget = plan.GPUBudget(
                g.memory_total_mib * 1024**2, bw, g.name, src if bw else "", memory_source="NVML"
            )
    if st.gpu_budget is None:
        return
    from ..planning import interconnect

    flops = config.getoption("specbench_gpu_flops", None)
    link, link_src = config.getoption("specbench_gpu_link", None), "--specbench-gpu-link"
    if link is None and inv and spec is None:
        found = gpus.link(tuple(x.index for x in inv))
        if found is not None:
            kind, a, b = found
            link = (
                interconnect.LINKS.get(f"nvlink{a}", interconnect.DEFAULT)
                if kind == "nvlink"
                else interconnect.pcie(a, b)
            )
            link_src = "NVML: " + (f"NVLink {a}, {b} links" if kind == "nvlink" else f"PCIe {a}.0 x{b}")
    if link is None and spec is not None:
        link, link_src = interconnect.LINKS[spec.link], f"datasheet entry for {named}"
    st.gpu_budget = dataclasses.replace(
        st.gpu_budget,
        flops=flops,
        flops_source="--specbench-gpu-flops" if flops else "",
        link=link,
        link_source=link_src if link is not None else "",
    )
