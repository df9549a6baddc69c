"""One decision state for every process of a run: what was measured, dropped and tuned out,
as an append-only JSON-lines log under ``fcntl.flock``.

Under -n each xdist worker races on its own GPU set; a drop decided by one must skip the cells
queued on another, and the controller writes every drop into the results. Each process appends
its decisions (``append``) and, before it decides anything, reads what the others appended since
it last looked (``read_new``): the same events in the same order for every reader, so every
process holds the same state (Optuna's RDB and journal storages share one study between workers
the same way). The controller creates the directory (``create``) and removes it at the end. No
pytest here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOG = "race.jsonl"
LOCK = "lock"


class Store:
    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        self.path = self.dir / LOG
        self._offset = 0

    @classmethod
    def create(cls, parent: str | None = None) -> Store:
        d = tempfile.mkdtemp(prefix="specbench-race-", dir=parent)
        (Path(d) / LOG).touch()
        (Path(d) / LOCK).touch()
        return cls(d)

    @contextlib.contextmanager
    def _locked(self, kind: int) -> Iterator[None]:
        with open(self.dir / LOCK, "a+b") as lock:
            fcntl.flock(lock, kind)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, event: dict[str, Any]) -> None:
        """One decision, written whole (one line) under the exclusive lock."""
        line = json.dumps(event, separators=(",", ":"), default=str) + "\n"
        with self._locked(fcntl.LOCK_EX), open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read_new(self) -> list[dict[str, Any]]:
        """The events appended (by any process) since this reader last looked, in log order."""
        with self._locked(fcntl.LOCK_SH), open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # only whole lines
        self._offset += end
        return [json.loads(x) for x in data[:end].decode("utf-8").splitlines() if x.strip()]
