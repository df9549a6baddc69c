"""GPU leases: every engine start of a run takes its GPUs from one pool shared by all processes.

The pool lives in a run directory (created by the xdist controller, or by the single pytest
process, and passed to the workers): ``state.json`` holds the pool (the GPUs chosen at the
start: busy ones never enter it), the order groups are handed out in, the GPUs held (by whom)
and the starts waiting; every read-modify-write of it happens under ``fcntl.flock`` on
``lock``. ``leases.jsonl`` logs each take, return and reclaim with wall-clock times.

An engine start asks for ``n`` GPUs and waits while they are taken. Waiting starts are served
by their group's rank in the scheduler's order with the same first-fit rule as the plan's
schedule (:func:`pytest_specbench.planning.schedule.grant`). At the run's start every worker asks at once:
the groups handed out first are expected for a few seconds and keep their place in the queue
before they have asked, so the first to ask is not the first served. A lease is returned when its engine stops
(or fails to start); a lease or a waiting entry of a process that is gone (its pid no longer
runs, or runs another program) is reclaimed by the next process that looks. No pytest here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..planning import schedule

POLL_S = 0.05  # how often a waiting start looks again (one small file read under a lock)
EXPECT_S = 10.0  # how long the groups handed out at the run's start keep their place in the queue


class LeaseError(RuntimeError):
    pass


@dataclass(frozen=True)
class Lease:
    gpus: tuple[int, ...]
    group: str
    worker: str
    pid: int
    token: str
    requested_at: float  # time.time()
    taken_at: float
    cold: bool = False  # the first lease of this GPU set in the run: its engine warms the machine

    @property
    def waited_s(self) -> float:
        return self.taken_at - self.requested_at

    def event(self) -> dict[str, Any]:
        """What goes into the engine start event of the results JSON."""
        return {
            "gpus": list(self.gpus),
            "requested_at": self.requested_at,
            "taken_at": self.taken_at,
            "waited_s": round(self.waited_s, 6),
            **({"cold": True} if self.cold else {}),
        }


def _pid_start(pid: int) -> str | None:
    """The process's start time in clock ticks (Linux /proc), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive(entry: dict[str, Any]) -> bool:
    pid = int(entry["pid"])
    if not pid_alive(pid):
        return False
    start = entry.get("pid_start")
    return start is None or _pid_start(pid) in (None, start)


class LeasePool:
    """The run directory's pool. Cheap to construct; every call opens, locks and closes."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self._ticket: dict[str, Any] | None = None  # the next start queued by release(then=...)
        self.dir = Path(run_dir)
        self.state_path = self.dir / "state.json"
        self.lock_path = self.dir / "lock"
        self.log_path = self.dir / "leases.jsonl"

    # ------------------------------------------------------------------ set-up
    @classmethod
    def create(
        cls,
        run_dir: str | os.PathLike[str],
        pool: tuple[int, ...],
        notes: list[str] | None = None,
        baseline_mib: dict[int, int] | None = None,
    ) -> LeasePool:
        """A new pool of ``pool`` GPUs; ``notes`` say why the others are left out (busy)."""
        self = cls(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lock_path.touch()
        with self._locked() as s:
            s.clear()
            s.update(
                pool=list(pool),
                notes=list(notes or []),
                baseline_mib={str(k): v for k, v in (baseline_mib or {}).items()},
                order=[],
                expected={},
                held={},
                waiting=[],
            )
        return self

    def info(self) -> dict[str, Any]:
        with self._locked(write=False) as s:
            return json.loads(json.dumps(s))

    @property
    def pool(self) -> tuple[int, ...]:
        return tuple(self.info()["pool"])

    def set_order(
        self, groups: list[str], expected: dict[str, int] | None = None, reserved: tuple[int, ...] = ()
    ) -> None:
        """The order groups are handed out in (a waiting start's rank), and the groups about to
        ask for GPUs (group -> GPUs): they keep their place for EXPECT_S before they ask; the GPUs
        only a start that cannot run without them gets (schedule.grant: a hook's service's)."""
        until = time.time() + EXPECT_S
        with self._locked() as s:
            s["order"] = list(groups)
            s["reserved"] = list(reserved)
            s["expected"] = {g: {"gpus": n, "until": until} for g, n in (expected or {}).items()}

    # ------------------------------------------------------------------ leases
    def _entry(self, group: str, n: int, worker: str, keep: tuple[int, ...] = ()) -> dict[str, Any]:
        pid = os.getpid()
        return {
            "token": uuid.uuid4().hex,
            "pid": pid,
            "pid_start": _pid_start(pid),
            "group": group,
            "worker": worker,
            "gpus": n,
            "since": time.time(),
            **({"keep": list(keep)} if keep else {}),
        }

    def acquire(
        self,
        group: str,
        n: int,
        worker: str = "main",
        timeout_s: float | None = None,
        poll_s: float = POLL_S,
        keep: tuple[int, ...] = (),
    ) -> Lease:
        """Take ``n`` GPUs of the pool, waiting while they are taken. A start queued by this
        process's last :meth:`release` (``then``) keeps the place it got there. ``keep``: the
        GPU set this start must have (a drift family's next start, on the GPUs its baseline's
        rounds were measured on): those GPUs, no others, and no other start takes them meanwhile
        (schedule.grant ``wants``). The lease is ``cold`` when no lease of the run had its GPU
        set before."""
        me = self._entry(group, n, worker, keep if len(keep) == n else ())
        ticket, self._ticket = self._ticket, None
        if ticket is not None and ticket["group"] == group:
            me.update(token=ticket["token"], since=ticket["since"])
        token, since = me["token"], me["since"]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        queued = False
        try:
            while True:
                with self._locked() as s:
                    if n > len(s["pool"]):
                        raise LeaseError(
                            f"{group}: needs {n} GPUs; the pool has {len(s['pool'])} "
                            f"({', '.join(map(str, s['pool'])) or 'none'})"
                        )
                    self._reclaim(s)
                    if not queued:
                        s["waiting"] = [w for w in s["waiting"] if w["token"] != token] + [me]
                        s["expected"].pop(group, None)
                        queued = True
                    got = self._grants(s).get(token)
                    if got is not None:
                        now = time.time()
                        for g in got:
                            s["held"][str(g)] = {
                                k: me[k] for k in ("token", "pid", "pid_start", "group", "worker")
                            }
                        s["waiting"] = [w for w in s["waiting"] if w["token"] != token]
                        queued = False
                        key = ",".join(map(str, sorted(got)))
                        cold = key not in s.setdefault("warm", [])
                        if cold:
                            s["warm"].append(key)
                        lease = Lease(tuple(got), group, worker, me["pid"], token, since, now, cold)
                        self._log(
                            s,
                            "taken",
                            lease.gpus,
                            me,
                            waited_s=round(lease.waited_s, 6),
                            **({"cold": True} if cold else {}),
                        )
                        return lease
                if deadline is not None and time.monotonic() > deadline:
                    raise LeaseError(f"{group}: no {n} GPUs free within {timeout_s:g} s")
                time.sleep(poll_s)
        finally:
            if queued:  # interrupted or failed while waiting: leave the queue
                with self._locked() as s:
                    s["waiting"] = [w for w in s["waiting"] if w["token"] != token]

    def release(self, lease: Lease, then: tuple[Any, ...] | None = None) -> dict[str, Any]:
        """Return a lease's GPUs; what goes into the engine stop event. ``then`` (group, GPUs[,
        the GPU set it keeps]): this process's next start, queued in the same step, so no other
        start slips in between with a later place in the order (and, keeping a GPU set, none takes
        its GPUs); it keeps the place EXPECT_S unless it asks."""
        with self._locked() as s:
            mine = [g for g, h in s["held"].items() if h["token"] == lease.token]
            for g in mine:
                del s["held"][g]
            now = time.time()
            self._log(
                s,
                "returned",
                lease.gpus,
                {"group": lease.group, "worker": lease.worker, "pid": lease.pid},
                held_s=round(now - lease.taken_at, 6),
            )
            if then is not None and then[1] <= len(s["pool"]):
                keep = tuple(then[2]) if len(then) > 2 and then[2] and len(then[2]) == then[1] else ()
                nxt = self._entry(then[0], then[1], lease.worker, keep) | {"until": now + EXPECT_S}
                s["waiting"].append(nxt)
                self._ticket = {"group": then[0], "token": nxt["token"], "since": nxt["since"]}
        return {"gpus": list(lease.gpus), "returned_at": now, "held_s": round(now - lease.taken_at, 6)}

    def held(self) -> dict[int, dict[str, Any]]:
        return {int(g): h for g, h in self.info()["held"].items()}

    # ------------------------------------------------------------------ internals
    def _grants(self, s: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        order = {g: i for i, g in enumerate(s["order"])}
        queue = [
            (order.get(w["group"], len(order)), w["since"], w["token"], int(w["gpus"])) for w in s["waiting"]
        ]
        queue += [
            (order.get(g, len(order)), 0.0, f"expected:{g}", int(e["gpus"])) for g, e in s["expected"].items()
        ]
        free = [g for g in s["pool"] if str(g) not in s["held"]]
        waiting = [(token, n) for _, _, token, n in sorted(queue)]
        keeps = {w["token"]: tuple(w["keep"]) for w in s["waiting"] if w.get("keep")}
        return schedule.grant(free, waiting, tuple(s.get("reserved", ())), len(s["pool"]), keeps)

    def _reclaim(self, s: dict[str, Any]) -> None:
        dead = {h["token"]: h for h in s["held"].values() if not _alive(h)}
        for token, h in dead.items():
            gpus = sorted(int(g) for g, x in s["held"].items() if x["token"] == token)
            for g in gpus:
                del s["held"][str(g)]
            self._log(s, "reclaimed", tuple(gpus), h, why=f"pid {h['pid']} is gone")
        now = time.time()  # a start queued ahead by a release that did not come for it drops out
        s["waiting"] = [w for w in s["waiting"] if _alive(w) and w.get("until", now + 1) > now]
        s["expected"] = {g: e for g, e in s.get("expected", {}).items() if e["until"] > now}

    def _log(
        self, s: dict[str, Any], event: str, gpus: tuple[int, ...], who: dict[str, Any], **extra: Any
    ) -> None:
        line = {
            "t": time.time(),
            "event": event,
            "gpus": list(gpus),
            "group": who.get("group"),
            "worker": who.get("worker"),
            "pid": who.get("pid"),
            **extra,
            "held": sorted(int(g) for g in s["held"]),
        }
        with open(self.log_path, "a") as f:
            f.write(json.dumps(line) + "\n")

    @contextlib.contextmanager
    def _locked(self, write: bool = True) -> Iterator[dict[str, Any]]:
        """The state under an exclusive flock; written back (atomically) when ``write``."""
        if not self.lock_path.exists():
            raise LeaseError(f"{self.dir}: not a GPU lease directory (no lock file)")
        with locked_state(self.lock_path, self.state_path, write) as s:
            yield s


@contextlib.contextmanager
def locked_state(lock_path: Path, state_path: Path, write: bool = True) -> Iterator[dict[str, Any]]:
    """A JSON state file under an exclusive flock on ``lock_path``: read (``{}`` where absent),
    yielded, and written back atomically (a temporary file replaced) when ``write`` and changed."""
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = state_path.read_text() if state_path.exists() else "{}"
            s = json.loads(text)
            yield s
            if write and json.dumps(s) != text:
                tmp = state_path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(s))
                os.replace(tmp, state_path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """A lease log: a run directory's leases.jsonl, or the copy a run leaves in its log dir."""
    p = Path(path)
    p = p / "leases.jsonl" if p.is_dir() else p
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def overlaps(events: list[dict[str, Any]]) -> list[str]:
    """GPUs held by two leases at once in a lease log (empty when none): a check for tests and
    for reading a run's log afterwards."""
    holder: dict[int, tuple[Any, Any]] = {}
    out = []
    for e in sorted(events, key=lambda e: e["t"]):
        who = (e.get("pid"), e.get("group"))
        for g in e["gpus"]:
            if e["event"] == "taken":
                if g in holder:
                    out.append(f"GPU {g} taken by {who} at {e['t']:.6f} while held by {holder[g]}")
                holder[g] = who
            elif holder.get(g) == who:
                del holder[g]
    return out
