"""A cell's JSON record, built in one place from its run (workloads' ``CellRun``): a measured
cell's (the JSON's ``benchmarks``; a failed cell's metrics too) and a drift sentinel's or bracket's
(sentinel.py; report/drift.py reads it). The runner (runner.py) and the sentinel (sentinel.py)
run the workload and decide what fails; the metrics and the record's keys are built here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ..matrix.cells import Cell
from .state import SpecbenchState, jsonable

if TYPE_CHECKING:
    from ..deciding.families import Family
    from ..workloads.rounds import CellRun


def run_metrics(run: CellRun, cell: Cell, **more: Any) -> dict[str, Any]:
    """``metrics.cell_metrics`` over a run's timed rounds: its requests, round times and windows;
    ``more``: cell_metrics' other arguments (what a measured cell adds, cell_metrics below)."""
    from ..stats import metrics

    return metrics.cell_metrics(
        run.records,
        run.round_times,
        run.round_output_tokens,
        request_digests=run.round_digests,
        request_rate=cell.request_rate,
        round_windows=run.round_windows,
        one_wave=run.one_wave,
        **more,
    )


def cell_metrics(run: CellRun, cell: Cell, plan_cell: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A measured cell's metrics (its SLO, energy, roofline, server counters and client lag read
    too) and ``metrics.forced_check``'s fields ({} unless its method forces an accept length).
    Takes the run's ``disturbed`` and per-round CPU loads out of its extra info into the metrics,
    where comparisons read them. ``plan_cell``: the plan's entry for the cell, or None."""
    from ..stats import metrics

    disturbed = run.extra.pop("disturbed", None)
    m = run_metrics(
        run,
        cell,
        slo=dict(cell.workload.slo) or None,
        energy_j=run.extra.get("energy_j"),
        roofline_tokens_per_s=plan_cell.roofline_tokens_per_s if plan_cell is not None else None,
        server_spec=run.extra.get("server_spec"),
        server_latency=run.extra.get("server_latency"),
        client_lag=run.extra.get("client_loop_lag"),
        offered_rates=run.extra.get("offered_request_rates") or (),
    )
    forced = metrics.forced_check(cell.method, m.get("accept_length"), cell.output_tokens)
    if forced:  # in the metrics too: comparisons and rankings keep forced cells apart
        m["accept_forced"] = forced["accept_forced"]
    if disturbed:  # in the metrics, where comparisons read it: no verdict for this cell
        m["disturbed"] = disturbed
    loads = run.extra.pop("round_other_cpu_share", None)
    if loads:  # per timed round, as the interleaved baseline's: did a pair's halves bear a load alike
        m["round_other_cpu_share"] = loads
    if run.reference is not None:  # the baseline's interleaved rounds: what "vs ar" divides by
        m["reference"] = run.reference
    return m, forced


def cell_record(
    item: pytest.Item,
    cell: Cell,
    run: CellRun,
    m: dict[str, Any],
    forced: dict[str, Any],
    warm: Any,
    st: SpecbenchState,
) -> dict[str, Any]:
    """A measured cell's record (``m``, ``forced``: cell_metrics'; ``warm``: the engine's warm-up
    at its cells' shapes when this cell started it, else None)."""
    from ..stats import metrics

    return {
        "nodeid": item.nodeid,
        "name": item.name,
        "cell_id": cell.id,
        "group": cell.group.id,
        "params": cell.params(),
        "round_times": run.round_times,
        "warmup": cell.workload.warmup,
        "metrics": jsonable(m),
        "extra_info": {
            **jsonable(run.extra),
            **({"engine_warm": jsonable(warm)} if warm is not None else {}),
            **metrics.oracle_check(cell.method, m.get("accept_length"), cell.output_tokens),
            **forced,
            "cell_fingerprint": cell.fingerprint(),
            "provenance": st.provenance(),
            **(
                {"sweep": cell.method.sweep, "setting": dict(cell.method.setting)}
                if cell.method.sweep
                else {}
            ),
        },
        "worker": st.worker,
    }


def partial_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """A failed cell's metrics for its failed_cells entry: its record's, less the per-request
    columns."""
    return {k: v for k, v in result["metrics"].items() if k not in ("per_request", "request_digests")}


def sentinel_record(
    item: pytest.Item,
    f: Family,
    rid: str,
    run: CellRun,
    m: dict[str, Any],
    *,
    warm: Any,
    at: float,
    baseline_at: float | None,
    after: str | None,
    worker: Any,
) -> dict[str, Any]:
    """A family's sentinel's (or bracket's) record: item ``rid`` re-ran its baseline's first cell
    (``m``: run_metrics'), at ``at``; ``baseline_at``: when that cell finished in this process;
    ``after``: the group a bracket follows, or None."""
    from ..stats.paired import round_p50s

    result = {
        "family": f.baseline,
        # a bracket's drift withholds nothing by report/drift.py's band: report/brackets.py widens
        # its member's intervals instead
        "groups": [f.baseline] if f.bracketed else list(f.groups),
        "cell_id": rid,
        "baseline_cell": f.first.id,
        "nodeid": item.nodeid,
        "round_tokens_per_s": m.get("round_tokens_per_s"),
        "round_latency_s_p50": round_p50s(m),
        "request_digests": m.get("request_digests"),
        "errors": m.get("errors", 0),
        "disturbed": run.extra.get("disturbed"),
        "at": at,
        "baseline_at": baseline_at,
        "engine_warm": warm,
        "worker": worker,
    }
    if f.bracketed and after is not None:
        result.update(bracket_after=after, bracket_before=f.before(after), family_groups=list(f.groups))
        if f.span(after) != (after,):  # a spread family's GPU set, bracketed at its end
            result["bracket_members"] = list(f.span(after))
    if f.spread:  # the GPU set it ran on, of those the family was spread over
        result["gpu_set"] = [f.gpu_set + 1, f.gpu_sets]
        if after is None:
            result["bracket_opens"] = f.members[0] if f.members else None
    return jsonable(result)
