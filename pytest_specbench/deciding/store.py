"""One decision state for every process of a run: what was measured, dropped and tuned out,
as an append-only JSON-lines log under ``fcntl.flock``.

Under -n each xdist worker races on its own GPU set; a drop decided by one must skip the cells
queued on another, and the controller writes every drop into the results. Each process appends
its decisions (``append``) and, before it decides anything, reads what the others appended since
it last looked (``read_new``): the same events in the same order for every reader, so every
process holds the same state (Optuna's RDB and journal storages share one study between workers
the same way). The controller creates the directory (``create``) and removes it at the end. No
pytest here.

Faults:

- A process killed while appending leaves a torn last line (no newline). Under either lock no
  write is under way, so such a tail is torn for good: a reader reads the whole lines before it
  and stops there without consuming it, and the next writer, under the exclusive lock, truncates
  it (or ends it, when only its newline is missing) before it appends (as SQLite rolls back a
  half-written transaction before the next one), so every reader then goes on from the same
  byte. A whole line that does not parse (a damaged disk) is skipped by every reader alike.
  Optuna's JournalFileBackend also stops at a line without its newline, but never repairs it.
- A lock is taken with non-blocking ``flock`` retried with backoff, up to ``lock_timeout``
  seconds (``SPECBENCH_STORE_LOCK_TIMEOUT``, 60 s unless given); past it ``StoreLockTimeout``
  names the store and says another process holds its lock (a stopped or hung process, or a hung
  disk) instead of waiting forever.
- ``Store(path)`` on a store this process cannot reach (no such directory: a worker on another
  host) or cannot write raises ``StoreUnreachable`` with the reason, at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOG = "race.jsonl"
LOCK = "lock"
TIMEOUT_ENV = "SPECBENCH_STORE_LOCK_TIMEOUT"
DEFAULT_TIMEOUT = 60.0


class StoreError(RuntimeError):
    """The decision store cannot be used (the message says why)."""


class StoreUnreachable(StoreError):
    """This process cannot reach or write the store (e.g. an xdist worker on another host)."""


class StoreLockTimeout(StoreError, TimeoutError):
    """The store's lock was not free within the timeout: another process holds it."""


def _timeout(given: float | None) -> float:
    if given is not None:
        return float(given)
    env = os.environ.get(TIMEOUT_ENV)
    if not env:
        return DEFAULT_TIMEOUT
    try:
        return float(env)
    except ValueError:
        raise StoreError(f"{TIMEOUT_ENV}={env!r}: give the lock timeout in seconds, e.g. 60") from None


class Store:
    def __init__(self, directory: str | os.PathLike[str], lock_timeout: float | None = None):
        self.dir = Path(directory)
        self.path = self.dir / LOG
        self.lock_path = self.dir / LOCK
        self.lock_timeout = _timeout(lock_timeout)
        self._offset = 0
        self._check_reachable()

    @classmethod
    def create(cls, parent: str | None = None, lock_timeout: float | None = None) -> Store:
        d = tempfile.mkdtemp(prefix="specbench-race-", dir=parent)
        (Path(d) / LOG).touch()
        (Path(d) / LOCK).touch()
        return cls(d, lock_timeout)

    def _check_reachable(self) -> None:
        """Refuse at once a store this process cannot read and write (its files open ``r+b``)."""
        why = None
        if not self.dir.exists():
            why = "no such directory on this host"
        elif not self.dir.is_dir():
            why = "not a directory"
        else:
            for p in (self.path, self.lock_path):
                try:
                    with open(p, "r+b"):
                        pass
                except OSError as e:
                    why = f"cannot open {p.name} for reading and writing: {e.strerror or e}"
                    break
        if why:
            raise StoreUnreachable(
                f"decision store {self.dir}: {why}. Every process of a run must reach the store "
                "the controller created (an xdist worker on another host, e.g. over ssh, cannot: "
                "race under -n on one host)"
            )

    @contextlib.contextmanager
    def _locked(self, kind: int) -> Iterator[None]:
        """``kind`` (LOCK_SH or LOCK_EX) taken without blocking, retried with backoff up to the
        lock timeout; past it StoreLockTimeout."""
        with open(self.lock_path, "a+b") as lock:
            deadline = time.monotonic() + self.lock_timeout
            pause = 0.001
            while True:
                try:
                    fcntl.flock(lock, kind | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        what = "exclusive" if kind == fcntl.LOCK_EX else "shared"
                        raise StoreLockTimeout(
                            f"decision store {self.dir}: its lock ({self.lock_path}) was not free "
                            f"within {self.lock_timeout:g} s ({what} lock wanted): another process "
                            f"holds it (a stopped or hung process, or a hung disk?); "
                            f"{TIMEOUT_ENV} sets the timeout"
                        ) from None
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, 0.1)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, event: dict[str, Any]) -> None:
        """One decision, written whole (one line) under the exclusive lock, after cutting off a
        torn last line that a process killed while appending left."""
        line = (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        with self._locked(fcntl.LOCK_EX):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            try:
                self._repair(fd)
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)

    @staticmethod
    def _repair(fd: int) -> None:
        """Under the exclusive lock: truncate a last line without its newline (torn: no writer
        is under way) back to the end of the last whole line, or end it when it is a whole event
        but for its newline. No reader has consumed it."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        end, block = size, 4096
        while end > 0:
            start = max(0, end - block)
            chunk = os.pread(fd, end - start, start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                end = start + i + 1
                break
            end = start
        tail = os.pread(fd, size - end, end)
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            if isinstance(json.loads(tail.decode("utf-8")), dict):  # whole but for its newline
                os.write(fd, b"\n")
                return
        os.ftruncate(fd, end)
        os.fsync(fd)

    def read_new(self) -> list[dict[str, Any]]:
        """The events appended (by any process) since this reader last looked, in log order. A
        torn last line is left unread (the next append repairs it); a whole line that does not
        parse is skipped (by every reader alike)."""
        with self._locked(fcntl.LOCK_SH), open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # only whole lines; a torn tail stays unconsumed
        self._offset += end
        events = []
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                event = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                continue  # damaged whole line: skipped by every reader, never raised
            if isinstance(event, dict):
                events.append(event)
        return events
