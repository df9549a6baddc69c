"""pytest entry point: configuration, the run's hooks and the results. Thin: the work lives in
the modules.

Flow: the matrix is loaded at configure time; collection.py turns each bench function into one
item per cell and orders the items by engine group; fixtures.py starts one engine per group;
results travel in ``user_properties`` (so xdist workers ship them to the controller) and the
controller writes one pytest-benchmark JSON at ``--benchmark-json``. GPU leases live in
gpu_pool.py, the xdist scheduler in xdist_policy.py and the packed schedule in packed_schedule.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ..engines import BACKENDS, get_backend
from ..matrix.schema import MatrixError, load
from ..report import summary as report
from ..report.screen_text import counted
from . import busy_gpus, gpu_pool, group_hooks, hook_windows, hookspec, race, results, sentinel, xdist_sched
from .options import pytest_addoption  # noqa: F401  (the hook, registered with this module)
from .recipes import with_make_model_hint
from .runner import item_cell as _item_cell
from .state import (
    DEFAULT_MATRIX,
    ENGINE_PROP,
    FAILED_PROP,
    PARTIAL,
    STATE,
    SpecbenchState,
    jsonable,
)
from .state import get_state as _state

# registered with this module: pytest imports them as plugins of their own
pytest_plugins = ["pytest_specbench.plugin.collection", "pytest_specbench.plugin.fixtures"]

# ------------------------------------------------------------------------------ options (options.py)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def _sigterm_stops_the_run(st: SpecbenchState) -> None:
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
        st.signal = "SIGTERM"  # outside a cell too, the run says which signal stopped it
        raise KeyboardInterrupt("interrupted by SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specbench(kind): bench function for workload kind (default: the function name without test_)",
    )
    st = SpecbenchState(config)
    config.stash[STATE] = st
    _sigterm_stops_the_run(st)
    # pytest-benchmark warns that it saved nothing when no test used its own fixture; the
    # specbench cells are written by this plugin instead
    config.addinivalue_line("filterwarnings", "ignore:Not saving anything, no benchmarks have been run")
    import warnings

    warnings.filterwarnings("ignore", message="Not saving anything, no benchmarks have been run")
    path = _matrix_path(config)
    if not hasattr(config, "workerinput"):
        results.check_json_target(config)
    if path is not None:
        try:
            st.matrix = load(path, {n: b.max_tp for n, b in BACKENDS.items()})  # TP limits: checked
        except MatrixError as e:
            raise pytest.UsageError(str(e)) from None
        sends = not (config.getoption("specbench_plan") or config.getoption("collectonly"))
        for m in st.matrix.methods:  # before any engine starts: what no TP size would fix
            why = get_backend(m.backend).refusal(m, sends=sends)
            if why:
                raise pytest.UsageError(f"{path}: {with_make_model_hint(path, why)}")
    xdist_sched.warn_cpu_engines_share_cores(config, st)
    race.setup(config, st)
    os.environ.setdefault("SPECBENCH_LOG_DIR", str(Path(config.getoption("specbench_log_dir")).resolve()))
    inv = None
    if config.getoption("specbench_plan") and not hasattr(config, "workerinput"):
        xdist_sched.run_plan_in_controller(config, st)
    if st.matrix is not None and any(get_backend(m.backend).gpu for m in st.matrix.methods):
        from ..gpus import inventory as gpus

        inv = gpus.inventory()  # one NVML read, before any engine holds memory
        st.gpus_at_start = gpus.describe(inv)
        gpu_pool.setup_pool(config, st, inv)
    from .gpu_budget import gpu_budget

    gpu_budget(config, st, inv)
    from . import sharding

    sharding.setup(config, st)
    resume = config.getoption("specbench_resume", None)
    if resume and st.matrix is not None:
        from .results import load_resume

        st.resumed, st.resume_refused, st.resumed_groups = load_resume(
            Path(resume), st.matrix, st.provenance(), config.getoption("specbench_resume_any_machine")
        )
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        from .xdist_policy import XdistHooks

        config.pluginmanager.register(XdistHooks(st), "specbench-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    if STATE in config.stash:
        st = config.stash[STATE]
        gpu_pool.finish_pool(config, st)
        if st.race_store_owned and st.race is not None and st.race.store is not None:
            import shutil

            shutil.rmtree(st.race.store.dir, ignore_errors=True)


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


# ------------------------------------------------------------------------------ each cell


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The group whose engine starts next (a stopping engine queues it as it returns its GPUs)."""
    cell = _item_cell(item)
    if cell is not None and STATE in item.config.stash:
        st = _state(item.config)
        st.next_group = None
        race.skip_if_out(st, cell, item)  # a loser's costlier shapes, tuned-out settings: before any start
        st.next_group = cell.group if item.get_closest_marker("skip") is None else None
        st.next_scope = sentinel.scope_of_item(item)  # a drift family's GPU set: its starts keep it


# ------------------------------------------------------------------------------ reporting


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    race.finished(_state(item.config), _item_cell(item))  # under -n: a tuned race's deciding cells


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    st = _state(item.config)
    while st.pending:  # engine start/stop events go out on the report of the item that saw them
        ev = st.pending.pop(0)
        st.events_sent += 1  # numbered: the controller takes each once, from whichever report
        ev.setdefault("seq", f"{st.worker}/{st.events_sent}")
        item.user_properties.append((ENGINE_PROP, ev))
    from . import sharding

    item.user_properties += sharding.worker_props(st)  # under -n: the split, once, for the JSON
    outcome = yield
    rep = outcome.get_result()
    cell = _item_cell(item)
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):  # run, skipped or failed
        hook_windows.done(st, item.nodeid, cell)  # it no longer keeps a hooked GPU's window open
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
                    "cell": item.callspec.id if sentinel.family_of_item(item) else cell.id,  # type: ignore[attr-defined]
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
        group_hooks.session_start(session.config, _state(session.config))  # before_run


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    st = _state(config)
    st.close_references()
    hook_windows.close_at_end(st)  # a hooked GPU's service still stopped: started again
    group_hooks.session_finish(config, st, session)  # after_run, the engines stopped
    if hasattr(config, "workerinput") or st.matrix is None:
        return
    st.engine_events += st.pending  # the last engine's stop (fixture teardown ran just before this)
    st.pending.clear()
    group_hooks.fail_on_after_hooks(st, session)  # a service an after-hook did not restore fails the run
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        results.mark_interrupted(st)
    from . import sharding

    empty = sharding.empty_shard(st) and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
    if empty:  # a shard the split left empty ran what it had to: nothing; its JSON says so
        session.exitstatus = pytest.ExitCode.OK
    if st.results or st.engine_events or st.interrupted or empty:
        results.write_json(config, st, final=True)
        if st.write_errors and st.written_to != str(config.getoption("benchmark_json")):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the results are not where asked
        plots = config.getoption("specbench_plots")
        if plots and st.doc is not None:
            try:  # the JSON is written: a plotting failure costs the pictures, not the run
                report.write_plots(st.doc, Path(plots), st.plots_not_made)
            except Exception as e:
                st.plot_error = f"plots not written to {plots}: {type(e).__name__}: {e}"
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    return group_hooks.hook_teststatus(report)  # a failed hook: counted failed (group_hooks.py)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    st = _state(config)
    # a failed hook is on the screen (screen.hook_view) where the JSON was built; else said here
    hooks_said = st.doc is not None and config.getoption("specbench_summary", "screen") == "screen"
    lines = (
        results.summary_lines(st, config)
        + busy_gpus.flag_lines(st)  # a busy GPU leased: said again at the end
        + _skipped_lines(terminalreporter)
        + ([] if hooks_said else st.hook_errors)
    )
    if lines:
        terminalreporter.write_sep("=", "specbench summary")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """A busy GPU the run leases (hooks' service, --specbench-allow-busy-gpus), before any cell."""
    return [f"specbench: {x}" for x in busy_gpus.flag_lines(_state(config))] if STATE in config.stash else []


def _skipped_lines(terminalreporter: Any) -> list[str]:
    """Skipped cells by reason (a TP wider than the backend or the GPUs, ...): printed whether
    or not any cell ran, so a run that measured nothing says why."""
    import re

    by: dict[str, list[str]] = {}
    for rep in terminalreporter.stats.get("skipped", []):
        if not (rep.nodeid and "[" in rep.nodeid):
            continue
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        why = re.sub(r"^(Skipped: )?cell \S+ skipped: ", "", str(reason)).removeprefix("Skipped: ")
        by.setdefault(why, []).append(rep.nodeid.split("[", 1)[1].rstrip("]"))
    return [
        f"skipped: {counted(len(ids), 'cell')}: {why} ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''})"
        for why, ids in sorted(by.items(), key=lambda kv: -len(kv[1]))
    ]
