"""Controller side: gather cell results and engine events (xdist too), write the JSON, print
the summary. The JSON is rewritten after every finished cell, so a run that dies halfway keeps
what it measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..engines import separate_instances
from ..report import summary as report
from . import group_hooks, hook_windows, sharding
from .long_summary import full_lines, wall_vs_plan
from .sentinel import SENTINEL_PROP
from .state import ENGINE_PROP, FAILED_PROP, RESULT_PROP, SPLIT_PROP, SpecbenchState


class Collector:
    """Controller-side: gathers results and engine events from every report (xdist too)."""

    def __init__(self, st: SpecbenchState):
        self.st = st

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.st.running[nodeid] = None  # (under -n: forwarded from the worker that started it)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.st.running.pop(report.nodeid, None)
        if report.failed and self.st.race is not None:  # a crashed worker's cell is done too
            cell = self.st.cell_of(report.nodeid)
            if cell is not None:
                self.st.race.finished(cell.id)
        props: list[tuple[str, Any]] = list(report.user_properties)
        if report.failed and not any(name == FAILED_PROP for name, _ in props):
            self._unrecorded_failure(report)
        for name, value in props:
            if name == FAILED_PROP:
                self.st.failures.append(value)
            elif name == SPLIT_PROP:
                sharding.receive(self.st, value)
            elif name == ENGINE_PROP and (
                value.get("seq") is None or value["seq"] not in self.st.events_seen
            ):
                # from the first report that carries it: a cell interrupted in its call phase
                # has no teardown report, and its group's start must still be in the JSON
                if value.get("seq") is not None:
                    self.st.events_seen.add(value["seq"])
                self.st.engine_events.append(value)
        if report.when == "call" and getattr(report, "node", None) is not None:
            self._worker_line(report)  # under xdist: one line per finished cell, worker and group
        if report.when != "teardown":
            return
        for name, value in props:
            if name == RESULT_PROP:
                self.st.config.hook.pytest_specbench_cell_done(config=self.st.config, result=value)
                self.st.results.append(value)
            elif name == SENTINEL_PROP:  # a family's drift sentinel (report/drift.py)
                self.st.sentinels.append(value)
        if report.user_properties:  # a run that dies halfway keeps what it measured
            write_json(self.st.config, self.st)

    def _unrecorded_failure(self, report: pytest.TestReport) -> None:
        """A cell's failure that reached the controller without the plugin's record: a crashed
        xdist worker (xdist reports "worker 'gw0' crashed while running ...") or anything that
        failed before the plugin's report hook ran. It goes into failed_cells as what it was, so
        the JSON never looks clean while the exit status says failure."""
        c = self.st.cell_of(report.nodeid)
        if c is None:
            return
        cell = c.id
        text = str(getattr(report, "longreprtext", "") or report.longrepr or "").strip()
        crashed = "crashed while running" in text
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        first = next((ln for ln in lines if "crashed while running" in ln), lines[0] if lines else "failed")
        self.st.failures.append(
            {
                "nodeid": report.nodeid,
                "cell": cell,
                "group": c.group.id,
                "phase": report.when,
                "error": (
                    f"the xdist worker running this cell crashed ({first.strip()}); its engine's "
                    "processes went with it, and the cell measured nothing"
                    if crashed
                    else first.strip()
                ),
                "reason": "\n".join(text.splitlines()[-15:]),
                **({"crashed": True} if crashed else {}),
            }
        )
        if crashed:
            self.st.crashed_workers.append({"cell": cell, "xdist": first.strip()})

    def _worker_line(self, report: pytest.TestReport) -> None:
        tr = self.st.config.pluginmanager.get_plugin("terminalreporter")
        cell = self.st.cell_of(report.nodeid)
        if tr is None or cell is None or self.st.config.get_verbosity() < 0:
            return
        worker = getattr(report.node, "gateway", None)
        tr.ensure_newline()
        tr.write_line(
            f"[{getattr(worker, 'id', '?')}] group {cell.group.id}: {cell.id} {report.outcome} "
            f"in {report.duration:.1f} s"
        )


def mark_interrupted(st: SpecbenchState) -> None:
    """A run stopped by SIGTERM or Ctrl-C: the cell it stopped in becomes a failed cell marked
    interrupted (resume runs it again); the document says the run was interrupted."""
    why = f"interrupted by {st.signal}" if st.signal else "interrupted by SIGINT (Ctrl-C)"
    info = st.interrupted or {"cell": None, "why": why}
    # the cells that were running when it came (under -n, on the workers: started, no teardown
    # report yet), each a failed cell marked interrupted
    running = [(n, c) for n, c in ((n, st.cell_of(n)) for n in st.running) if c is not None]
    if info.get("cell") is None and running:
        info = {**info, "nodeid": running[0][0], "cell": running[0][1].id, "group": running[0][1].group.id}
    if running:
        info["cells"] = [c.id for _, c in running]
    st.interrupted = info
    groups = {c.id: c.group.id for _, c in running}
    stopped = [(info.get("nodeid", ""), info["cell"])] if info.get("cell") else []
    stopped += [(n, c.id) for n, c in running if c.id != info.get("cell")]
    for nodeid, cell in stopped:
        if any(f.get("cell") == cell for f in st.failures):
            continue
        st.failures.append(
            {
                "nodeid": nodeid,
                "cell": cell,
                "group": groups.get(cell, info.get("group")),
                "phase": "call",
                "interrupted": True,
                "error": f"{info['why']}: the run stopped in this cell; its requests were cancelled",
                "reason": info["why"],
            }
        )


def load_resume(
    path: Path, matrix: Any, here: dict[str, Any], any_machine: bool = False
) -> tuple[dict[str, dict[str, Any]], list[str], list[dict[str, Any]]]:
    """(cell id -> result (as a cell's RESULT_PROP), refusals, the earlier run's engine groups of
    the copied cells, marked ``resumed_from``: what those engines were and reported) for the cells
    of ``path`` (a results JSON of this plugin) that are still in the matrix, defined the same way
    (``cell_fingerprint``: method, model, engine args, workload, axes) and measured on this
    machine (``here``: state.provenance()); with ``any_machine`` cells of another machine are
    copied too and marked. A cell of another commit is copied and marked. Failed cells are not
    in ``benchmarks``, so they run again."""
    import json

    try:
        doc = json.loads(path.read_text())
        benchmarks = doc["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise pytest.UsageError(
            f"--specbench-resume {path}: not a results JSON of pytest-specbench ({type(e).__name__}: {e}); "
            "give the file a run wrote with --benchmark-json"
        ) from None
    cells = {c.id: c for c in matrix.cells()}
    out: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    for b in benchmarks:
        cell = cells.get(b.get("param"))
        info = b.get("extra_info") or {}
        if cell is None or info.get("cell_fingerprint") != cell.fingerprint():
            continue  # not in this matrix, or defined differently now: run it
        if info.get("errors"):  # an older JSON that kept a cell with failed requests: run it again
            continue
        marks: dict[str, Any] = {"resumed_from": str(path)}
        then = info.get("provenance") or {}
        if then.get("machine") != here["machine"]:
            differs = (
                ", ".join(
                    k
                    for k in sorted(set(then.get("machine") or {}) | set(here["machine"]))
                    if (then.get("machine") or {}).get(k) != here["machine"].get(k)
                )
                or "no machine recorded"
            )
            if not any_machine:
                refused.append(f"{cell.id} (measured on another machine: {differs})")
                continue
            marks["resumed_from_other_machine"] = then.get("machine")
        if then.get("commit") != here["commit"]:
            marks["resumed_from_commit"] = then.get("commit")
        out[cell.id] = report.result_of_entry(b, cell.group.id, {**marks, "provenance": then})
    copied = {r["group"] for r in out.values()}
    groups = [
        {**e, "resumed_from": str(path)}
        for e in (doc.get("specbench") or {}).get("engine_groups") or []
        if isinstance(e, dict) and e.get("group") in copied
    ]
    return out, refused, groups


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in (
        "pytest-specbench",
        "torch",
        "transformers",
        "sglang",
        "pytest",
        "pytest-benchmark",
        "pytest-xdist",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def build_doc(config: pytest.Config, st: SpecbenchState) -> dict[str, Any]:
    from pytest_benchmark import __version__ as pb_version

    assert st.matrix is not None
    if st.machine_info is None:  # computed once: rewritten after every cell
        from ..gpus import inventory as gpus

        st.machine_info = config.hook.pytest_benchmark_generate_machine_info(config=config)
        config.hook.pytest_benchmark_update_machine_info(config=config, machine_info=st.machine_info)
        st.machine_info["specbench"] = {
            "backends": sorted({m.backend for m in st.matrix.methods}),
            "versions": versions(),
            "gpus": st.gpus_at_start if st.gpus_at_start is not None else gpus.describe(gpus.inventory()),
            **gpus.driver_info(),
        }
        st.commit_info = config.hook.pytest_benchmark_generate_commit_info(config=config)
    machine = st.machine_info
    starts = [e for e in st.engine_events if "ok" in e]
    measured = {r["cell_id"] for r in st.results}
    doc = report.build(
        st.results,
        baseline=st.matrix.baselines(),
        machine_info=machine,
        commit_info=st.commit_info or {},
        specbench={
            "matrix": st.matrix.path,
            "compare": [list(p) for p in st.matrix.compare],  # report/versus.py reads them
            "engine_starts": len(starts),
            # and the engines of resumed cells, as the earlier run recorded them (resumed_from)
            "engine_groups": starts
            + [g for g in st.resumed_groups if g["group"] not in {e["group"] for e in starts}],
            "engine_stops": [e for e in st.engine_events if e.get("event") == "stop"],
            # baseline instances run beside a group's engine, their rounds interleaved with its cells'
            "reference_engines": [e for e in st.engine_events if e.get("event") == "reference"],
            # drift sentinels: report.build turns them into "drift" and withholds smaller verdicts
            "sentinels": st.sentinels,
            # twins of a baseline (A/A controls): report/control.py withholds by what they read
            "controls": st.matrix.controls(separate_instances),
            # other starts of a member's engine, and the methods whose engines are instances of
            # their own: report/instances.py reads the start-to-start variance from them
            "twins": st.matrix.twins(separate_instances),
            "separate_instances": [m.name for m in st.matrix.methods if separate_instances(m.backend)],
            "gpus_used": list(st.gpus) if st.gpus is not None else None,
            "gpu_notes": st.gpu_notes,
            "gpus_busy": st.gpu_busy,  # GPUs others held memory on, leased anyway (busy_gpus.py)
            "hook_windows": hook_windows.windows_doc(st),  # a hooked GPU's service: stopped once
            # a crashed worker's cell that xdist ran again and that then measured is a result,
            # not a failed cell; the crash stays in crashed_workers either way
            "failed_cells": [f for f in st.failures if not (f.get("crashed") and f["cell"] in measured)],
            "crashed_workers": [{**c, "measured_again": c["cell"] in measured} for c in st.crashed_workers],
            "interrupted": st.interrupted,
            "hook_failures": group_hooks.hook_failures(st),
            **({"race": st.race.doc()} if st.race is not None else {}),
            "shard": sharding.doc(st),
            "matrix_digest": sharding.matrix_digest(st),  # sharded or not: merge checks it
            "resumed_cells": sorted(
                r["cell_id"] for r in st.results if (r.get("extra_info") or {}).get("resumed_from")
            ),
        },
        version=pb_version,
    )
    from ..report import pooled

    if st.matrix.compare:  # the sentence: each compare pair pooled over its shapes
        doc["specbench"]["compare_pooled"] = pooled.figures(doc)
    return doc


def write_json(config: pytest.Config, st: SpecbenchState, final: bool = False) -> None:
    """(Re)write the whole document: after every finished cell and at the end of the session.

    A write that fails (disk full, directory gone) never stops the run: the document stays in
    memory, the failure is said once on the terminal and kept in ``st.write_errors``, and the
    next cell's write tries again. When the session's last write fails too, the document goes to
    a rescue file (``rescue_paths``) and the summary says where, or that nothing could be written.
    """
    st.doc = build_doc(config, st)
    target = config.getoption("benchmark_json", None)
    if not target:
        return
    text = report.dumps(st.doc)
    if hasattr(target, "write"):  # older pytest-benchmark: an open binary file
        target.seek(0)
        target.truncate()
        target.write(text.encode())
        target.flush()
        return
    error = _write(Path(target), text)
    if error is None:
        if st.write_errors and st.written_to is None:
            _say(config, f"specbench: {target} written again after {len(st.write_errors)} failed write(s)")
        st.written_to = str(target)
        return
    st.written_to = None
    if not st.write_errors or st.write_errors[-1] != error:
        _say(
            config,
            f"specbench: could not write {error}; the results are kept and written after the next cell",
        )
    st.write_errors.append(error)
    if final:
        for rescue in rescue_paths(Path(target)):
            if _write(rescue, text) is None:
                st.written_to = str(rescue)
                return


def _write(target: Path, text: str) -> str | None:
    """Write ``text`` to ``target`` through a temporary file; the reason when it failed."""
    tmp = Path(str(target) + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(target)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return f"{target}: {e.strerror or e}"
    return None


def rescue_paths(target: Path) -> list[Path]:
    """Where the last write goes when the target fails: beside it, the working directory, the
    system's temporary directory."""
    import os
    import tempfile

    name = f"{target.stem}.rescued-{os.getpid()}.json"
    return [target.with_name(name), Path.cwd() / name, Path(tempfile.gettempdir()) / name]


def _say(config: pytest.Config, line: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)


def check_json_target(config: pytest.Config) -> None:
    """Before any engine starts: --benchmark-json's directory exists and is writable."""
    import os

    target = config.getoption("benchmark_json", None)
    if not target or hasattr(target, "write"):
        return
    parent = Path(target).resolve().parent
    if not parent.is_dir():
        raise pytest.UsageError(f"--benchmark-json {target}: directory {parent} does not exist")
    probe = parent / f".{Path(target).name}.probe-{os.getpid()}"
    try:  # a real write (os.access says yes for root, and for /proc)
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise pytest.UsageError(
            f"--benchmark-json {target}: cannot write in {parent} ({e.strerror or e})"
        ) from None


def summary_lines(st: SpecbenchState, config: pytest.Config) -> list[str]:
    if st.doc is None:
        return []
    out: list[str] = []
    target = config.getoption("benchmark_json", None)
    if st.plot_error:
        out.append(
            f"PLOTS FAILED: {st.plot_error} (the JSON is complete; rerun with "
            "python -m pytest_specbench.report RUN.json --plots DIR)"
        )
    if st.write_errors:
        where = (
            f"the results are in {st.written_to}"
            if st.written_to
            else "the results could not be written anywhere (this summary is all that is left)"
        )
        out.append(
            f"JSON NOT WRITTEN to {target}: {len(st.write_errors)} failed write(s), the last: "
            f"{st.write_errors[-1]}; {where}"
            if st.written_to != str(target)
            else f"JSON written to {target} after {len(st.write_errors)} failed write(s), the last: "
            f"{st.write_errors[-1]}"
        )
    if config.getoption("specbench_summary", "screen") == "screen":  # one screen; "full": the rest
        from .terminal import screen_lines

        return out + screen_lines(st, config, wall_vs_plan(st)) + _plots_not_made(st, config)
    return out + full_lines(st, config) + _plots_not_made(st, config)


def _plots_not_made(st: SpecbenchState, config: pytest.Config) -> list[str]:
    """--specbench-plots: which plots the run's data did not support, and why (after the screen)."""
    if not st.plots_not_made:
        return []
    from ..report.plots import not_made_lines
    from ..report.screen_text import clip

    index = Path(str(config.getoption("specbench_plots"))) / "index.md"
    return [f"plots not made (also under 'Plots not made' in {index}):"] + [
        clip(f"  {ln}") for ln in not_made_lines(st.plots_not_made)
    ]
