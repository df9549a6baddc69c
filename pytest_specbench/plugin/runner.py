"""One cell's run: the workload on its engine under the cell's time limit, the progress ticker,
the energy meter, and the result recorded for the JSON (or a failed cell with what it measured;
cell_record.py builds the record)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from ..engines import get_backend
from ..engines.base import CellTimeout, Interrupted
from ..matrix.cells import Cell
from .cell_record import cell_metrics, cell_record, partial_metrics
from .state import PARTIAL, RESULT_PROP, SpecbenchState
from .state import get_state as _state


def item_cell(item: pytest.Item) -> Cell | None:
    """The matrix cell a bench item measures (its ``cell`` parameter), or None."""
    cs = getattr(item, "callspec", None)
    cell = cs.params.get("cell") if cs is not None else None
    return cell if isinstance(cell, Cell) else None


def _group_cells(item: pytest.Item, cell: Cell) -> list[Cell]:
    """The selected cells of ``cell``'s engine group (all of them run on this process)."""
    return [c for c in map(item_cell, item.session.items) if c is not None and c.group.id == cell.group.id]


def cell_timeout(config: pytest.Config, cell: Cell) -> float:
    """A cell's time limit: --specbench-timeout, else its workload's timeout_s."""
    override = config.getoption("specbench_timeout", None)
    return float(override) if override else cell.workload.timeout_s


class CellRunner:
    """Runs a cell's workload on its engine and records the result for the JSON."""

    def __init__(self, item: pytest.Item):
        self.item = item

    def run(self, engine: Any, cell: Cell) -> dict[str, Any]:
        from ..workloads import kinds as workloads
        from . import sentinel

        if sentinel.family_of_item(self.item) is not None:  # its family's drift, not a cell
            return sentinel.run(self.item, engine, cell)
        st = _state(self.item.config)
        n = st.cells_run.get(cell.group.id, 0)
        st.cells_run[cell.group.id] = n + 1
        if cell.group.id in st.torn_down:
            pytest.fail(f"cell {cell.id}: {st.torn_down[cell.group.id]}", pytrace=False)
        if self.item.config.getoption("specbench_kill_engine") == (cell.group.id, n):
            engine.kill_for_test()
        if self.item.config.getoption("specbench_hang_engine") == (cell.group.id, n):
            engine.hang_for_test()
        limit = cell_timeout(self.item.config, cell)
        engine.deadline = time.monotonic() + limit
        timed_out = None
        ticker = _ticker(self.item.config, st, cell, self.item.nodeid)
        warm = None
        try:
            if n == 0 or st.engine_warmed is not engine:  # a new engine: warm it at its cells' shapes
                cells = _group_cells(self.item, cell)
                # the first engine on its GPU set warms the machine first (workloads.warm_machine)
                machine = workloads.warm_machine(engine, cells) if st.cold_engine is engine else None
                warm = workloads.warm_engine(engine, cells)
                if machine is not None:
                    warm["machine"] = machine
                    st.cold_engine = None
                st.engine_warmed = engine
            # the baseline as a second engine, its rounds interleaved with this cell's (hf); the
            # group's cells (its warm-up shapes) are looked up only when that engine starts
            ref = st.reference_for(cell, lambda: _group_cells(self.item, cell))
            rule = st.race.rule(cell) if st.race is not None else None  # --specbench-race
            run = workloads.run(engine, cell, workloads.meters(_meters(st, cell), engine), ref, rule)
        except CellTimeout as e:
            timed_out = str(e)
        except (Interrupted, KeyboardInterrupt) as e:  # SIGTERM / Ctrl-C: stop the run, keep the rest
            st.interrupted = {
                "cell": cell.id,
                "group": cell.group.id,
                "nodeid": self.item.nodeid,
                "why": str(e) if isinstance(e, Interrupted) else "interrupted by SIGINT (Ctrl-C)",
            }
            raise KeyboardInterrupt(st.interrupted["why"]) from None
        finally:
            engine.deadline = None
            if ticker is not None:
                ticker.stop()
        if timed_out is not None:  # failed outside the except: no chained traceback in the report
            from ..engines.progress import PROGRESS

            done = f"{PROGRESS.done}/{PROGRESS.total}" if PROGRESS.total else f"{PROGRESS.done}"
            why = (
                f"engine of group {cell.group.id} torn down: cell {cell.id} did not finish within its "
                f"time limit of {limit:g} s ("
                + (
                    f"in round {PROGRESS.round} of {PROGRESS.rounds}, {done} of its requests done)"
                    if PROGRESS.round
                    else "while warming the engine at its cells' shapes)"
                )
            )
            st.abandon_engine(cell.group, why)
            pytest.fail(f"cell {cell.id}: {timed_out}; {why}", pytrace=False)
        m, forced = cell_metrics(run, cell, st.get_plan().cells.get(cell.id))
        result = cell_record(self.item, cell, run, m, forced, warm, st)
        if forced and not forced["accept_forced_exact"] and not m["errors"]:
            self.item.stash[PARTIAL] = partial_metrics(result)
            pytest.fail(
                f"cell {cell.id}: forced accept length {forced['accept_forced']:g}, measured "
                f"{m.get('accept_length')} (expected {forced['accept_forced_expected']:.3f} within "
                f"{forced['accept_forced_tolerance']:g}): the engine did not honour the forced length",
                pytrace=False,
            )
        if m["errors"]:  # a failed cell: in failed_cells with what it measured, never in benchmarks
            self.item.stash[PARTIAL] = partial_metrics(result)
            pytest.fail(
                f"cell {cell.id}: {m['errors']} of {m['requests']} requests failed; first: "
                f"{m['first_error']}",
                pytrace=False,
            )
        dropped = st.race.record(cell, result) if st.race is not None else None
        if dropped:  # out of the race: kept with the dropped cells, never as a measured result
            pytest.skip(f"cell {cell.id}: {dropped}")
        self.item.user_properties.append((RESULT_PROP, result))
        sentinel.note_measured(self.item.config, cell, result)
        return result


def _ticker(config: pytest.Config, st: SpecbenchState, cell: Cell, nodeid: str) -> Any:
    """Without -q (and not on an xdist worker, whose output nobody sees): a line when the cell
    starts, one every 5 s with its round, requests done and elapsed time against the plan's, and
    one when it ends, which pytest's result letter for the cell completes."""
    from ..engines.progress import Ticker, elapsed_text

    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None or config.get_verbosity() < 0 or hasattr(config, "workerinput"):
        return None
    cp = st.get_plan().cells.get(cell.id)
    eta = cp.eta_s if cp is not None else None
    w = cell.workload
    capman = config.pluginmanager.get_plugin("capturemanager")

    def uncaptured() -> Any:  # past pytest's output capture, which is on during a test
        return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()

    def write(line: str) -> None:
        with uncaptured():
            tr.ensure_newline()
            tr.write_line(line)

    write(
        f"-> {cell.id} (group {cell.group.id}): {w.warmup} warm-up + {w.rounds} timed rounds"
        + (f", plan ETA {eta:.0f} s" if eta else "")
    )
    ticker = Ticker(write)
    ticker.start(cell.id, w.warmup + w.rounds, w.warmup, eta)

    def end(elapsed_s: float) -> None:
        # the cell's closing line, left open: pytest's result letter for it lands at its end (one
        # line per cell; the file's name is not printed again for the next cell)
        with uncaptured():
            tr.ensure_newline()
            tr.write(f"<- {cell.id}: {elapsed_text(elapsed_s, eta)} ", flush=True)
        if config.get_verbosity() <= 0:
            tr.currentfspath = config.rootpath / nodeid.split("::")[0]

    ticker.on_stop = end
    return ticker


def _meters(st: SpecbenchState, cell: Cell) -> Any:
    """What is measured over a cell's timed rounds besides its requests: other processes' CPU
    time and GPU use (disturbance.DisturbanceMeter) and, on leased GPUs, their NVML energy."""
    from ..gpus import inventory as gpus
    from ..workloads.kinds import Meters
    from .disturbance import DisturbanceMeter

    # the GPUs its engine leased (none for CPU backends or without a lease: GPUs unknown)
    leased = tuple(st.lease.gpus) if st.lease is not None and get_backend(cell.method.backend).gpu else ()
    return Meters([DisturbanceMeter(gpus=leased), *([gpus.EnergyMeter(leased)] if leased else [])])
