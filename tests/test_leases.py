"""GPU leases (pytest_specbench/gpus/leases.py): one pool shared by processes, under a file lock."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_specbench.gpus.leases import LeaseError, LeasePool, overlaps, read_log


def _hammer(run_dir: str, marks: str, seed: int, rounds: int, out: str) -> None:
    """Take 1-3 GPUs, hold them a moment, give them back, ``rounds`` times. While holding, each
    GPU's marker file is created with O_EXCL: if another process holds the same GPU, that fails
    and the clash is written to ``out`` at once."""
    pool = LeasePool(run_dir)
    rng = random.Random(seed)
    for i in range(rounds):
        lease = pool.acquire(f"g{seed}-{i}", rng.randint(1, 3), worker=f"w{seed}", timeout_s=10, poll_s=0.001)
        made = []
        for g in lease.gpus:
            try:
                os.close(os.open(os.path.join(marks, f"gpu{g}"), os.O_CREAT | os.O_EXCL))
                made.append(g)
            except FileExistsError:
                with open(out, "a") as f:
                    f.write(f"GPU {g} already held when w{seed} took it (round {i})\n")
        time.sleep(rng.random() * 0.002)
        for g in made:
            os.unlink(os.path.join(marks, f"gpu{g}"))
        pool.release(lease)


def test_no_gpu_is_held_twice_under_contention(tmp_path: Path) -> None:
    """6 processes take and return 1-3 of 4 GPUs 40 times each, as fast as they can."""
    LeasePool.create(tmp_path / "run", (0, 1, 2, 3))
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "clashes"
    out.touch()
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_hammer, args=(str(tmp_path / "run"), str(marks), s, 40, str(out)))
        for s in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    clashes = out.read_text().splitlines()
    log = read_log(tmp_path / "run")
    assert clashes == []
    assert overlaps(log) == []
    assert [p.exitcode for p in procs] == [0] * 6  # each took and returned its 40 leases in time
    assert sum(e["event"] == "taken" for e in log) == 240
    assert LeasePool(tmp_path / "run").held() == {}


def test_a_start_waits_while_its_gpus_are_taken(tmp_path: Path) -> None:
    pool = LeasePool.create(tmp_path, (0, 1, 2, 3))
    a = pool.acquire("a-tp3", 3)
    assert a.gpus == (0, 1, 2)
    got: dict[str, object] = {}

    def wide() -> None:
        got["b"] = LeasePool(tmp_path).acquire("b-tp2", 2, poll_s=0.01)

    t = threading.Thread(target=wide)
    t.start()
    time.sleep(0.2)
    assert "b" not in got  # 1 GPU free, 2 needed: waiting
    c = pool.acquire("c-tp1", 1)  # first fit: a narrower start that fits does not wait behind it
    assert c.gpus == (3,)
    pool.release(a)
    t.join(5)
    b = got["b"]
    assert b.gpus == (0, 1)  # type: ignore[attr-defined]
    assert b.waited_s >= 0.2  # type: ignore[attr-defined]
    assert sorted(pool.held()) == [0, 1, 3]


def test_waiting_starts_are_served_by_the_schedules_order(tmp_path: Path) -> None:
    """Two starts wait for the same GPUs: the one ranked earlier by the scheduler's order gets
    them, whichever asked first."""
    pool = LeasePool.create(tmp_path, (0, 1))
    pool.set_order(["long-tp2", "short-tp2"])
    hold = pool.acquire("x", 2)
    taken: list[str] = []

    def start(group: str) -> None:
        lease = LeasePool(tmp_path).acquire(group, 2, poll_s=0.005)
        taken.append(group)
        time.sleep(0.05)
        LeasePool(tmp_path).release(lease)

    late = threading.Thread(target=start, args=("short-tp2",))
    early = threading.Thread(target=start, args=("long-tp2",))
    late.start()
    time.sleep(0.1)  # short-tp2 asked first
    early.start()
    time.sleep(0.1)
    pool.release(hold)
    late.join(5)
    early.join(5)
    assert taken == ["long-tp2", "short-tp2"]


def test_lease_of_a_dead_process_is_reclaimed(tmp_path: Path) -> None:
    LeasePool.create(tmp_path, (0, 1, 2, 3))
    code = (
        "import sys, time; from pytest_specbench.gpus.leases import LeasePool; "
        f"LeasePool({str(tmp_path)!r}).acquire('dies-tp4', 4); print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    pool = LeasePool(tmp_path)
    assert sorted(pool.held()) == [0, 1, 2, 3]
    with pytest.raises(LeaseError, match="no 1 GPUs free within 0.2 s"):
        pool.acquire("next-tp1", 1, timeout_s=0.2)
    assert pool.info()["waiting"] == []  # a start that gave up left the queue
    child.send_signal(signal.SIGKILL)
    child.wait()
    lease = pool.acquire("next-tp4", 4, timeout_s=5)
    assert lease.gpus == (0, 1, 2, 3)
    reclaimed = [e for e in read_log(tmp_path) if e["event"] == "reclaimed"]
    assert [(e["group"], e["gpus"]) for e in reclaimed] == [("dies-tp4", [0, 1, 2, 3])]
    assert reclaimed[0]["why"] == f"pid {child.pid} is gone"


def test_only_the_pool_is_leased(tmp_path: Path) -> None:
    """GPUs left out of the pool (busy at the start) are never lent; a start wider than the pool
    fails at once instead of waiting forever."""
    pool = LeasePool.create(tmp_path, (1, 2, 3), notes=["GPU 0 busy, 56 GB used by another process"])
    assert pool.acquire("a-tp3", 3).gpus == (1, 2, 3)
    with pytest.raises(LeaseError, match=r"b-tp4: needs 4 GPUs; the pool has 3 \(1, 2, 3\)"):
        pool.acquire("b-tp4", 4)
    assert pool.info()["notes"] == ["GPU 0 busy, 56 GB used by another process"]


def _start_in_thread(
    run_dir: Path, group: str, n: int, taken: list[str], hold_s: float = 0.05
) -> threading.Thread:
    def run() -> None:
        pool = LeasePool(run_dir)
        lease = pool.acquire(group, n, poll_s=0.005)
        taken.append(group)
        time.sleep(hold_s)
        pool.release(lease)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_returning_engine_queues_its_next_start_in_the_same_step(tmp_path: Path) -> None:
    """A worker's next group (ranked first) is queued as the worker returns its GPUs, so a start
    that was waiting longer but ranks later does not slip in while the worker sets up."""
    pool = LeasePool.create(tmp_path, (0, 1))
    pool.set_order(["first-tp2", "next-tp2", "later-tp2"])
    lease = pool.acquire("first-tp2", 2)
    taken: list[str] = []
    t = _start_in_thread(tmp_path, "later-tp2", 2, taken)
    time.sleep(0.1)
    pool.release(lease, then=("next-tp2", 2))
    time.sleep(0.1)  # the worker's teardown and set-up: later-tp2 polls meanwhile
    assert taken == []
    nxt = pool.acquire("next-tp2", 2)
    assert nxt.gpus == (0, 1)
    assert [w["group"] for w in pool.info()["waiting"]] == ["later-tp2"]
    pool.release(nxt)
    t.join(5)
    assert taken == ["later-tp2"]


def test_a_queued_start_that_never_asks_drops_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_specbench.gpus import leases

    monkeypatch.setattr(leases, "EXPECT_S", 0.3)
    pool = LeasePool.create(tmp_path, (0, 1))
    pool.set_order(["never-tp2", "later-tp2"], expected={"never-tp2": 2})  # handed out, never asks
    t0 = time.monotonic()
    # waited for the expected group, then went ahead (a start that waited forever would fail
    # with the 30 s limit's LeaseError)
    lease = LeasePool(tmp_path).acquire("later-tp2", 2, poll_s=0.01, timeout_s=30)
    assert time.monotonic() - t0 >= 0.25
    pool.release(lease, then=("never-tp2", 2))  # queued again by a release, and again never asks
    t0 = time.monotonic()
    LeasePool(tmp_path).acquire("later-tp2", 2, poll_s=0.01, timeout_s=30)
    assert time.monotonic() - t0 >= 0.25


def test_groups_handed_out_first_keep_their_place_before_they_ask(tmp_path: Path) -> None:
    """At the run's start every worker asks at once: the first to ask is not the first served."""
    pool = LeasePool.create(tmp_path, (0, 1, 2, 3))
    pool.set_order(["long-tp4", "short-tp1"], expected={"long-tp4": 4, "short-tp1": 1})
    taken: list[str] = []
    t = _start_in_thread(tmp_path, "short-tp1", 1, taken)
    time.sleep(0.1)
    assert taken == []  # long-tp4 is expected and takes all 4 first
    lease = pool.acquire("long-tp4", 4)
    pool.release(lease)
    t.join(5)
    assert taken == ["short-tp1"]
