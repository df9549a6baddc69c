"""The plan as text (``--specbench-plan``): per group its sizes, notes and planned start, per
cell run or SKIP with its ETA, and the totals. Reads only ``Plan.as_dict``."""

from __future__ import annotations

from typing import Any

from .shapes import GiB


def _gpu_lines(plan: Any, g: dict[str, Any] | None) -> list[str]:
    """The GPU the plan sizes and times against: memory, bandwidth, FLOP/s and link, each with
    where it comes from (an assumption says so)."""
    if not g:
        return ["GPU: unknown (no NVML, no --specbench-gpu-memory)"]
    from .plan import peak_flops

    mem = f"{g['memory_bytes'] / GiB:.1f} GiB"
    mem_src = f"memory: {g['memory_source']}; " if g.get("memory_source") else ""
    bw = (
        f"{g['bandwidth'] / 1e12:.2f} TB/s ({g.get('bandwidth_source') or 'given'})"
        if g.get("bandwidth")
        else "bandwidth unknown (--specbench-gpu-bandwidth TB/s gives a roofline and decode ETAs)"
    )
    flops, src = peak_flops(plan.gpu)
    link = g.get("link") or {}
    how = (
        f"{link['name']} ({g.get('link_source') or 'given'})"
        if link
        else "nvlink (assumed: what the calibration ran on; --specbench-gpu-link pcie5x16 ... for a PCIe box)"
    )
    return [f"GPU: {g['name']}, {mem}, {bw}", f"     {mem_src}{flops / 1e12:.0f} TFLOP/s ({src}); link {how}"]


def _secs(s: float) -> str:
    return "<1 s" if s < 0.5 else f"{s:.0f} s"


def _why_no_eta(d: dict[str, Any], previous_source: str) -> str:
    """Why the runnable cells without an ETA have none, each reason with what would give one; an
    option already given is never the advice."""
    from ..matrix.schema import ENDPOINT_BACKENDS

    groups = {gp["group"]: gp for gp in d["groups"]}
    endpoint = unsized = other = 0
    unsized_why = ""
    for c in d["cells"]:
        if not c["feasible"] or c["eta_s"] is not None:
            continue
        gp = groups.get(c["group"]) or {}
        if gp.get("backend") in ENDPOINT_BACKENDS:
            endpoint += 1
        elif gp.get("unsized"):
            unsized, unsized_why = unsized + 1, unsized_why or gp["unsized"]
        else:
            other += 1
    g = d["gpu"] or {}
    parts = []
    if endpoint:
        parts.append(
            f"{endpoint} of external endpoints (the planner does not time a server the plugin does not start)"
        )
    if unsized:
        parts.append(
            f"{unsized} of a model the planner cannot size ({unsized_why}: give the model's local directory, "
            "or have its config.json in the hub cache)"
        )
    if other and not g.get("bandwidth"):
        how = (
            f"no datasheet bandwidth for {g['name']}: give --specbench-gpu-bandwidth TB/s"
            if g.get("name") and not g["name"].startswith("--")  # a card's name, not the option sizing it
            else "give --specbench-gpu NAME (e.g. H200, H100, A100) or --specbench-gpu-bandwidth"
        )
        parts.append(f"{other} without a GPU bandwidth ({how})")
    elif other:
        parts.append(f"{other} the planner cannot time")
    tail = (
        f"{previous_source} (--specbench-plan-from) has no measured rounds for them"
        if previous_source
        else "--specbench-plan-from a previous results JSON times them from its measured rounds"
    )
    return "; ".join(parts) + "; " + tail


def format_plan(plan: Any, selected: list[str] | None = None) -> list[str]:
    d = plan.as_dict(selected)
    g = d["gpu"]
    lines = _gpu_lines(plan, g)
    for gp in d["groups"]:
        head = f"group {gp['group']} ({gp['backend']}, TP={gp['tp']}, model {gp['model']})"
        if gp["error"]:
            lines.append(f"{head}: CANNOT RUN: {gp['error']}")
        else:
            parts = []
            if gp["weight_bytes_per_gpu"] is not None:
                parts.append(f"weights {gp['weight_bytes_per_gpu'] / GiB:.2f} GiB/GPU")
            if gp["kv_bytes_per_token"] is not None:
                parts.append(f"KV {gp['kv_bytes_per_token'] / 1024:.1f} KiB/token/GPU")
            if gp["kv_tokens_capacity"] is not None:
                parts.append(f"KV capacity {gp['kv_tokens_capacity']:,} tokens")
            if gp["context_length"]:
                parts.append(f"context {gp['context_length']}")
            if gp["starts"]:
                start = f"start {_secs(gp['start_s'])}"
                if gp["first_start_extra_s"]:
                    start += f" (+{_secs(gp['first_start_extra_s'])} as a process's first)"
                if gp["start_from"] != "model":
                    start += f" ({gp['start_from']})"
                parts.append(start)
            lines.append(
                f"{head}: {', '.join(parts) or '-'}{'' if gp['starts'] else ' (no start: nothing runs)'}"
            )
        lines += [f"    note: {n}" for n in gp["notes"]]
    for c in d["cells"]:
        if not c["feasible"]:
            lines.append(f"  SKIP {c['cell']}: {c['reason']}")
            continue
        eta = "eta ?" if c["eta_s"] is None else f"eta {_secs(c['eta_s'])}"
        if c["eta_s"] is not None and c["round_s"]:
            eta += f" ({c['round_s']:.1f} s a round"
            if c["ttft_s"] is not None and c["eta_from"] == "model":
                eta += f", TTFT {c['ttft_s']:.2f} s"
            eta += ", measured)" if c["eta_from"] == "measured" else ")"
        bound = f", roofline {c['roofline_tokens_per_s']:,.0f} tok/s" if c["roofline_tokens_per_s"] else ""
        lines.append(f"  run  {c['cell']}: {eta}{bound}{'; ' + c['note'] if c['note'] else ''}")
    n_run = sum(1 for c in d["cells"] if c["feasible"])
    unknown = sum(1 for c in d["cells"] if c["feasible"] and c["eta_s"] is None)
    eta = (
        f"ETA {d['eta_s'] / 60:.1f} min (cells {d['cells_eta_s']:.0f} s, "
        f"engine starts {d['starts_eta_s']:.0f} s, "
        + (f"drift sentinels {d['sentinels_eta_s']:.0f} s, " if d.get("sentinels_eta_s") else "")
        + "one process)"
    )
    if unknown:  # the headline says which part it covers
        eta = (
            f"INCOMPLETE ETA, for {n_run - unknown} of {n_run} cells: {eta[4:]}; {unknown} cells have no "
            f"estimate: {_why_no_eta(d, getattr(plan, 'previous_source', ''))}"
        )
    lines.append(
        f"cells: {n_run} to run, {len(d['cells']) - n_run} skipped; "
        f"engine starts: {d['engine_starts']}{restarts_text(d.get('baseline_restarts') or {})}; {eta}"
    )
    bound = [gp["group"] for gp in d["groups"] if gp["starts"] and gp.get("accept_from") == "upper bound"]
    if bound:  # before the totals, which stay the last line
        lines.insert(
            -1,
            f"  an upper bound for {len(bound)} speculative group(s) planned at 1 token per verify step "
            "(what a draft that accepts nothing gives): set speculative.expect_accept_length or "
            "--specbench-plan-from a run that measured it",
        )
    return lines


def restarts_text(restarts: dict[str, int]) -> str:
    """The baselines' restarts for brackets and drift sentinels beside the groups' engine starts
    (" + 11 baseline restarts for brackets"); "" for none."""
    parts = {k: n for k, n in restarts.items() if n}
    if not parts:
        return ""
    total = sum(parts.values())
    noun = "restart" if total == 1 else "restarts"
    if len(parts) == 1:
        ((k, _),) = parts.items()
        return f" + {total} baseline {noun} for {k}"
    return f" + {total} baseline {noun} (" + ", ".join(f"{n} for {k}" for k, n in parts.items()) + ")"
