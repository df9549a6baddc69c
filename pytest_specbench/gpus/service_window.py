"""A hooked GPU's service window, shared by every process of a run: hooks that name their GPUs
(``hooks: {gpus: [0], before_group: ..., after_group: ...}``) stop the service living there once,
at the first engine start that leases such a GPU, and start it once, when no start that needs it
holds it and no cell that needs it is left to run.

The state lives beside the GPU leases (leases.py) in the run directory: ``windows.json`` under
``fcntl.flock`` on ``windows.lock``. One window per hook (its GPUs and commands): ``expect`` gives
it the run's cells that need it (node ids, set once by the process that schedules them); every
process marks each of them ``done`` when it has run (passed, failed or skipped); an engine start
``enter``s the window (the first one runs the before-hook: ``True``) and ``leave``s it when its
engine has stopped (the last one out, with no cell left, runs the after-hook: ``True``). A start
whose before-hook failed leaves the window closed, and its after-hook runs as for any failed start.
Whatever is still open when the run ends is closed by the process that owns the run directory
(``close_open``). No pytest here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .leases import locked_state, pid_alive

POLL_S = 0.05  # how often a start waits for another process's before-hook to finish

CLOSED, OPENING, OPEN = "closed", "opening", "open"


class ServiceWindows:
    """The run directory's hook windows. Cheap to construct; every call opens, locks and closes."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.dir = Path(run_dir)
        self.state_path = self.dir / "windows.json"
        self.lock_path = self.dir / "windows.lock"

    def expect(self, items: dict[str, str]) -> None:
        """The run's cells that need a window: node id -> the window's key (its hook). Set once,
        before any engine starts; a window no cell needs is not kept."""
        with self._locked() as s:
            for key in set(items.values()):
                w = s.setdefault(key, _new())
                w["remaining"] = sorted(n for n, k in items.items() if k == key)

    def done(self, nodeid: str) -> None:
        """A cell has run (or was skipped): it no longer keeps any window open."""
        with self._locked() as s:
            for w in s.values():
                if nodeid in w["remaining"]:
                    w["remaining"].remove(nodeid)

    def enter(self, key: str, token: str, group: str, poll_s: float = POLL_S) -> bool:
        """An engine start that leases the window's GPUs: True when the window is closed and the
        caller runs the before-hook (then :meth:`opened`); False when it is open already. Waits
        while another process runs the before-hook."""
        while True:
            with self._locked() as s:
                w = s.setdefault(key, _new())
                if w["state"] == OPENING and not pid_alive(int(w["opening_pid"])):
                    w["state"] = OPEN  # its before-hook may have stopped the service: keep it stopped
                if w["state"] != OPENING:
                    w["holders"].append(token)
                    w["starts"].append(group)
                    if w["state"] == OPEN:
                        return False
                    w.update(state=OPENING, opening_pid=os.getpid(), opened_by=group, opened_at=time.time())
                    w["before_runs"] += 1
                    return True
            time.sleep(poll_s)

    def opened(self, key: str, ok: bool) -> None:
        """The before-hook's outcome: the window is open, or (it failed) closed again."""
        with self._locked() as s:
            w = s[key]
            w["state"] = OPEN if ok else CLOSED

    def leave(self, key: str, token: str, group: str) -> tuple[bool, int]:
        """An engine start of the window has stopped (or failed to start): (whether the caller runs
        the after-hook, the window's cells still to run). True for the last start out of an open
        window with no cell left (the window closes), and for a start whose before-hook failed."""
        with self._locked() as s:
            w = s.setdefault(key, _new())
            if token in w["holders"]:
                w["holders"].remove(token)
            left = len(w["remaining"])
            if w["state"] == CLOSED:  # its before-hook failed: its after-hook restores
                w["after_runs"] += 1
                return True, left
            if w["state"] == OPEN and not w["holders"] and not left:
                w.update(state=CLOSED, closed_by=group, closed_at=time.time())
                w["after_runs"] += 1
                return True, left
            return False, left

    def close_open(self) -> list[tuple[str, str]]:
        """At the run's end, by the process that owns the run directory: the windows still open
        (a cell never ran: interrupted, a worker crashed), closed now; (key, the group that opened
        it) for each, whose after-hook the caller runs."""
        out = []
        with self._locked() as s:
            for key, w in s.items():
                if w["state"] != CLOSED:
                    w.update(state=CLOSED, closed_by=None, closed_at=time.time())
                    w["after_runs"] += 1
                    out.append((key, str(w.get("opened_by") or "")))
        return out

    def info(self) -> dict[str, Any]:
        with self._locked(write=False) as s:
            return json.loads(json.dumps(s))

    @contextlib.contextmanager
    def _locked(self, write: bool = True) -> Iterator[dict[str, Any]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with locked_state(self.lock_path, self.state_path, write) as s:
            yield s


def _new() -> dict[str, Any]:
    return {
        "state": CLOSED,
        "holders": [],  # tokens of the engine starts inside it now
        "remaining": [],  # node ids of the cells that need it, not yet run
        "starts": [],  # the groups whose starts entered it, in order
        "opened_by": None,
        "opened_at": None,
        "closed_by": None,
        "closed_at": None,
        "before_runs": 0,  # starts that ran the before-hook (the window was closed)
        "after_runs": 0,  # starts (or the run's end) that ran the after-hook
    }
