"""Racing (``--specbench-race``): early stopping, methods dropped against a shape's leader, and a
swept method's settings tuned on the cells its ``tune`` names before the rest run. No pytest.

A ``Race`` per process; under -n every worker's and the controller's read and write one decision
state (``store.Store``), so a drop decided on one GPU set skips the cells queued on another. Per
cell it gives the rounds rule (``rule``: looks from ``first_look`` to the cap, stopping when
settled, and, for a method that races, its interval against the shape's leader after every look,
each at 5 % / the shape's family of racing methods); it records each measured cell (``record``),
keeps the cells dropped or tuned out with why (``dropped``, ``tuned_out``, in the JSON under
``specbench``), and says before a cell starts whether it is skipped (``skip_reason``: its method
lost at a cheaper shape of the same workload by more than any measured method gained toward the
costlier one, or its setting was tuned out). A comparison of cells measured apart (no baseline
beside them) never drops unless a drift allowance is given (``drift``), nor one of engines that are
instances of their own until a pair of starts (an A/A control, a second start) measured the
start-to-start variance it then carries (stats/instances.py). The statistics are
stats/sequential.py's and stats/paired.py's; docs/metrics.md "Early stopping and racing" says
what is decided and what is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..engines import separate_instances
from ..matrix.cells import Cell, Matrix
from ..stats import paired, sequential
from ..stats.brackets import drift_range, widen
from ..stats.sequential import Looks
from . import selection
from .entries import (  # noqa: F401  (names the plugin and tests read from here)
    COSTLIER,
    MIN_ROUNDS,
    TP_DRIFT,
    Entry,
    _apart,
    _own_rates,
    _result_speeds,
    costlier,
    first_look,
    forced,
    out_text,
    same_but_tp,
    shape_label,
    speeds_of,
    tp_text,
)
from .stopping import Rule
from .store import Store


@dataclass
class Race:
    matrix: Matrix
    # a comparison whose cells were measured apart (no baseline beside them: a non-interleaving
    # backend, or --specbench-no-interleave): the drift allowed between their groups, by which its
    # interval is widened before a drop; None: such a comparison never drops (docs/metrics.md)
    drift: float | None = None
    store: Store | None = None
    # the indifference zone: a member more than this behind the leader (with the run's confidence)
    # is dropped, one that cannot be is kept and said to be within it (deciding/selection.py)
    delta: float = selection.DELTA  # under -n: the run's one decision state (None: this process's own)
    # under -n: the cells a tuned sweep is decided on (and their baselines' cells at those shapes)
    # in this run's selection; a carried cell waits until each is done (``wait_decided``)
    deciding_ids: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    wait_limit_s: float = 6 * 3600.0
    # called before a carried cell waits (the plugin stops its process's engine of another group
    # there, so its GPUs go back to the pool while the deciding cells need them)
    before_wait: Any = None
    shapes: dict[tuple[Any, ...], list[Entry]] = field(default_factory=dict)
    losses: dict[str, list[tuple[Cell, dict[str, Any]]]] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    tuned_out: list[dict[str, Any]] = field(default_factory=list)
    tuning: dict[str, dict[str, Any]] = field(default_factory=dict)  # sweep -> its decision
    # a bracketed member group -> the levels its two brackets bound (report/brackets.py): its
    # comparisons measured apart drop on the interval widened by them, never without them
    brackets: dict[str, tuple[float, float]] = field(default_factory=dict)
    group_order: list[str] = field(default_factory=list)  # engine groups in the order they recorded
    # the backends whose engines share a process, where a member's baseline runs interleaved beside
    # it (the plugin's; empty: none): a baseline whose every member reads it so stops its own cell
    # at its first look
    interleaving: frozenset[str] = frozenset()
    _cells: dict[tuple[tuple[Any, ...], str], Cell] = field(default_factory=dict)
    _seen: dict[str, tuple[list[float | None], bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.baselines = self.matrix.baselines()
        # twins of a baseline whose engines are instances of their own: A/A controls, never racing
        self.controls = self.matrix.controls(separate_instances)
        # other starts of a member's engine (``NAME-startK``, or a twin under another name), and
        # the methods whose engines are instances of their own: the start-to-start level
        self.twins = self.matrix.twins(separate_instances)
        self.separate = {m.name for m in self.matrix.methods if separate_instances(m.backend)}
        self._cells = {(paired.axes(c.params()), c.method.name): c for c in self.matrix.cells()}
        self._by_id = {c.id: c for c in self.matrix.cells()}

    # ------------------------------------------------------------------ the shared state

    def _emit(self, event: dict[str, Any]) -> None:
        """A decision: into the run's store (every process applies it when it next syncs), or,
        in one process, applied at once."""
        if self.store is None:
            self._apply(event)
        else:
            self.store.append(event)
            self.sync()

    def sync(self) -> None:
        """Apply what any process decided since this one last looked (in the store's order)."""
        if self.store is not None:
            for event in self.store.read_new():
                self._apply(event)

    def _apply(self, ev: dict[str, Any]) -> None:
        kind = ev["kind"]
        if kind == "entry":
            cell = self._by_id[ev["cell_id"]]
            looks = Looks(*ev["looks"]) if ev.get("looks") else None
            entry = Entry(
                ev["cell_id"],
                cell.method.name,
                ev["speeds"],
                ev["relative"],
                looks,
                ev["can_lead"],
                ev.get("rates"),
            )
            self.shapes.setdefault(paired.axes(cell.params()), []).append(entry)
            if cell.group.id not in self.group_order:
                self.group_order.append(cell.group.id)
        elif kind == "loss":
            self.losses.setdefault(ev["method"], []).append((self._by_id[ev["cell_id"]], ev["info"]))
        elif kind == "dropped":
            self.dropped.append(ev["record"])
        elif kind == "tuned_out":
            self.tuned_out.append(ev["record"])
        elif kind == "done":
            self.done.add(ev["cell_id"])
        elif kind == "tuning":  # the first process to decide a sweep decides it for all
            self.tuning.setdefault(ev["sweep"], ev["decision"])

    def finished(self, cell_id: str) -> None:
        """A cell whose outcome is final (measured, out of the race, skipped or failed; said by
        the worker that ran it, or by the controller for a crashed worker's): under -n the carried
        cells of a tuned sweep wait for every deciding cell's."""
        if self.store is not None and cell_id not in self.done:
            self._emit({"kind": "done", "cell_id": cell_id})

    def wait_decided(self, poll_s: float = 0.5) -> list[str]:
        """Under -n, before a tuned sweep is decided: wait until every deciding cell of the run is
        done in some process; returns those still missing at ``wait_limit_s`` (decided without)."""
        import time

        if self.store is None:
            return []
        t_end = time.monotonic() + self.wait_limit_s
        while True:
            self.sync()
            missing = sorted(self.deciding_ids - self.done)
            if not missing or time.monotonic() > t_end:
                return missing
            time.sleep(poll_s)

    # ------------------------------------------------------------------ while a cell runs

    def bracketed(self, member: str, before: float | None, after: float) -> None:
        """A member group's brackets measured: the levels they bound (``before`` None: the
        baseline's own cell, 1.0), which its comparisons measured apart are widened by from now on."""
        self.brackets[member] = drift_range(before, after)

    def apart_drift(self, a: str, b: str) -> tuple[float, str] | None:
        """The drift allowed between two engine groups measured apart (``a``, ``b``: group ids):
        the given allowance (``drift``), else what the run's brackets measured: the largest level
        change one group's brackets bound, compounded over the groups recorded between the two
        (at least one); None where nothing measured drift yet (no decision between them)."""
        if self.drift is not None:
            return self.drift, "allowed"
        steps = [hi / lo - 1 for lo, hi in self.brackets.values() if lo > 0]
        if not steps:
            return None  # nothing measured the drift between groups
        order = self.group_order
        k = abs(order.index(a) - order.index(b)) if a in order and b in order else len(order) or 1
        return min(0.5, (1 + max(steps)) ** max(1, k) - 1), "measured"

    def races(self, cell: Cell) -> bool:
        """Whether the cell's method races (can be dropped): not its shape's baseline. A forced
        accept length races too, but only in its own pool (``same_pool``): its baseline and the
        other forced lengths of its sweep, a ground truth whose order is known; it never leads a
        drafter nor is led by one."""
        return self.races_name(cell.method.name)

    def races_name(self, method: str) -> bool:
        """Whether a method races (its cells are members, not its shape's baseline or an A/A
        control, which runs at every shape)."""
        return self.baselines.get(method) not in (None, method) and method not in self.controls

    def same_pool(self, cell: Cell, shape: tuple[Any, ...], rival: str) -> bool:
        """Whether the method ``rival`` at ``shape`` races against ``cell``: drafters against
        drafters, a forced length against the forced lengths of its own sweep."""
        if rival == self.baselines.get(cell.method.name):  # its baseline's own cell (not interleaved)
            return True
        other = self._cells.get((shape, rival))
        if other is None or forced(other) != forced(cell):
            return False
        return not forced(cell) or other.method.sweep == cell.method.sweep

    def family(self, cell: Cell) -> int:
        """The methods that race in ``cell``'s pool at its shape (``cell``'s own included): the
        comparisons that share the shape's 5 % (each verdict and drop at 5 % / family)."""
        shape = paired.axes(cell.params())
        rivals = {
            name
            for (at, name), other in self._cells.items()
            if at == shape
            and self.races(other)
            and (name == cell.method.name or self.same_pool(cell, shape, name))
        }
        return max(1, len(rivals | {cell.method.name}))

    def rule(self, cell: Cell) -> Rule:
        w = cell.workload
        first = min(first_look(w.round_cap), w.rounds)
        precision = getattr(w, "precision", None)
        if not self.races(cell):
            if precision is None and self.read_beside(cell):
                return Rule(Looks(first, first))  # its members read its rounds beside them
            return Rule(Looks(first, w.round_cap), precision=precision)
        looks = Looks(first, w.round_cap, self.family(cell))

        def race(own: list[float], ref: list[float] | None, closed: bool, lk: Looks) -> Any:
            self._seen[cell.id] = (speeds_of(own, ref, closed), ref is not None)
            return self.vs_leader(cell, *self._seen[cell.id], lk)

        return Rule(looks, race, precision)

    def rivals_to_come(self, cell: Cell) -> int:
        """The racing methods in ``cell``'s pool at its shape that have not recorded a cell there
        yet, nor been dropped there (by any process): those that may still read its rounds."""
        shape = paired.axes(cell.params())
        seen = {e.method for e in self.shapes.get(shape, [])}
        out = {
            (r.get("params") or {}).get("method")
            for r in self.dropped
            if paired.axes(r.get("params") or {}) == shape
        }
        return sum(
            1
            for (at, name), other in self._cells.items()
            if at == shape
            and name != cell.method.name
            and self.races(other)
            and self.same_pool(cell, shape, name)
            and name not in seen
            and name not in out
        )

    def read_beside(self, cell: Cell) -> bool:
        """Whether ``cell`` is a baseline's own cell whose every racing member at its shape reads the
        baseline's rounds interleaved beside it (``interleaving``): no comparison reads this cell's
        rounds, only its own tok/s does, which its first look gives."""
        from ..matrix.interleave import interleaves

        name = cell.method.name
        if self.baselines.get(name) != name or not self.interleaving:
            return False
        shape = paired.axes(cell.params())
        base = self.matrix.method(name)
        members = [
            c
            for (at, m), c in self._cells.items()
            if at == shape and m != name and self.baselines.get(m) == name
        ]
        return bool(members) and all(interleaves(c, base, self.interleaving) for c in members)

    def leader(self, cell: Cell, relative: bool) -> Entry | None:
        """The fastest cell measured so far (by any process) at ``cell``'s shape that may lead (not
        dropped, in its pool, with a verdict), in the same units; with an interleaved baseline,
        the baseline itself (1.0 every round) is in the running."""
        self.sync()
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
        """The cell against its shape's leader so far (deciding/selection.py): the gap of their
        mean log speeds, every round of both, one-sided at the look's level and δ; widened by an
        A/A control's instance effect (members beside a baseline) or by the drift between the
        groups (measured apart: their brackets, else --specbench-race-drift). Its ``status`` is
        behind (dropped), within δ, or open. None: no leader, or no interval."""
        if not relative and self.drift is None and cell.group.id not in self.brackets:
            return None  # measured apart from its baseline: drift between groups could decide it
        lead = self.leader(cell, relative)
        if lead is None:
            return None
        both = sequential.union(looks, lead.looks) or looks
        own = [a for a in speeds if a]
        shape = paired.axes(cell.params())
        rivals = [
            e.speeds
            for e in self.shapes.get(shape, [])
            if e.relative == relative and e.method != cell.method.name and self.races_name(e.method)
        ]
        # beside a baseline instance: the start level is what the pairing leaves (measured apart,
        # the brackets' drift bounds the comparison, each bracket a start of the baseline)
        instance = relative and cell.method.name in self.separate
        starts = self.starts() if instance else None
        if instance and starts is None:
            return None  # engines started apart and no pair of starts measured: nothing bounds u
        g = selection.gap(
            own,
            [b for b in lead.speeds if b],
            both,
            self.delta,
            extra_var=starts.var() if starts else 0.0,
            shape_var=selection.pooled([own, *rivals]),
            extra_df=starts.k if starts else None,
        )
        if g is None:
            return None
        lo, hi = g.lo, g.hi
        info = {
            "status": "dropped",
            "lost_to": lead.cell_id,
            "ratio": round(g.point, 6),
            "lo": round(lo, 6),
            "hi": round(hi, 6),
            "shape": shape_label(cell),
            "family": both.family,
            "delta": self.delta,
            "rounds": [g.n, g.lead_n],
            "rivals_to_come": self.rivals_to_come(cell),
        }
        if starts is not None and starts.tau2 > 0:
            info["instance_sd"] = round(starts.sd, 6)
        band = self.control_band(cell, looks) if relative else 0.0
        if band:  # an instance effect its shape's A/A control established: clear of it, or no drop
            lo, hi = lo * math.exp(-band), hi * math.exp(band)
            info.update(control_band=round(math.exp(band), 6), lo=round(lo, 6), hi=round(hi, 6))
        if not relative and cell.group.id in self.brackets:  # widened by what the brackets bound
            lead_group = self._by_id[lead.cell_id].group.id if lead.cell_id in self._by_id else ""
            at = (1.0, 1.0) if lead.method == self.baselines.get(cell.method.name) else None
            if (at := at or self.brackets.get(lead_group)) is None:
                return None  # a leader measured apart whose drift nothing bounds
            lo, hi = widen(lo, hi, self.brackets[cell.group.id], at)
            info.update(brackets=list(self.brackets[cell.group.id]), lo=round(lo, 6), hi=round(hi, 6))
        elif not relative:  # widened by the drift allowed between the groups, either way
            assert self.drift is not None
            lo, hi = lo * (1 - self.drift), hi / (1 - self.drift)
            info.update(drift_allowed=self.drift, lo=round(lo, 6), hi=round(hi, 6))
        status = selection.classify(lo, hi, self.delta)
        if status != selection.BEHIND:  # not a loss: the leader it was read against
            info["status"] = "within" if status == selection.WITHIN else "open"
            info["leader"] = info.pop("lost_to")
        if g.starts_share:
            info["starts_share"] = round(g.starts_share, 4)
        return selection.Gap(g.point, lo, hi, g.n, g.lead_n, g.df, self.delta, status, g.starts_share), info

    def starts(self) -> Any:
        """The start-to-start variance from the pairs of starts measured so far (stats/instances.py):
        each A/A control's rounds against the baseline beside it, each twin's against its first
        start's at the same shape; None without a pair."""
        from ..stats import instances

        pairs = []
        for es in self.shapes.values():
            logs = {e.method: [math.log(s) for s in e.speeds if s] for e in es if e.relative}
            ids = {e.method: e.cell_id for e in es if e.relative}
            for m, xs in logs.items():
                other = self.controls.get(m) or self.twins.get(m)
                p = None
                if m in self.controls:
                    p = instances.pair_of(ids[m], str(other), xs)
                elif other in logs:
                    p = instances.pair_of(ids[m], ids[str(other)], xs, logs[str(other)])
                if p is not None:  # one pair per two starts: a group's start serves its every shape
                    pairs.append(((m, other, self._by_id[ids[m]].tp if ids[m] in self._by_id else None), p))
        return instances.estimate(instances.per_start(pairs))

    def control_band(self, cell: Cell, looks: Looks) -> float:
        """The instance effect an A/A control (a twin of the baseline, report/control.py) measured
        so far at ``cell``'s shape established: its interval against the baseline beside it, where
        that excludes 1, read as its far end from 1 (|log|); 0 without a control there or where
        its interval spans 1. A drop's interval is widened by it either way."""
        from ..stats.drift import instance_band as band

        widest = 0.0
        for e in self.shapes.get(paired.axes(cell.params()), []):
            if e.method not in self.controls or not e.relative:
                continue
            iv = paired.unpaired_ratio_interval([s for s in e.speeds if s], [1.0], e.looks or looks)
            if iv is not None and iv.lo and iv.hi:
                widest = max(widest, band(iv.lo, iv.hi))
        return widest

    # ------------------------------------------------------------------ after a cell ran

    def record(self, cell: Cell, result: dict[str, Any]) -> str | None:
        """A measured cell: kept as a rival at its shape, or, when it stopped out of the race,
        kept with the dropped cells (never a measured result); returns the dropped cell's text."""
        info = (result.get("extra_info") or {}).get("race")
        ref_m = result["metrics"].get("reference") or {}
        why = paired.no_verdict_reason(result["metrics"], "the cell") or (
            "its baseline's rounds beside it failed or saturated"
            if ref_m.get("errors") or ref_m.get("saturated")
            else None
        )
        if info and info.get("status") == "dropped" and why:  # never dropped: a measured result
            info.update(status="kept", kept_because=f"{why}: a cell without a verdict is never dropped")
            result["extra_info"]["stop_reason"] = "disturbed"
            result["extra_info"]["rounds_stop"] = (
                f"stopped after {result['extra_info'].get('rounds_run')} rounds when it read more than δ "
                f"behind the shape's leader, then kept: {why}"
            )
        if info and info.get("status") == "dropped":
            self._emit({"kind": "loss", "method": cell.method.name, "cell_id": cell.id, "info": info})
            keep = ("cell_id", "group", "params", "metrics", "extra_info", "round_times")
            self._emit({"kind": "dropped", "record": {k: result[k] for k in keep if k in result}})
            return out_text(cell.id, info)
        # the speeds the race read while the cell ran (a cell that does not race: from its result)
        speeds, relative = self._seen.pop(cell.id, None) or _result_speeds(result)
        # a cell with a verdict may lead (the baseline always: its own cell is its 1.0)
        can_lead = (self.races(cell) and why is None) or self.baselines.get(
            cell.method.name
        ) == cell.method.name
        looks = Looks.of(result.get("extra_info"))
        self._emit(
            {
                "kind": "entry",
                "cell_id": cell.id,
                "speeds": speeds,
                "relative": relative,
                "looks": [looks.first, looks.last, looks.family] if looks is not None else None,
                "can_lead": can_lead,
                "rates": _own_rates(result),
            }
        )
        return None

    # ------------------------------------------------------------------ before a cell starts

    def skip_reason(self, cell: Cell) -> str | None:
        """Why a cell does not run: its setting was tuned out, or its method lost at a cheaper
        shape of the same workload (recorded with the dropped cells)."""
        self.sync()
        why = self.tuned_out_reason(cell)
        if why:
            return why
        for lost_at, info in self.losses.get(cell.method.name, []):
            gain = self.largest_gain(lost_at, cell, info.get("lost_to")) if costlier(cell, lost_at) else None
            if gain is not None and info["hi"] * gain < 1 - info.get("delta", paired.EQUIVALENCE):
                info = {**info, "largest_gain": round(gain, 6)}
                self._skipped(cell, {**info, "skipped": True})
                return out_text(cell.id, info)
        first = self.twins.get(cell.method.name)
        for lost_at, info in self.losses.get(first or "", []):  # another start of a dropped method
            if paired.axes(lost_at.params()) == paired.axes(cell.params()):
                info = {**info, "first_start": first, "skipped": True}
                self._skipped(cell, info)
                return f"{cell.id}: another start of {first}, dropped here with the start variance counted"
        dom = self.tp_dominated(cell)
        if dom is not None:
            self._skipped(cell, dom)
            return tp_text(dom)
        return None

    def _skipped(self, cell: Cell, race: dict[str, Any]) -> None:
        """``cell`` out of the race before it ran: its record, no metrics, for every process."""
        record = {"cell_id": cell.id, "group": cell.group.id, "params": cell.params(), "metrics": None}
        extra = {"race": race, "rounds_run": 0, "stop_reason": "dropped"}
        self._emit({"kind": "dropped", "record": {**record, "extra_info": extra}})

    def tp_dominated(self, cell: Cell) -> dict[str, Any] | None:
        """A TP size dominated at a cheaper shape: the same method, workload and other axes
        measured at a cheaper shape at ``cell``'s TP size and at a smaller one, and there slower
        per user (its own tok/s per round at the larger TP over the smaller's, an unpaired
        interval widened by the drift between the two groups, ``apart_drift``: measured by the
        run's brackets, or given) wholly below 0.98: it is then slower per GPU too (more GPUs),
        and its costlier shapes are skipped. None when no such evidence (a larger TP as fast per
        user is kept)."""
        if not self.races(cell):  # the baseline's cells stay: its members' verdicts read them
            return None
        mine = {e.cell_id: e for es in self.shapes.values() for e in es if e.rates}
        for cheap in self._by_id.values():
            at = mine.get(cheap.id)
            if at is None or cheap.tp != cell.tp or not costlier(cell, cheap):
                continue
            for other in self._by_id.values():
                small = mine.get(other.id)
                if small is None or other.tp >= cell.tp or not same_but_tp(other, cheap):
                    continue
                iv = paired.unpaired_ratio_interval(at.rates or [], small.rates or [])
                allowed = self.apart_drift(cheap.group.id, other.group.id)
                if iv is None or iv.lo is None or iv.hi is None or allowed is None:
                    continue  # no interval, or no drift measured between the groups: no evidence
                drift, how = allowed
                hi = iv.hi / (1 - drift)
                if hi < 1 - paired.EQUIVALENCE:
                    per_gpu = iv.point * other.tp / cell.tp
                    return {
                        "status": "dropped",
                        "tp_dominated_by": other.id,
                        "shape": shape_label(cheap),
                        "ratio": round(iv.point, 6),
                        "lo": round(iv.lo * (1 - drift), 6),
                        "hi": round(hi, 6),
                        "per_gpu": round(per_gpu, 6),
                        "drift_allowed": round(drift, 6),
                        "drift_from": how,
                        "skipped": True,
                    }
        return None

    def standing(self, method: str, shape: tuple[Any, ...]) -> float | None:
        """A method's point speed over its baseline at a shape, from what was measured there."""
        entries = {e.method: e for e in self.shapes.get(shape, [])}
        e = entries.get(method)
        if e is None or not e.point:
            return None
        if e.relative:
            return e.point
        base = entries.get(self.baselines.get(method) or "")
        return e.point / base.point if base is not None and base.point else None

    def largest_gain(self, cheap: Cell, costly: Cell, lost_to: str | None = None) -> float | None:
        """How much the loser could gain on its leader from ``cheap``'s shape to ``costly``'s: the
        largest gain on its baseline any measured method showed between the two shapes (at least
        1), over the leader's own (its gain where measured at both, else the smallest measured);
        None with fewer than two methods (the baseline and the loser aside) measured at both: no
        evidence that a loss at ``cheap`` carries over."""
        at, to = paired.axes(cheap.params()), paired.axes(costly.params())
        base = self.baselines.get(cheap.method.name)
        gains: dict[str, float] = {}
        for e in self.shapes.get(to, []):
            if e.method in (base, cheap.method.name):
                continue
            a, b = self.standing(e.method, at), self.standing(e.method, to)
            if a and b:
                gains[e.method] = b / a
        if len(gains) < 2:
            return None
        leader = self._by_id[lost_to].method.name if lost_to in self._by_id else None
        if leader == base:
            theirs = 1.0
        else:
            theirs = gains.get(leader or "", min(gains.values()))
        return max(1.0, *gains.values()) / theirs

    def tuned_out_reason(self, cell: Cell) -> str | None:
        from .tune import deciding, decision

        tune = getattr(cell.method, "tune", None)
        if tune is None or deciding(cell):
            return None
        d = self.tuning.get(cell.method.sweep)
        if d is None:
            if self.store is not None and self.before_wait is not None and self.deciding_ids - self.done:
                self.before_wait(cell)
            missing = self.wait_decided()
            d = self.tuning.get(cell.method.sweep)  # decided by another process meanwhile
        if d is None:
            d = decision(self, cell.method.sweep, tune)
            if missing:
                d["decided_without"] = missing
            self._emit({"kind": "tuning", "sweep": cell.method.sweep, "decision": d})
            d = self.tuning[cell.method.sweep]
        if cell.method.name in d["kept"] or not d["ranking"]:
            return None
        why = f"tuned out at {d['at']}: best was {d['kept'][0]}"
        self._emit(
            {"kind": "tuned_out", "record": {"cell_id": cell.id, "params": cell.params(), "reason": why}}
        )
        return why

    def doc(self) -> dict[str, Any]:
        self.sync()
        return {"dropped_cells": self.dropped, "tuned_out": self.tuned_out, "tuning": self.tuning}
