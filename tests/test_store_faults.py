"""The decision store (pytest_specbench/deciding/store.py) under faults: a torn
last line left by a process killed while appending, a lock held by a stopped or hung process,
and a store this process cannot reach."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.deciding.store import LOCK, LOG, TIMEOUT_ENV, Store, StoreLockTimeout, StoreUnreachable


def _ev(i: int) -> dict[str, Any]:
    return {"kind": "measured", "cell": f"c{i}", "tok_s": [100.0 + i, 101.0 + i]}


def _torn(i: int) -> bytes:
    line = json.dumps(_ev(i), separators=(",", ":")).encode()
    return line[: len(line) // 2]  # half a line, no newline: a writer killed mid-append


# ------------------------------------------------------------------ a torn last line


def test_a_torn_last_line_is_not_raised_not_consumed_and_repaired_by_the_next_append(tmp_path: Path) -> None:
    writer = Store.create(str(tmp_path))
    b, c = Store(writer.dir), Store(writer.dir)
    for i in (1, 2):
        writer.append(_ev(i))
    with open(writer.path, "ab") as f:
        f.write(_torn(3))
    # other processes' reads do not raise, and every whole line before the torn one is read
    assert b.read_new() == [_ev(1), _ev(2)]
    assert b.read_new() == []  # the torn line is neither raised nor consumed
    # the next append repairs the tail; every reader then goes on from the same byte
    writer.append(_ev(4))
    assert b.read_new() == [_ev(4)]
    assert c.read_new() == [_ev(1), _ev(2), _ev(4)]  # c never saw the torn line at all
    assert Store(writer.dir).read_new() == [_ev(1), _ev(2), _ev(4)]
    assert writer.path.read_bytes().count(b"\n") == 3  # the half line cut off, nothing around it


def test_a_writer_killed_while_appending_under_the_lock(tmp_path: Path) -> None:
    """A real kill: the child takes the exclusive lock, writes half a line and is SIGKILLed (its
    lock goes with it); the survivors converge on the same events."""
    store = Store.create(str(tmp_path))
    a, b = Store(store.dir), Store(store.dir)
    a.append(_ev(1))
    assert a.read_new() == b.read_new() == [_ev(1)]
    code = (
        "import os, signal, sys, fcntl\n"
        "from pytest_specbench.deciding.store import Store\n"
        "s = Store(sys.argv[1])\n"
        "with s._locked(fcntl.LOCK_EX):\n"
        "    fd = os.open(s.path, os.O_WRONLY | os.O_APPEND)\n"
        "    os.write(fd, bytes.fromhex(sys.argv[2]))\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(store.dir), _torn(2).hex()], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not store.path.read_bytes().endswith(b"\n")
    assert a.read_new() == [] and b.read_new() == []
    b.append(_ev(3))
    a.append(_ev(4))
    seen_a, seen_b = [_ev(1), *a.read_new()], [_ev(1), *b.read_new()]
    assert seen_a == seen_b == [_ev(1), _ev(3), _ev(4)]


def test_a_tail_missing_only_its_newline_is_kept_and_a_damaged_whole_line_skipped(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path))
    store.append(_ev(1))
    with open(store.path, "ab") as f:
        f.write(b"\x00\x00garbage\n")  # a whole line that does not parse (a damaged disk)
        f.write(json.dumps(_ev(2)).encode())  # whole but for its newline
    b = Store(store.dir)
    assert b.read_new() == [_ev(1)]  # the damaged line skipped, the unterminated one left
    store.append(_ev(3))
    assert b.read_new() == [_ev(2), _ev(3)]
    assert Store(store.dir).read_new() == [_ev(1), _ev(2), _ev(3)]


# ------------------------------------------------------------------ a lock held too long


def _holder(lock: Path, stop: bool) -> subprocess.Popen[str]:
    """A process that takes the store's lock and keeps it (sleeping, or SIGSTOPped)."""
    code = (
        "import fcntl, sys, time\n"
        "f = open(sys.argv[1], 'a+b')\n"
        "fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    if stop:
        os.kill(proc.pid, signal.SIGSTOP)
    return proc


@pytest.mark.parametrize("stop", [False, True], ids=["sleeping", "sigstopped"])
def test_a_lock_held_by_another_process_times_out_with_the_store_named(tmp_path: Path, stop: bool) -> None:
    store = Store.create(str(tmp_path))
    store.append(_ev(1))
    holder = _holder(store.dir / LOCK, stop)
    try:
        s = Store(store.dir, lock_timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(StoreLockTimeout) as append_err:
            s.append(_ev(2))
        with pytest.raises(StoreLockTimeout) as read_err:
            s.read_new()
        assert time.monotonic() - t0 < 30  # bounded, not forever
        for err in (append_err, read_err):
            msg = str(err.value)
            assert str(store.dir) in msg and "another process holds it" in msg, msg
    finally:
        if stop:
            os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait(timeout=30)
    # the holder gone, its lock goes with it: nothing was written or lost meanwhile
    s.append(_ev(3))
    assert Store(store.dir).read_new() == [_ev(1), _ev(3)]


def test_the_lock_timeout_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.create(str(tmp_path))
    monkeypatch.setenv(TIMEOUT_ENV, "0.2")
    s = Store(store.dir)
    assert s.lock_timeout == 0.2
    monkeypatch.delenv(TIMEOUT_ENV)
    assert Store(store.dir).lock_timeout == 60.0
    holder = _holder(store.dir / LOCK, stop=False)
    try:
        with pytest.raises(StoreLockTimeout, match="within 0.2 s"):
            s.read_new()
    finally:
        holder.kill()
        holder.wait(timeout=30)


# ------------------------------------------------------------------ a store out of reach


def test_a_store_on_an_unreachable_path_is_refused_with_the_reason(tmp_path: Path) -> None:
    gone = tmp_path / "on-another-host"
    with pytest.raises(StoreUnreachable) as err:
        Store(gone)
    assert str(gone) in str(err.value) and "no such directory" in str(err.value)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(StoreUnreachable, match="not a directory"):
        Store(tmp_path / "a-file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreUnreachable, match=f"cannot open {LOG}"):
        Store(tmp_path / "empty")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_store_this_process_cannot_write_is_refused(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path))
    store.path.chmod(0o444)
    with pytest.raises(StoreUnreachable, match="Permission denied"):
        Store(store.dir)


def test_a_worker_that_cannot_reach_the_controllers_store_is_a_usage_error(tmp_path: Path) -> None:
    from pytest_specbench.plugin import race
    from pytest_specbench.plugin.xdist_sched import RACE_STORE_KEY

    class Config:
        workerinput = {RACE_STORE_KEY: str(tmp_path / "on-another-host")}

        def getoption(self, name: str, default: Any = None) -> Any:
            return True if name == "specbench_race" else default

    class St:
        matrix = object()

    with pytest.raises(pytest.UsageError, match="on-another-host: no such directory"):
        race.setup(Config(), St())  # type: ignore[arg-type]
