"""GPUs other processes hold memory on when the run starts (a live service, someone's job): the
run never leases one unsaid. One NVML read before any engine starts (gpus/inventory.py) decides:

- a busy GPU of an explicit pool (``--specbench-gpus``, or the user's ``CUDA_VISIBLE_DEVICES``) is
  refused before the run, naming the GPU, the memory in use and the processes, unless the
  matrix's hooks name it with a ``before_group`` (``hooks: {gpus: [0], ...}``: its service is
  expected, and stopped once for the window of the starts that need the GPU, hook_windows.py) or
  ``--specbench-allow-busy-gpus`` names it (leased beside those processes);
- without an explicit pool a busy GPU is left out (inventory.choose), unless hooks or the option
  name it: then it joins the pool.

A busy GPU leased either way is flagged: in the header and the summary of the run's screen and in
the results JSON (``specbench.gpus_busy``). ``--specbench-plan`` refuses nothing and says which
GPUs of its schedule a run would refuse or lease busy (``plan_lines``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .group_hooks import hook_gpus

if TYPE_CHECKING:
    from .state import SpecbenchState

HOOKS, ALLOWED, REFUSED = "hooks", "allowed", "refused"
OPTION = "--specbench-allow-busy-gpus"


def hooked(st: SpecbenchState) -> set[int]:
    """The GPUs the matrix's hooks name with a ``before_group``: a service lives there, stopped
    by it for the starts that need the GPU."""
    if st.matrix is None:
        return set()
    return {
        i for g in st.matrix.groups() if dict(g.method.hooks).get("before_group") for i in hook_gpus(g) or ()
    }


def admit(
    config: pytest.Config, st: SpecbenchState, inv: list[Any], chosen: tuple[int, ...], source: str | None
) -> tuple[int, ...]:
    """The run's pool once busy GPUs are refused or admitted (``source``: what named the pool,
    None when it was chosen from the free GPUs); each busy GPU leased goes to ``st.gpu_busy``.
    Raises pytest.UsageError for a busy GPU of an explicit pool that neither hooks nor the option
    name (not under --specbench-plan, which says it instead, or --collect-only)."""
    from ..gpus import inventory as gpus

    allowed = set(config.getoption("specbench_allow_busy_gpus", None) or ())
    known = sorted(g.index for g in inv)
    if inv and allowed - set(known):
        raise pytest.UsageError(
            f"{OPTION} names GPU(s) {sorted(allowed - set(known))}; this host has {known}"
        )
    hooks = hooked(st)
    wanted = set(chosen) if source is not None else set(chosen) | hooks | allowed
    busy = [g for g in inv if g.busy_reason and g.index in wanted]
    if not busy:
        return chosen
    procs = gpus.gpu_processes(tuple(g.index for g in busy))
    for g in busy:
        h = gpus.held(g, procs.get(g.index, []))
        h["leased"] = HOOKS if g.index in hooks else ALLOWED if g.index in allowed else REFUSED
        st.gpu_busy.append(h)
    refused = [h for h in st.gpu_busy if h["leased"] == REFUSED]
    if refused and not (config.getoption("specbench_plan") or config.getoption("collectonly")):
        raise pytest.UsageError(refusal(refused, chosen, source or "the pool"))
    if source is not None:
        return chosen
    return tuple(sorted(set(chosen) | {h["gpu"] for h in st.gpu_busy}))


def refusal(refused: list[dict[str, Any]], pool: tuple[int, ...], source: str) -> str:
    """Why the run does not start: the busy GPUs, what holds them, and the three ways on."""
    from ..gpus.inventory import held_text

    ids = [h["gpu"] for h in refused]
    rest = ",".join(str(i) for i in pool if i not in ids) or "..."
    one = ",".join(map(str, ids))
    return (
        f"{source} includes busy GPU{'s' if len(ids) > 1 else ''} {one} ("
        + "; ".join(held_text(h) for h in refused)
        + f"): a run leases no GPU other processes hold memory on. Leave {'them' if len(ids) > 1 else 'it'} "
        f"out (--specbench-gpus {rest}), stop the service for the starts that need the GPU with hooks "
        f"(hooks: {{gpus: [{', '.join(map(str, ids))}], before_group: ..., after_group: ...}}, "
        f'docs/matrix.md "Hooks"), or lease it beside them: {OPTION} {one}'
    )


def flag_lines(st: SpecbenchState) -> list[str]:
    """The busy GPUs the run leases, for the screen's header and summary."""
    from ..gpus.inventory import held_text

    out = []
    for h in st.gpu_busy:
        if h["leased"] == HOOKS:
            out.append(
                f"busy GPU {h['gpu']} leased for its hooks' service ({held_text(h)}): its before_group "
                "stops it once for the starts that need the GPU, its after_group starts it after them"
            )
        elif h["leased"] == ALLOWED:
            out.append(
                f"busy GPU {h['gpu']} leased beside other processes ({OPTION}; {held_text(h)}): its "
                "cells share the GPU's memory and compute with them"
            )
    return out


def plan_lines(st: SpecbenchState, sched: Any) -> list[str]:
    """What the plan says of each busy GPU of its pool: the engine starts its schedule puts there,
    and whether a run refuses the GPU, stops its service for them (hooks) or leases it beside the
    processes (the option)."""
    from ..gpus.inventory import held_text

    out = []
    for h in st.gpu_busy:
        i = h["gpu"]
        n = sum(1 for s in sched.slots if i in s.gpus) if sched is not None else None
        starts = f"{n} engine start(s) of the schedule lease it" if n is not None else "the run may lease it"
        if h["leased"] == REFUSED:
            why = (
                f"a run refuses it: leave it out of --specbench-gpus, stop its service with hooks "
                f"(hooks: {{gpus: [{i}], ...}}) or lease it beside them with {OPTION} {i}"
            )
        elif h["leased"] == HOOKS:
            why = "its hooks' service: stopped once for the window of the starts that lease it (below)"
        else:
            why = f"leased beside those processes ({OPTION})"
        out.append(f"GPU {i} is busy now ({held_text(h)}): {starts}; {why}")
    return out
