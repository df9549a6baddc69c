"""The long end-of-run summary (``--specbench-summary full``): the cells' table, the views, the
engine starts and settings, the warnings, each cell's details; the default is one screen
(terminal.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..report import breakeven, control, decide, drift, provenance
from ..report import summary as report
from ..report.summary import failure_headline
from ..report.tuning import tuning
from . import sentinel
from .state import SpecbenchState


def engine_starts_line(spec: dict[str, Any]) -> str:
    """The groups started (a failed one marked) and the interleaved baselines' instances."""
    refs = spec.get("reference_engines") or []
    started = [e for e in spec["engine_groups"] if "resumed_from" not in e]
    return (
        f"engine starts: {spec['engine_starts']} "
        f"({', '.join(e['group'] + ('' if e['ok'] else ' FAILED') for e in started)})"
        + (
            f"; baseline instances for interleaved rounds: {len(refs)} "
            f"({', '.join(e['group'] + ' in ' + e['worker'] for e in refs)})"
            if refs
            else ""
        )
    )


def full_lines(st: SpecbenchState, config: pytest.Config) -> list[str]:
    assert st.doc is not None
    out: list[str] = []
    target = config.getoption("benchmark_json", None)
    out += report.table(st.doc)
    out += drift.lines(st.doc)
    out += control.lines(st.doc)
    spec = st.doc["specbench"]
    out.append(engine_starts_line(spec))
    if spec.get("resumed_cells"):
        out.append(
            f"resumed: {len(spec['resumed_cells'])} cells copied from "
            f"{config.getoption('specbench_resume')} (not run again)"
        )
    if st.resume_refused:
        out.append(
            f"resume refused {len(st.resume_refused)} cells (they ran again; --specbench-resume-any-machine "
            f"copies them): {'; '.join(st.resume_refused)}"
        )
    shapes = decide.ranked_shapes(st.doc)
    if shapes:
        out.append(
            "fastest method per cell shape (closed loop: tok/s, x = paired-rounds speedup vs AR [95% CI]; "
            "open loop: p50 latency, x = AR p50 / method p50, > 1 faster [paired-rounds 95% CI]; next M xR "
            "vs P: M over P, the method before it, over paired rounds; with an interleaved baseline: "
            "ordered by x):"
        )
        out += [f"  {label}: {decide.ranking(rows)}" for label, rows in shapes]
        if any(r.get("_ranked_by") == "interleaved" for _, rows in shapes for r in rows):
            out.append(f"  {decide.INTERLEAVED_NOTE}")
    from ..report.pareto import crossover

    cross = crossover(st.doc)
    if cross:
        out.append("crossover (per method, TP and shape: against its baseline, by concurrency):")
        out += [f"  {ln}" for ln in cross]
    tune = tuning(st.doc)
    if tune:
        out.append("tuning (per shape and swept method: best setting, runner-up, separated or not):")
        out += [f"  {ln}" for ln in tune]
    from ..report.versus import lines as versus_lines

    vs = versus_lines(st.doc)
    if vs:
        out.append("comparisons between methods (the matrix's compare: A over B, paired rounds [95% CI]):")
        out += [f"  {ln}" for ln in vs]
    out += decide.warnings(st.doc)
    tps = decide.tp_scaling(st.doc)
    if tps:
        out.append("output tok/s by TP size (and per GPU):")
        out += [f"  {ln}" for ln in tps]
    held = decide.sustained_rates(st.doc)
    if held:
        out.append("open loop, the highest request rate each method sustained unsaturated:")
        out += [f"  {ln}" for ln in held]
    cap = decide.slo_capacity(st.doc)
    if cap:
        out.append(f"concurrency that holds the SLO for >= {decide.SLO_TARGET:.0%} of requests:")
        out += [f"  {ln}" for ln in cap]
    hits = decide.prefix_hits(st.doc)
    if hits:
        out.append(decide.PREFIX_HEADLINE)
        out += [f"  {ln}" for ln in hits]
    be = breakeven.lines(st.doc)
    if be:
        out.append(
            "forced acceptance (a verify step's cost, not a drafter; docs/break-even.md): the accept "
            "length where the speedup over AR crosses 1 [its interval]:"
        )
        out += [f"  {ln}" for ln in be]
    keys, by_group = provenance.differences(st.doc)
    if keys:
        out.append(f"engine settings that differ between groups ({', '.join(keys)}):")
        out += [f"  {g}: " + ", ".join(f"{k}={v}" for k, v in vals.items()) for g, vals in by_group.items()]
    for e in spec["engine_groups"]:
        pve = report.planned_vs_engine(e)
        if pve:
            out.append(pve)
    oracle = [b for b in st.doc["benchmarks"] if "oracle_exact" in b["extra_info"]]
    if oracle:
        off = [b for b in oracle if not b["extra_info"]["oracle_exact"]]
        out.append(
            f"oracle (draft = target): {len(oracle) - len(off)} of {len(oracle)} cells accept exactly "
            "steps + 1"
            + "".join(
                f"; {b['param']}: {b['extra_info'].get('accept_length')!r}, expected "
                f"{b['extra_info']['oracle_accept_expected']}"
                for b in off
            )
        )
    from .race import summary_lines as race_lines

    out += race_lines(st.doc)
    for f in spec["failed_cells"]:
        out.append(f"failed: {f['nodeid']} ({f['phase']}): {failure_headline(f)}")
    if spec.get("crashed_workers"):
        out.append(
            f"CRASHED: {len(spec['crashed_workers'])} xdist worker(s) died mid-cell (xdist replaced them and "
            "ran the rest): "
            + "; ".join(
                f"{c['cell']} ({'measured again' if c['measured_again'] else 'not measured'}; {c['xdist']})"
                for c in spec["crashed_workers"]
            )
        )
    if spec.get("interrupted"):
        target = config.getoption("benchmark_json", None)
        out.append(
            f"INTERRUPTED ({spec['interrupted']['why']}) in cell {spec['interrupted'].get('cell') or '-'}: "
            f"{len(st.doc['benchmarks'])} cells measured are kept"
            + (
                f"; the same command (same -k) with --specbench-resume "
                f"{Path(st.written_to or str(getattr(target, 'name', target))).resolve()} runs the rest"
                if target
                else ""
            )
        )
    out.append(wall_vs_plan(st))
    target = config.getoption("benchmark_json", None)
    if target and (hasattr(target, "write") or st.written_to == str(target)):
        out.append(
            f"wrote {target.name if hasattr(target, 'write') else target} ({len(st.doc['benchmarks'])} cells)"
        )
    elif st.written_to:
        out.append(f"wrote {st.written_to} ({len(st.doc['benchmarks'])} cells), not {target}")
    return out


def wall_vs_plan(st: SpecbenchState) -> str:
    """The run's wall time next to the plan's ETA for the cells that ran (and engine starts)."""
    import time

    wall = time.monotonic() - st.t_start
    ran = {r["cell_id"] for r in st.results if not (r.get("extra_info") or {}).get("resumed_from")}
    ran |= {f["cell"] for f in st.failures}
    plan = st.get_plan()
    etas = [plan.cells[c].eta_s for c in ran if c in plan.cells]
    known = [e for e in etas if e is not None]
    started = [e["group"] for e in st.engine_events if "ok" in e]  # a sentinel's restart included
    # the plan's own start model: each start, plus a process's first (import, cold caches)
    starts = plan.starts_s([g for g in started if g in plan.groups])
    if not known:
        return (
            f"run wall {wall:.0f} s; the plan has no ETA for these cells "
            "(--specbench-plan-from a results JSON gives one)"
        )
    sent = sentinel.planned_rounds_s(st.config, st, plan, st.sentinels)  # their restarts are in `starts`
    line = (
        f"run wall {wall:.0f} s; plan ETA {sum(known) + starts + sent:.0f} s for {len(known)} of "
        f"{len(ran)} cells and {len(started)} engine starts"
        + (f" (drift sentinels included: {len(st.sentinels)})" if st.sentinels else "")
    )
    from .packed_schedule import plan_schedule
    from .xdist_sched import workers

    k = workers(st.config)
    if k > 1 and st.matrix is not None:  # in parallel: the packed schedule's makespan, not the sum
        cells = [c for c in st.matrix.cells() if c.id in ran]
        sched, _ = plan_schedule(st.config, st, cells)
        if sched is not None:
            line += f" in series, {sched.makespan_s:.0f} s packed on {k} workers"
    return line
