"""Shell commands the matrix runs around an engine group (``before_group`` / ``after_group``, a
method's ``hooks:`` or an include entry's) and around the whole run (top-level ``hooks:
{before_run, after_run}``): their output goes to the group's log (the run's to run-hooks.log),
variables tell them the group, TP and GPUs. A failing ``before_group`` fails its group's start,
so its cells fail with the hook's message and the other groups run; ``after_group`` runs whether
the group started, failed or finished, and when it fails the run fails: the summary and
``specbench.hook_failures`` name the hook, its last output and what it may have left stopped (an
after-hook restores what its before-hook stopped, e.g. a live service). An interrupt while a hook
runs stops that hook's process group before anything else runs (an after-hook never races the
before-hook it undoes). Hooks that name ``gpus`` run only for the groups that lease one of them; the schedule
gives those GPUs only to groups that cannot run without them and runs those last, back to back
(planning/schedule.py), and ``before`` / ``after`` run the hooks once for that window, so a service
living there is stopped once and started once (hook_windows.py, gpus/service_window.py).
A failing ``before_run`` stops the run before any engine starts;
``after_run`` runs at its end either way, and its failure fails the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

HOOK_TIMEOUT_S = 600.0  # a hook that has not exited by then is killed and counts as failed
RUN_LOG = "run-hooks.log"


class GroupHookError(RuntimeError):
    """A ``before_group`` hook failed: the group does not start."""


def log_dir() -> Path:
    return Path(os.environ.get("SPECBENCH_LOG_DIR", "."))


def group_log(group: Any) -> Path:
    """The group's log, the file its engine writes to (engines/sglang.py, server.py)."""
    return log_dir() / f"engine-{group.id}.log"


def run_hook(
    hook: str, cmd: str, log: Path, env: dict[str, str], timeout_s: float = HOOK_TIMEOUT_S
) -> str | None:
    """Run ``cmd`` with ``sh -c``, its output appended to ``log``; None when it exits 0, else
    why it failed with the end of its output."""
    log.parent.mkdir(parents=True, exist_ok=True)
    where = ", ".join(
        f"{k.removeprefix('SPECBENCH_').lower()} {v}" for k, v in env.items() if k != "SPECBENCH_LOG"
    )
    t0 = time.monotonic()
    with log.open("ab") as f:
        f.write(f"== specbench {hook} hook ({where}): {cmd}\n".encode())
        f.flush()
        offset = f.tell()
        proc = subprocess.Popen(
            cmd,
            shell=True,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,  # a timeout kills whatever the command started too
        )
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        except BaseException:  # SIGTERM / Ctrl-C: the hook stops before anything else runs
            stop_group(proc)
            f.write(f"== specbench {hook} hook stopped: the run was interrupted\n".encode())
            raise
        took = time.monotonic() - t0
        end = f"exited {rc}" if rc is not None else f"killed after its {timeout_s:g} s limit"
        f.write(f"== specbench {hook} hook {end} after {took:.1f} s\n".encode())
    if rc == 0:
        return None
    with log.open("rb") as f:
        f.seek(offset)
        out = f.read().decode(errors="replace").splitlines()[:-1]
    tail = " | ".join(line.strip() for line in out[-3:] if line.strip())
    status = f"exit status {rc}" if rc is not None else f"did not finish within {timeout_s:g} s"
    return f"{hook} hook `{cmd}` failed ({status})" + (f": {tail}" if tail else "") + f"; log: {log}"


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM to a hook's process group, SIGKILL after ``grace_s``; returns once it is gone."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def group_env(hook: str, group: Any, gpus: tuple[int, ...], ok: bool | None = None) -> dict[str, str]:
    """What a group hook is told: the hook, the group, its method, TP size and leased GPUs (NVML
    indices; empty when none were leased), its log, and for after_group whether it ran clean."""
    env = {
        "SPECBENCH_HOOK": hook,
        "SPECBENCH_GROUP": group.id,
        "SPECBENCH_METHOD": group.method.name,
        "SPECBENCH_TP": str(group.tp),
        "SPECBENCH_GPUS": ",".join(map(str, gpus)),
        "SPECBENCH_LOG": str(group_log(group)),
    }
    if ok is not None:
        env["SPECBENCH_GROUP_OK"] = "1" if ok else "0"
    return env


def hook_gpus(group: Any) -> frozenset[int] | None:
    """The GPUs a group's hooks are for (``hooks: {gpus: [0]}``), None: every group's."""
    v = dict(group.method.hooks).get("gpus")
    return frozenset(int(x) for x in v.split(",")) if v else None


def hooks_apply(group: Any, gpus: tuple[int, ...]) -> bool:
    """Whether the group's hooks run for a start on ``gpus``: always without ``gpus:`` in them or
    where no GPU is leased (the GPUs unknown); else only when it leased one of theirs."""
    only = hook_gpus(group)
    return only is None or not gpus or bool(only & set(gpus))


def hooked_gpus(groups: Any, pool: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The GPUs (of ``pool`` where given) that some group's hooks name: a service lives there, and
    the schedule keeps the groups that lease them in one window (planning/schedule.py)."""
    out: set[int] = set()
    for g in groups:
        out |= hook_gpus(g) or set()
    return tuple(sorted(out if pool is None else out & set(pool)))


def before_group(group: Any, gpus: tuple[int, ...], ev: dict[str, Any]) -> None:
    """The group's before_group hook, if any; raises GroupHookError when it fails."""
    cmd = dict(group.method.hooks).get("before_group")
    if cmd is None or not hooks_apply(group, gpus):
        return
    try:
        why = run_hook("before_group", cmd, group_log(group), group_env("before_group", group, gpus))
    except BaseException:
        ev["before_group"] = {
            "ok": False,
            "error": f"before_group hook `{cmd}` interrupted: its processes were stopped before "
            "after_group ran",
        }
        raise
    ev["before_group"] = {"ok": why is None, **({"error": why} if why else {})}
    if why:
        raise GroupHookError(f"{group.id}: {why}")


def after_group(group: Any, gpus: tuple[int, ...], ev: dict[str, Any], ok: bool) -> None:
    """The group's after_group hook, if any (its failure is recorded on the event, the cells
    measured stay measured)."""
    cmd = dict(group.method.hooks).get("after_group")
    if cmd is None or not hooks_apply(group, gpus):
        return
    why = run_hook("after_group", cmd, group_log(group), group_env("after_group", group, gpus, ok))
    ev["after_group"] = {"ok": why is None, **({"error": why, "gpus": list(gpus)} if why else {})}


def window_key(group: Any, gpus: Any) -> str:
    """A hooked GPU's window (hook_windows.py): its GPUs and the hook's commands, so the groups
    with the same hook share one."""
    h = dict(group.method.hooks)
    return json.dumps([sorted(gpus), h.get("before_group"), h.get("after_group")])


def start_key(st: Any, group: Any, leased: tuple[int, ...]) -> str | None:
    """The window an engine start on ``leased`` GPUs enters: the run leases GPUs and the group's
    hooks name one it leased; else None (its hooks run around the start)."""
    only = hook_gpus(group)
    if st.leases is None or not only or not (only & set(leased)):
        return None
    return window_key(group, only)


def _windows(st: Any) -> Any:
    from ..gpus.service_window import ServiceWindows

    return ServiceWindows(st.leases.dir)


def before(st: Any, group: Any, leased: tuple[int, ...], ev: dict[str, Any], token: str) -> None:
    """before_group around an engine start (``token``: its lease's); in a hooked GPU's window
    only for the first start, so its service is stopped once: the others record that it ran."""
    key = start_key(st, group, leased)
    if key is None:
        before_group(group, leased, ev)
        return
    w = _windows(st)
    if not w.enter(key, token, group.id):
        ev["before_group"] = {"ok": True, "ran": False, "window": "open: an earlier start's before_group ran"}
        return
    try:
        before_group(group, leased, ev)
    except BaseException:
        w.opened(key, False)
        raise
    w.opened(key, True)
    ev["hook_window"] = "opened"


def after(st: Any, group: Any, leased: tuple[int, ...], ev: dict[str, Any], ok: bool, token: str) -> None:
    """after_group once the engine stopped (or failed to start); in a hooked GPU's window only for
    the last start out of it with none of its cells left, so its service is started once."""
    key = start_key(st, group, leased)
    if key is None:
        after_group(group, leased, ev, ok)
        return
    run, left = _windows(st).leave(key, token, group.id)
    if run:
        after_group(group, leased, ev, ok)
        ev["hook_window"] = "closed" if ev.get("hook_window") is None else "opened and closed"
        return
    gpus = ",".join(map(str, json.loads(key)[0]))
    ev["after_group"] = {"ok": True, "ran": False, "window": f"open: {left} cell(s) still need GPU(s) {gpus}"}


def hook_failures(st: Any) -> list[dict[str, Any]]:
    """The run's failed after-hooks (``specbench.hook_failures``): which hook, of which group and
    GPUs, its error with its last output, and what it may have left stopped."""
    out = []
    ran_before = {e["group"] for e in st.engine_events if (e.get("before_group") or {}).get("ok")}
    had_before = {e["group"] for e in st.engine_events if e.get("before_group")}
    for e in st.engine_events:
        after = e.get("after_group") or {}
        if after.get("ok") is False:
            before = e["group"] in ran_before
            left = (
                (
                    "whatever its before_group hook stopped"
                    + (f" on GPUs {','.join(map(str, after.get('gpus') or []))}" if after.get("gpus") else "")
                    + (" (that hook ran)" if before else "")
                )
                if e["group"] in had_before
                else "nothing a before_group hook stopped (the group has none)"
            )
            out.append(
                {"hook": "after_group", "group": e["group"], "error": after["error"], "may_be_left": left}
            )
    for why in st.hook_errors:
        if why.startswith("after_run"):
            out.append(
                {
                    "hook": "after_run",
                    "group": None,
                    "error": why,
                    "may_be_left": "whatever before_run stopped",
                }
            )
    return out


def fail_on_after_hooks(st: Any, session: Any) -> None:
    """A failed after_group fails the run, said in the summary (after_run's is said already)."""
    import pytest

    bad = [f for f in hook_failures(st) if f["hook"] == "after_group"]
    for f in bad:
        why = f"{f['error']}; may be left stopped: {f['may_be_left']}"
        st.hook_errors.append(f"{f['group']}: {why}")
        report_failed_hook(session, st, f"after_group[{f['group']}]", why)
    if bad:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _HookFailure:
    """A failed hook's longrepr: its text, and the first line as the crash message pytest's short
    summary prints after the node id."""

    def __init__(self, text: str, where: str):
        self.text = text
        self.reprcrash = _Crash(where, text)

    def toterminal(self, tw: Any) -> None:
        tw.line(self.text)

    def __str__(self) -> str:
        return self.text


class _Crash:
    def __init__(self, path: str, message: str):
        self.path, self.lineno, self.message = path, 0, message


def hook_nodeid(st: Any, session: Any, name: str) -> str:
    """``benches/specbench.yaml::after_group[ar-tp2]``: the matrix that names the hook, then it."""
    path = Path(str(st.matrix.path)) if st.matrix is not None and st.matrix.path else Path("specbench")
    try:
        rel = path.resolve().relative_to(Path(str(session.config.rootpath)).resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    return f"{rel}::{name}"


def report_failed_hook(session: Any, st: Any, name: str, why: str) -> None:
    """A failed hook counts as a failed test in pytest's own tally (the "1 failed, 8 passed" a CI
    log ends with, ``session.testsfailed``, the short summary, junitxml where still open): one
    failed call report, its node id naming the matrix and the hook, sent to every plugin as a
    test's would be. On the controller (under xdist too), once the hooks' outcomes are known."""
    import pytest

    nodeid = hook_nodeid(st, session, name)
    rel = nodeid.split("::", 1)[0]
    rep = pytest.TestReport(
        nodeid=nodeid,
        location=(rel, None, name),
        keywords={name: 1, "specbench_hook": 1},
        outcome="failed",
        longrepr=_HookFailure(why, rel),  # type: ignore[arg-type]
        when="call",
        specbench_hook=name,
    )
    session.config.hook.pytest_runtest_logreport(report=rep)
    rep.specbench_hook_said = True  # type: ignore[attr-defined]


def hook_teststatus(report: Any) -> tuple[str, str, str] | None:
    """pytest_report_teststatus for a failed hook's report: counted among the failed; while it is
    sent no progress letter or line (the cells' progress has ended at 100 %), then "FAILED" for
    the short summary that names it."""
    if not getattr(report, "specbench_hook", None):
        return None
    return ("failed", "F", "FAILED") if getattr(report, "specbench_hook_said", False) else ("failed", "", "")


def run_hook_env(hook: str, matrix_path: str) -> dict[str, str]:
    return {
        "SPECBENCH_HOOK": hook,
        "SPECBENCH_MATRIX": matrix_path,
        "SPECBENCH_LOG": str(log_dir() / RUN_LOG),
    }


def run_level(hook: str, matrix: Any) -> str | None:
    """The matrix's before_run / after_run hook, if any: None, or why it failed."""
    cmd = dict(matrix.hooks).get(hook)
    if cmd is None:
        return None
    return run_hook(hook, cmd, log_dir() / RUN_LOG, run_hook_env(hook, matrix.path))


def _run_hooks_apply(config: Any, st: Any) -> bool:
    """Run hooks belong to a run that may start engines, on the process that runs it (the
    controller under xdist), not to a plan or a collection."""
    return (
        st.matrix is not None
        and bool(st.matrix.hooks)
        and not hasattr(config, "workerinput")
        and not config.getoption("specbench_plan")
        and not config.getoption("collectonly")
    )


def session_start(config: Any, st: Any) -> None:
    """before_run; when it fails, after_run too, and the run stops before any engine starts."""
    import pytest

    if not _run_hooks_apply(config, st):
        return
    why = run_level("before_run", st.matrix)
    if why:
        after = run_level("after_run", st.matrix)
        pytest.exit(
            f"{st.matrix.path}: {why}; the run stopped before any engine started"
            + (f"; then {after}" if after else ""),
            returncode=pytest.ExitCode.TESTS_FAILED,
        )


def session_finish(config: Any, st: Any, session: Any) -> None:
    """after_run, once the engines are stopped; a failure fails the run and is said in the summary."""
    import pytest

    if not _run_hooks_apply(config, st):
        return
    why = run_level("after_run", st.matrix)
    if why:
        st.hook_errors.append(why)
        report_failed_hook(session, st, "after_run", why)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
