"""pytest entry point: options, hooks and fixtures. Thin: the work lives in the modules.

Flow: the matrix is loaded at configure time; ``pytest_generate_tests`` turns a bench
function ``test_<kind>(engine, cell, specbench)`` into one item per cell (readable ids,
TP/backend skips and timeouts as marks); ``pytest_collection_modifyitems`` stable-sorts
items by engine group so the session-scoped ``engine`` fixture starts once per group;
results travel in ``user_properties`` (so xdist workers ship them to the controller) and
the controller writes one pytest-benchmark JSON at ``--benchmark-json``. GPU leases, the
xdist scheduler and the packed schedule live in xdist_sched.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from . import hookspec, report, results, xdist_sched
from .engines import BACKENDS, get_backend
from .engines.base import CellTimeout, Interrupted
from .matrix import Cell, EngineGroup, MatrixError, load
from .state import (
    DEFAULT_MATRIX,
    ENGINE_PROP,
    FAILED_PROP,
    PARTIAL,
    RESULT_PROP,
    STATE,
    TIMEOUT_GRACE_S,
    SpecbenchState,
    jsonable,
)
from .state import get_state as _state

# ------------------------------------------------------------------------------ options


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def _existing_file(value: str) -> str:
    if not Path(value).is_file():
        import argparse

        raise argparse.ArgumentTypeError(f"matrix file {value!r} does not exist")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specbench", "speculative-decoding benchmarks (pytest-specbench)")
    g.addoption(
        "--specbench-matrix",
        metavar="PATH",
        type=_existing_file,
        default=None,
        help="benchmark matrix YAML. Default: ini specbench_matrix, else "
        f"{DEFAULT_MATRIX!r} under the rootdir when it exists.",
    )
    g.addoption(
        "--specbench-gpus",
        metavar="IDS",
        type=_gpu_list,
        default=None,
        help="comma-separated GPU indices the run may use (GPU backends). Default: every GPU with "
        "no compute process and >= 90%% memory free. Every engine start leases its TP's worth of "
        "them from one pool shared by all -n workers.",
    )
    g.addoption(
        "--specbench-log-dir",
        metavar="DIR",
        default="specbench-logs",
        help="engine logs, one file per group. Default: %(default)r",
    )
    g.addoption(
        "--specbench-kill-engine",
        metavar="GROUP@N",
        type=_kill_spec,
        default=None,
        help="testing aid: SIGKILL the engine of GROUP (e.g. ar-tp1) before its N-th cell "
        "(0-based) to check that a crash fails only that group. Default: off",
    )
    g.addoption(
        "--specbench-hang-engine",
        metavar="GROUP@N",
        type=_kill_spec,
        default=None,
        help="testing aid: SIGSTOP the scheduler of GROUP before its N-th cell, so the cell "
        "hangs until pytest-timeout fails it and the engine is torn down. Default: off",
    )
    g.addoption(
        "--specbench-timeout",
        metavar="S",
        type=float,
        default=None,
        help="every cell's time limit in seconds, overriding the workloads' timeout_s (enforced in "
        "the engine's event loop; a cell over it fails and its engine is torn down). pytest-timeout's "
        "--timeout would also cover engine starts. Default: each workload's timeout_s",
    )
    g.addoption(
        "--specbench-start-timeout",
        metavar="S",
        type=float,
        default=900.0,
        help="an engine start taking longer fails its group's cells (the run goes on). "
        "Cells have their own limit (the workload's timeout_s or --specbench-timeout), "
        "engine start excluded. Default: %(default)s",
    )
    g.addoption(
        "--specbench-plan",
        action="store_true",
        default=False,
        help="print the feasibility plan (groups, cells, per-GPU weights and KV capacity, skip "
        "reasons, ETA) and exit without starting any engine",
    )
    g.addoption(
        "--specbench-plan-json",
        metavar="PATH",
        default=None,
        help="write the plan as JSON to PATH (with or without --specbench-plan)",
    )
    g.addoption(
        "--specbench-gpu-memory",
        metavar="SIZE",
        type=_memory,
        default=None,
        help="plan for GPUs of SIZE memory (e.g. 80GiB) instead of what NVML reports; "
        "lets a machine without GPUs plan a GPU matrix",
    )
    g.addoption(
        "--specbench-plots",
        metavar="DIR",
        default=None,
        help="at the end of the run, write the run's plots (PNG + CSV each) and an index.md there",
    )
    g.addoption(
        "--specbench-gpu-bandwidth",
        metavar="TB/S",
        type=_bandwidth,
        default=None,
        help="HBM bandwidth per GPU in TB/s for the roofline and decode ETAs. Default: NVML's memory "
        "bus width x max memory clock, else a datasheet table by GPU name, else unknown",
    )
    g.addoption(
        "--specbench-plan-from",
        metavar="PATH",
        default=None,
        help="a previous results JSON: the plan's ETA uses its measured cell times",
    )
    g.addoption(
        "--specbench-resume",
        metavar="PATH",
        default=None,
        help="a results JSON of an earlier run that stopped halfway: its measured cells (same id and "
        "definition: method, model, engine args, workload) are skipped and copied into this run's JSON; "
        "failed, missing and changed cells run",
    )
    g.addoption(
        "--specbench-resume-any-machine",
        action="store_true",
        default=False,
        help="with --specbench-resume: also copy cells measured on another machine (GPU names, driver, "
        "CPU, torch/transformers/sglang versions); they are marked resumed_from_other_machine. "
        "Default: such cells run again",
    )
    parser.addini("specbench_matrix", "benchmark matrix YAML (relative to the rootdir)", default=None)


def _sigterm_stops_the_run() -> None:
    """SIGTERM (a cancelled CI job, a time limit) is handled like Ctrl-C: pytest stops, tears the
    engine down (no process left behind) and the JSON is written with the interrupted cell marked.
    While requests run the engine's event loop catches it itself (engines.base.guard)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return  # someone (a wrapper, xdist) handles it already

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("interrupted by SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)


def _gpu_list(value: str) -> tuple[int, ...]:
    import argparse

    from .gpus import parse_gpu_list

    try:
        return parse_gpu_list(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _memory(value: str) -> int:
    import argparse

    from .plan import parse_memory

    try:
        return parse_memory(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bandwidth(value: str) -> float:
    import argparse

    try:
        v = float(value.removesuffix("TB/s").removesuffix("TB/S"))
    except ValueError:
        v = -1.0
    if not 0 < v < 100:
        raise argparse.ArgumentTypeError(f"expected TB/s per GPU, e.g. 4.8 for an H200; got {value!r}")
    return v * 1e12


def _kill_spec(value: str) -> tuple[str, int]:
    import argparse

    group, _, n = value.rpartition("@")
    if not group or not n.isdigit():
        raise argparse.ArgumentTypeError(f"expected GROUP@N like ar-tp1@1; got {value!r}")
    return group, int(n)


# ------------------------------------------------------------------------------ configure


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specbench(kind): bench function for workload kind (default: the function name without test_)",
    )
    st = SpecbenchState(config)
    config.stash[STATE] = st
    _sigterm_stops_the_run()
    # pytest-benchmark warns that it saved nothing when no test used its own fixture; the
    # specbench cells are written by this plugin instead
    config.addinivalue_line("filterwarnings", "ignore:Not saving anything, no benchmarks have been run")
    import warnings

    warnings.filterwarnings("ignore", message="Not saving anything, no benchmarks have been run")
    path = _matrix_path(config)
    if path is not None:
        try:
            st.matrix = load(path, tuple(BACKENDS))
        except MatrixError as e:
            raise pytest.UsageError(str(e)) from None
        for m in st.matrix.methods:  # before any engine starts: what no TP size would fix
            why = get_backend(m.backend).refusal(m)
            if why:
                raise pytest.UsageError(f"{path}: {why}")
    os.environ.setdefault("SPECBENCH_LOG_DIR", str(Path(config.getoption("specbench_log_dir")).resolve()))
    inv = None
    if config.getoption("specbench_plan") and not hasattr(config, "workerinput"):
        xdist_sched.run_plan_in_controller(config, st)
    if st.matrix is not None and any(get_backend(m.backend).gpu for m in st.matrix.methods):
        from . import gpus

        inv = gpus.inventory()  # one NVML read, before any engine holds memory
        st.gpus_at_start = gpus.describe(inv)
        xdist_sched.setup_pool(config, st, inv)
    _gpu_budget(config, st, inv)
    resume = config.getoption("specbench_resume", None)
    if resume and st.matrix is not None:
        from .results import load_resume

        st.resumed, st.resume_refused = load_resume(
            Path(resume), st.matrix, st.provenance(), config.getoption("specbench_resume_any_machine")
        )
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(xdist_sched.XdistHooks(st), "specbench-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    if STATE in config.stash:
        xdist_sched.finish_pool(config, config.stash[STATE])


def _gpu_budget(config: pytest.Config, st: SpecbenchState, inventory: list[Any] | None) -> None:
    """What the planner sizes against: --specbench-gpu-memory, else the smallest chosen GPU of
    the inventory (None: the matrix has no GPU backend)."""
    from . import gpus, plan

    given = config.getoption("specbench_gpu_memory")
    bw_given = config.getoption("specbench_gpu_bandwidth")
    inv = [g for g in inventory or [] if st.gpus is None or g.index in st.gpus]
    g = min(inv, key=lambda g: g.memory_total_mib) if inv else None
    bw, src = (bw_given, "--specbench-gpu-bandwidth") if bw_given else (None, "")
    if bw is None and g is not None:  # NVML (bus width x max memory clock), else the name table
        bw, src = gpus.memory_bandwidth(g.index), "NVML: memory bus width x max memory clock"
        if bw is None:
            bw, src = plan.bandwidth_for(g.name), f"datasheet value for {g.name}"
    if given:
        st.gpu_budget = plan.GPUBudget(given, bw, "--specbench-gpu-memory", src if bw else "")
    elif g is not None:
        st.gpu_budget = plan.GPUBudget(g.memory_total_mib * 1024**2, bw, g.name, src if bw else "")


def _matrix_path(config: pytest.Config) -> Path | None:
    opt = config.getoption("specbench_matrix")
    if opt:
        return Path(opt)
    ini = config.getini("specbench_matrix")
    if ini:
        p = Path(str(ini))
        return p if p.is_absolute() else Path(config.rootpath) / p
    default = Path(config.rootpath) / DEFAULT_MATRIX
    return default if default.is_file() else None


# ------------------------------------------------------------------------------ collection


def _kind(metafunc: pytest.Metafunc) -> str:
    mark = metafunc.definition.get_closest_marker("specbench")
    if mark and mark.args:
        return str(mark.args[0])
    return metafunc.function.__name__.removeprefix("test_")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" not in metafunc.fixturenames or "engine" not in metafunc.fixturenames:
        return
    st = _state(metafunc.config)
    if st.matrix is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: no benchmark matrix; pass "
            f"--specbench-matrix PATH or create {DEFAULT_MATRIX}"
        )
    cells = st.matrix.cells(_kind(metafunc))
    use_timeout = metafunc.config.pluginmanager.hasplugin("timeout") and not metafunc.config.getoption(
        "timeout", None
    )
    params = []
    for c in cells:
        marks: list[Any] = []
        reason = xdist_sched.skip_reason(metafunc.config, st, c)
        if reason:
            marks.append(pytest.mark.skip(reason=f"cell {c.id} skipped: {reason}"))
        if use_timeout:  # an outer net: the cell's own limit is enforced in the engine's event
            # loop (CellRunner); engine starts have their own limit (--specbench-start-timeout)
            marks.append(
                pytest.mark.timeout(cell_timeout(metafunc.config, c) + TIMEOUT_GRACE_S, func_only=True)
            )
        params.append(pytest.param(c.group, c, marks=marks, id=c.id))
    metafunc.parametrize(("engine", "cell"), params, indirect=["engine"], scope="session")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stable-sort bench items by engine group (first appearance order), in place.

    A bench function whose workload kind has no cells in the matrix is deselected (instead
    of pytest's "empty parameter set" skip)."""
    empty = [
        i
        for i in items
        if _item_cell(i) is None
        and "cell" in getattr(i, "fixturenames", ())
        and "engine" in getattr(i, "fixturenames", ())
    ]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]
    st = _state(config)
    for item in items:  # a resumed cell's earlier result travels on its (skipped) reports
        cell = _item_cell(item)
        if cell is not None and cell.id in st.resumed:
            item.user_properties.append((RESULT_PROP, {**st.resumed[cell.id], "nodeid": item.nodeid}))
    order: dict[str, int] = {}
    keys: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        cell = _item_cell(item)
        if cell is None:
            keys.append((-1, i))
            continue
        gid = cell.group.id
        order.setdefault(gid, len(order))
        keys.append((order[gid], i))
    if order:
        items[:] = [items[i] for _, i in sorted(keys)]


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    st = _state(config)
    want_print = config.getoption("specbench_plan")
    json_path = config.getoption("specbench_plan_json")
    if st.matrix is None or hasattr(config, "workerinput") or not (want_print or json_path):
        return
    from . import plan

    p = st.get_plan()
    cells = [c for c in (_item_cell(i) for i in session.items) if c is not None]
    selected = [c.id for c in cells]
    sched, sched_lines = xdist_sched.plan_schedule(config, st, cells)
    if json_path:
        doc = {"matrix": st.matrix.path, **p.as_dict(selected)}
        if sched is not None:
            doc["schedule"] = sched.as_dict()
        Path(json_path).write_text(report.dumps(doc))
    if want_print:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"specbench plan for {st.matrix.path}", *plan.format_plan(p, selected), *sched_lines]
        if json_path:
            lines.append(f"wrote {json_path}")
        for line in lines:
            if tr is not None:
                tr.write_line(line)
            else:
                print(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """--specbench-plan: the plan is the whole job; no cell runs and no engine starts."""
    return True if session.config.getoption("specbench_plan") else None


def cell_timeout(config: pytest.Config, cell: Cell) -> float:
    """A cell's time limit: --specbench-timeout, else its workload's timeout_s."""
    override = config.getoption("specbench_timeout", None)
    return float(override) if override else cell.workload.timeout_s


def _crash_message(rep: pytest.TestReport) -> str | None:
    crash = getattr(rep.longrepr, "reprcrash", None)
    msg = getattr(crash, "message", None)
    if not msg:
        return None
    msg = str(msg)
    # an engine's reason sits at the top (what failed, "engine log says: ...") and its log's
    # tail at the bottom: keep both ends of a long message
    return msg if len(msg) <= 4000 else f"{msg[:1500]}\n[... {len(msg) - 3500} characters ...]\n{msg[-2000:]}"


def _fired_by_pytest_timeout(call: pytest.CallInfo[Any]) -> bool:
    """Whether pytest-timeout stopped the call: its signal handler raised the failure (a frame of
    pytest_timeout.py in the traceback), not merely an exception whose text says "Timeout"."""
    tb = call.excinfo.tb if call.excinfo is not None else None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).name == "pytest_timeout.py":
            return True
        tb = tb.tb_next
    return False


def _item_cell(item: pytest.Item) -> Cell | None:
    cs = getattr(item, "callspec", None)
    cell = cs.params.get("cell") if cs is not None else None
    return cell if isinstance(cell, Cell) else None


# ------------------------------------------------------------------------------ fixtures


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The group whose engine starts next (a stopping engine queues it as it returns its GPUs)."""
    cell = _item_cell(item)
    if cell is not None and STATE in item.config.stash:
        _state(item.config).next_group = cell.group if item.get_closest_marker("skip") is None else None


def pytest_specbench_make_engine(config: pytest.Config, group: EngineGroup) -> Any:
    return get_backend(group.method.backend).create(group)


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Any:
    """The live engine of the requesting cell's (method, TP) group; one start per group."""
    group = getattr(request, "param", None)
    if not isinstance(group, EngineGroup):
        raise pytest.UsageError(
            "the `engine` fixture is parametrized by pytest-specbench: "
            "request it together with `cell` in a bench function"
        )
    st = _state(request.config)
    eng = st.start_engine(group)
    yield eng
    st.stop_engine(group, eng)


class CellRunner:
    """Runs a cell's workload on its engine and records the result for the JSON."""

    def __init__(self, item: pytest.Item):
        self.item = item

    def run(self, engine: Any, cell: Cell) -> dict[str, Any]:
        from . import metrics, workloads

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
        ticker = _ticker(self.item.config, st, cell)
        try:
            run = workloads.run(engine, cell, workloads.meters(_energy_meter(st, cell), engine))
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
            why = (
                f"engine of group {cell.group.id} torn down: cell {cell.id} made no progress within "
                f"timeout_s={limit:g} s"
            )
            st.abandon_engine(cell.group, why)
            pytest.fail(f"cell {cell.id}: {timed_out}; {why}", pytrace=False)
        cp = st.get_plan().cells.get(cell.id)
        m = metrics.cell_metrics(
            run.records,
            run.round_times,
            run.round_output_tokens,
            request_digests=run.round_digests,
            slo=dict(cell.workload.slo) or None,
            request_rate=cell.request_rate,
            energy_j=run.extra.get("energy_j"),
            roofline_tokens_per_s=cp.roofline_tokens_per_s if cp is not None else None,
            server_spec=run.extra.get("server_spec"),
        )
        result = {
            "nodeid": self.item.nodeid,
            "name": self.item.name,
            "cell_id": cell.id,
            "group": cell.group.id,
            "params": cell.params(),
            "round_times": run.round_times,
            "warmup": cell.workload.warmup,
            "metrics": jsonable(m),
            "extra_info": {
                **jsonable(run.extra),
                **metrics.oracle_check(cell.method, m.get("accept_length"), cell.output_tokens),
                "cell_fingerprint": cell.fingerprint(),
                "provenance": st.provenance(),
                **(
                    {"sweep": cell.method.sweep, "setting": dict(cell.method.setting)}
                    if cell.method.sweep
                    else {}
                ),
            },
            "worker": _state(self.item.config).worker,
        }
        if m["errors"]:  # a failed cell: in failed_cells with what it measured, never in benchmarks
            self.item.stash[PARTIAL] = {
                k: v for k, v in result["metrics"].items() if k not in ("per_request", "request_digests")
            }
            pytest.fail(
                f"cell {cell.id}: {m['errors']} of {m['requests']} requests failed; first: "
                f"{m['first_error']}",
                pytrace=False,
            )
        self.item.user_properties.append((RESULT_PROP, result))
        return result


def _ticker(config: pytest.Config, st: SpecbenchState, cell: Cell) -> Any:
    """Without -q (and not on an xdist worker, whose output nobody sees): a line when the cell
    starts and one every 5 s with its round, requests done, elapsed time and the plan's ETA."""
    from .progress import Ticker

    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None or config.get_verbosity() < 0 or hasattr(config, "workerinput"):
        return None
    cp = st.get_plan().cells.get(cell.id)
    eta = cp.eta_s if cp is not None else None
    w = cell.workload
    capman = config.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:  # past pytest's output capture, which is on during a test
        if capman is None:
            tr.write_line(line)
            return
        with capman.global_and_fixture_disabled():
            tr.ensure_newline()
            tr.write_line(line)

    write(
        f"-> {cell.id} (group {cell.group.id}): {w.warmup} warm-up + {w.rounds} timed rounds"
        + (f", plan ETA {eta:.0f} s" if eta else "")
    )
    ticker = Ticker(write)
    ticker.start(cell.id, w.warmup + w.rounds, w.warmup, eta)
    return ticker


def _energy_meter(st: SpecbenchState, cell: Cell) -> Any:
    """NVML energy over the cell's timed rounds on the GPUs its engine leased; None for CPU
    backends or without a lease (GPUs unknown)."""
    from . import gpus

    if st.lease is None or not get_backend(cell.method.backend).gpu:
        return None
    return gpus.EnergyMeter(tuple(st.lease.gpus))


@pytest.fixture
def specbench(request: pytest.FixtureRequest) -> CellRunner:
    """``specbench.run(engine, cell)`` measures the cell and records it for the JSON."""
    return CellRunner(request.node)


# ------------------------------------------------------------------------------ reporting


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    st = _state(item.config)
    while st.pending:  # engine start/stop events go out on the report of the item that saw them
        item.user_properties.append((ENGINE_PROP, st.pending.pop(0)))
    outcome = yield
    rep = outcome.get_result()
    cell = _item_cell(item)
    if (
        cell is not None
        and rep.failed
        and rep.when == "call"
        and _fired_by_pytest_timeout(call)
        and cell.group.id not in st.torn_down
    ):
        # pytest-timeout (the outer net) stopped a cell: the engine cannot be trusted (requests
        # still queued in it); tear it down so the next group starts clean
        st.abandon_engine(
            cell.group,
            f"engine of group {cell.group.id} torn down after cell {cell.id} timed out (pytest-timeout)",
        )
    if cell is not None and rep.failed:
        lines = str(rep.longreprtext).strip().splitlines()
        rep.user_properties.append(
            (
                FAILED_PROP,
                {
                    "nodeid": item.nodeid,
                    "cell": cell.id,
                    "group": cell.group.id,
                    "phase": rep.when,
                    # the exception's own message (e.g. why an engine crashed), then the tail
                    "error": _crash_message(rep),
                    "reason": "\n".join(lines[-15:]),
                    "params": jsonable(cell.params()),
                    **({"partial_metrics": item.stash[PARTIAL]} if PARTIAL in item.stash else {}),
                },
            )
        )


# ------------------------------------------------------------------------------ results (results.py)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        session.config.pluginmanager.register(
            results.Collector(_state(session.config)), "specbench-collector"
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    st = _state(config)
    if hasattr(config, "workerinput") or st.matrix is None:
        return
    st.engine_events += st.pending  # the last engine's stop (fixture teardown ran just before this)
    st.pending.clear()
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        results.mark_interrupted(st)
    if st.results or st.engine_events or st.interrupted:
        results.write_json(config, st)
        plots = config.getoption("specbench_plots")
        if plots and st.doc is not None:
            report.write_plots(st.doc, Path(plots))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = results.summary_lines(_state(config), config)
    if lines:
        terminalreporter.write_sep("=", "specbench summary")
        for line in lines:
            terminalreporter.write_line(line)
