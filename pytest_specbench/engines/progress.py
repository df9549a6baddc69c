"""Signs of life while a cell runs: which cell, which round, how many requests are done, elapsed
time and the plan's ETA for the cell. Workloads and the request helpers update :data:`PROGRESS`
(plain counters, no locks needed); a ticker thread prints it every few seconds. No pytest here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Progress:
    cell: str = ""
    round: int = 0  # 1-based; warm-up rounds count as rounds 1..warmup
    rounds: int = 0
    warmup: int = 0
    done: int = 0  # requests finished in the current round
    total: int = 0  # requests of the current round (0: not known, e.g. agentic turns)
    t0: float = 0.0
    who: str = ""  # "": the cell's own round; else whose round it is (the interleaved baseline's)

    def start_round(self, r: int, total: int, who: str = "") -> None:
        self.round, self.done, self.total, self.who = r + 1, 0, total, who

    def request_done(self) -> None:
        self.done += 1

    def line(self, eta_s: float | None) -> str:
        kind = ("warm-up" if self.round <= self.warmup else "timed") + (f", {self.who}" if self.who else "")
        reqs = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        return (
            f"  .. {self.cell}: round {self.round}/{self.rounds} ({kind}), {reqs} requests done, "
            f"{elapsed_text(time.monotonic() - self.t0, eta_s)}"
        )


def elapsed_text(elapsed_s: float, eta_s: float | None) -> str:
    """A cell's elapsed time against the plan's time for it: "12 s of 30 s planned", "45 s of 30 s
    planned: over plan by 15 s", or "12 s (no plan ETA)"."""
    if not eta_s:
        return f"{elapsed_s:.0f} s (no plan ETA)"
    over = elapsed_s - eta_s
    late = f": over plan by {over:.0f} s" if over >= 0.5 else ""
    return f"{elapsed_s:.0f} s of {eta_s:.0f} s planned{late}"


PROGRESS = Progress()


class Ticker:
    """Prints PROGRESS.line every ``every`` seconds while a cell runs (a daemon thread)."""

    def __init__(self, write: Callable[[str], None], every: float = 5.0):
        self.write, self.every = write, every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.eta_s: float | None = None
        self.on_stop: Callable[[float], None] | None = None  # called with the cell's elapsed seconds

    def start(self, cell: str, rounds: int, warmup: int, eta_s: float | None) -> None:
        PROGRESS.cell, PROGRESS.rounds, PROGRESS.warmup = cell, rounds, warmup
        PROGRESS.round = PROGRESS.done = PROGRESS.total = 0
        PROGRESS.t0 = time.monotonic()
        self.eta_s = eta_s
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specbench-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.write(PROGRESS.line(self.eta_s))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
        if self.on_stop is not None:
            self.on_stop(time.monotonic() - PROGRESS.t0)
            self.on_stop = None
