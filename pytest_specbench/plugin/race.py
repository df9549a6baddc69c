"""Racing (``--specbench-race``): early stopping, methods dropped against a shape's leader, and a
swept method's settings tuned on the cells its ``tune`` names before the rest run.

One ``Race`` per process (the run refuses ``-n``: a race decides from the cells this process
measured). Per cell it gives the rounds rule (``rule``: looks from min(rounds, 3) to the cap,
stopping when settled, and, for a method that races, its interval against the shape's leader
after every look); it records each measured cell (``record``), keeps the cells dropped or tuned
out with why (``dropped``, ``tuned_out``, in the JSON under ``specbench``), and says before a cell
starts whether it is skipped (``skip_reason``: its method lost at a cheaper shape of the same
workload, or its setting was tuned out). The statistics are report/sequential.py's;
docs/metrics.md "Early stopping and racing" says what is decided and what is assumed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..matrix.cells import Cell, Matrix
from ..report import paired, sequential
from ..report.sequential import Looks
from ..workloads.rounds import Rule

MIN_ROUNDS = 3  # a racing cell's first look: min(rounds, this)
COSTLIER = ("concurrency", "context_tokens", "output_tokens")  # larger: a costlier sibling shape


def shape_label(cell: Cell) -> str:
    """A cell's id without its method: the shape (``tp1-c4-out32``)."""
    name = cell.method.name
    i = cell.id.find(f"{name}-")
    return cell.id[i + len(name) + 1 :] if i >= 0 else cell.id


def forced(cell: Cell) -> bool:
    spec = cell.method.speculative
    return spec is not None and spec.simulate_accept_length is not None


def costlier(cell: Cell, than: Cell) -> bool:
    """Same method, workload, TP and other axes, and at least as large a concurrency, context and
    output as ``than``, one of them larger."""
    p, q = cell.params(), than.params()
    if p["method"] != q["method"] or p["workload"] != q["workload"]:
        return False
    for k in set(p) | set(q):
        if k not in COSTLIER and p.get(k) != q.get(k):
            return False
    bigger = [(p.get(k) or 0) - (q.get(k) or 0) for k in COSTLIER]
    return all(d >= 0 for d in bigger) and any(d > 0 for d in bigger)


def out_text(cell_id: str, info: dict[str, Any]) -> str:
    return (
        f"out of the race: lost to {info['lost_to']} by x{info['ratio']:.3f} "
        f"[{info['lo']:.3f}, {info['hi']:.3f}] at shape {info['shape']}"
    )


@dataclass
class Entry:
    """A measured cell at its shape: its per-round speed (relative to its interleaved baseline
    when ``relative``, else its own rounds' tok/s or 1 / p50 latency)."""

    cell_id: str
    method: str
    speeds: list[float | None]
    relative: bool
    looks: Looks | None
    can_lead: bool

    @property
    def point(self) -> float:
        logs = [math.log(s) for s in self.speeds if s]
        return math.exp(sum(logs) / len(logs)) if logs else 0.0


def speeds_of(own: list[float], ref: list[float] | None, closed: bool) -> list[float | None]:
    """Per round: the cell's speed over its interleaved baseline's round (tok/s ratio, or the
    baseline's p50 over the cell's), or without one its own tok/s (1 / p50 in an open loop)."""
    if ref is not None:
        return [(a / b if closed else b / a) if a and b else None for a, b in zip(own, ref, strict=False)]
    return [(a if closed else 1 / a) if a else None for a in own]


def _result_speeds(result: dict[str, Any]) -> tuple[list[float | None], bool]:
    m = result["metrics"]
    closed = not result["params"].get("request_rate")
    own = paired.round_rates(m, result.get("round_times") or []) if closed else paired.round_p50s(m)
    ref = m.get("reference")
    if ref:
        theirs = ref.get("round_tokens_per_s") if closed else ref.get("round_latency_s_p50")
        return speeds_of(own, [x or 0.0 for x in theirs or []], closed), True
    return speeds_of(own, None, closed), False


@dataclass
class Race:
    matrix: Matrix
    shapes: dict[tuple[Any, ...], list[Entry]] = field(default_factory=dict)
    losses: dict[str, list[tuple[Cell, dict[str, Any]]]] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    tuned_out: list[dict[str, Any]] = field(default_factory=list)
    tuning: dict[str, dict[str, Any]] = field(default_factory=dict)  # sweep -> its decision
    _cells: dict[tuple[tuple[Any, ...], str], Cell] = field(default_factory=dict)
    _seen: dict[str, tuple[list[float | None], bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.baselines = self.matrix.baselines()
        self._cells = {(paired.axes(c.params()), c.method.name): c for c in self.matrix.cells()}

    # ------------------------------------------------------------------ while a cell runs

    def races(self, cell: Cell) -> bool:
        """Whether the cell's method races (can be dropped): not its shape's baseline. A forced
        accept length races too, but only in its own pool (``same_pool``): its baseline and the
        other forced lengths of its sweep, a ground truth whose order is known; it never leads a
        drafter nor is led by one."""
        return self.baselines.get(cell.method.name) not in (None, cell.method.name)

    def same_pool(self, cell: Cell, shape: tuple[Any, ...], rival: str) -> bool:
        """Whether the method ``rival`` at ``shape`` races against ``cell``: drafters against
        drafters, a forced length against the forced lengths of its own sweep."""
        if rival == self.baselines.get(cell.method.name):  # its baseline's own cell (not interleaved)
            return True
        other = self._cells.get((shape, rival))
        if other is None or forced(other) != forced(cell):
            return False
        return not forced(cell) or other.method.sweep == cell.method.sweep

    def rule(self, cell: Cell) -> Rule:
        w = cell.workload
        looks = Looks(min(w.rounds, MIN_ROUNDS), w.round_cap)
        if not self.races(cell):
            return Rule(looks)

        def race(own: list[float], ref: list[float] | None, closed: bool, lk: Looks) -> Any:
            self._seen[cell.id] = (speeds_of(own, ref, closed), ref is not None)
            return self.vs_leader(cell, *self._seen[cell.id], lk)

        return Rule(looks, race)

    def leader(self, cell: Cell, relative: bool) -> Entry | None:
        """The fastest cell measured so far at ``cell``'s shape that may lead (not dropped, in its
        pool, with a verdict), in the same units; with an interleaved baseline, the baseline
        itself (1.0 every round) is in the running."""
        shape = paired.axes(cell.params())
        rivals = [
            e
            for e in self.shapes.get(shape, [])
            if e.can_lead
            and e.relative == relative
            and e.method != cell.method.name
            and self.same_pool(cell, shape, e.method)
        ]
        base = self.baselines.get(cell.method.name)
        if relative and base:
            bc = self._cells.get((shape, base))
            rivals.append(
                Entry(bc.id if bc else base, base, [1.0] * cell.workload.round_cap, True, None, True)
            )
        return max(rivals, key=lambda e: e.point, default=None)

    def vs_leader(
        self, cell: Cell, speeds: list[float | None], relative: bool, looks: Looks
    ) -> tuple[Any, dict[str, Any]] | None:
        lead = self.leader(cell, relative)
        if lead is None:
            return None
        pairs = [(a, b) for a, b in zip(speeds, lead.speeds, strict=False) if a and b]
        iv = paired.ratio_interval(
            [a for a, _ in pairs], [b for _, b in pairs], sequential.union(looks, lead.looks)
        )
        if iv is None or iv.lo is None:
            return None
        info = {
            "status": "dropped",
            "lost_to": lead.cell_id,
            "ratio": round(iv.point, 6),
            "lo": round(iv.lo, 6),
            "hi": round(iv.hi, 6),
            "shape": shape_label(cell),
        }
        return iv, info

    # ------------------------------------------------------------------ after a cell ran

    def record(self, cell: Cell, result: dict[str, Any]) -> str | None:
        """A measured cell: kept as a rival at its shape, or, when it stopped out of the race,
        kept with the dropped cells (never a measured result); returns the dropped cell's text."""
        info = (result.get("extra_info") or {}).get("race")
        if info and info.get("status") == "dropped":
            self.losses.setdefault(cell.method.name, []).append((cell, info))
            self.dropped.append(
                {k: result[k] for k in ("cell_id", "group", "params", "metrics", "extra_info", "round_times")}
            )
            return out_text(cell.id, info)
        # the speeds the race read while the cell ran (a cell that does not race: from its result)
        speeds, relative = self._seen.pop(cell.id, None) or _result_speeds(result)
        m = result["metrics"]
        ref = m.get("reference") or {}
        can_lead = (
            self.races(cell)
            and paired.no_verdict_reason(m, "the cell") is None
            and not ref.get("errors")
            and not ref.get("saturated")
        ) or self.baselines.get(cell.method.name) == cell.method.name
        entry = Entry(
            cell.id, cell.method.name, speeds, relative, Looks.of(result.get("extra_info")), can_lead
        )
        self.shapes.setdefault(paired.axes(cell.params()), []).append(entry)
        return None

    # ------------------------------------------------------------------ before a cell starts

    def skip_reason(self, cell: Cell) -> str | None:
        """Why a cell does not run: its setting was tuned out, or its method lost at a cheaper
        shape of the same workload (recorded with the dropped cells)."""
        why = self.tuned_out_reason(cell)
        if why:
            return why
        for lost_at, info in self.losses.get(cell.method.name, []):
            if costlier(cell, lost_at):
                self.dropped.append(
                    {
                        "cell_id": cell.id,
                        "group": cell.group.id,
                        "params": cell.params(),
                        "metrics": None,
                        "extra_info": {
                            "race": {**info, "skipped": True},
                            "rounds_run": 0,
                            "stop_reason": "dropped",
                        },
                    }
                )
                return out_text(cell.id, info)
        return None

    def tuned_out_reason(self, cell: Cell) -> str | None:
        from .tune import deciding, decision

        tune = getattr(cell.method, "tune", None)
        if tune is None or deciding(cell):
            return None
        d = self.tuning.get(cell.method.sweep) or decision(self, cell.method.sweep, tune)
        self.tuning[cell.method.sweep] = d
        if cell.method.name in d["kept"] or not d["ranking"]:
            return None
        why = f"tuned out at {d['at']}: best was {d['kept'][0]}"
        self.tuned_out.append({"cell_id": cell.id, "params": cell.params(), "reason": why})
        return why

    def doc(self) -> dict[str, Any]:
        return {"dropped_cells": self.dropped, "tuned_out": self.tuned_out, "tuning": self.tuning}


def setup(config: pytest.Config, st: Any) -> None:
    """--specbench-race: refused under -n (a race decides from the cells this process measured)."""
    if not config.getoption("specbench_race", False) or st.matrix is None:
        return
    from .xdist_sched import workers

    if workers(config) > 1 and not hasattr(config, "workerinput"):
        raise pytest.UsageError(
            "--specbench-race decides from the cells measured in one process (a method is dropped "
            "against the leader its process measured); run it without -n"
        )
    st.race = Race(st.matrix)


def skip_if_out(st: Any, cell: Cell, item: pytest.Item) -> None:
    """Skip a bench item whose cell is out of the race or tuned out (before its engine starts)."""
    why = st.race.skip_reason(cell) if st.race is not None and not item.get_closest_marker("skip") else None
    if why:
        pytest.skip(f"cell {cell.id} skipped: {why}")


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The summary's lines for dropped and tuned-out cells (never among the measured)."""
    race = (doc.get("specbench") or {}).get("race")
    if not race:
        return []
    out = []
    for d in race.get("dropped_cells") or ():
        info = d["extra_info"]["race"]
        ran = d["extra_info"].get("rounds_run", 0)
        out.append(
            f"{d['cell_id']}: {out_text(d['cell_id'], info)}"
            + (f" (after {ran} rounds; not a measured result)" if ran else " (not run)")
        )
    for t in race.get("tuned_out") or ():
        out.append(f"{t['cell_id']}: {t['reason']} (not run)")
    if not out:
        return []
    return [f"racing: {len(out)} cells out of the race or tuned out (none of them ranked or a baseline):"] + [
        f"  {ln}" for ln in out
    ]


def order(items: list[pytest.Item], cell_of: Callable[[pytest.Item], Cell | None], st: Any) -> None:
    """Tuned sweeps' deciding cells (and the baseline's cells at their shapes) first, in place,
    keeping the order within each phase."""
    from .tune import first_phase

    if st.race is None:
        return
    first = first_phase([c for c in map(cell_of, items) if c is not None], st.matrix)
    if not first:
        return
    cells = [cell_of(i) for i in items]
    items[:] = (
        [i for i, c in zip(items, cells, strict=True) if c is None]
        + [i for i, c in zip(items, cells, strict=True) if c is not None and c.id in first]
        + [i for i, c in zip(items, cells, strict=True) if c is not None and c.id not in first]
    )
