"""The disturbance meter: the machine's busy CPU time over the window (/proc/stat) minus the run's
own, so that processes which start and end inside the window are counted like any other; the
arithmetic on hand-made /proc/stat readings; the threshold a cell is judged by."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_specbench.plugin import disturbance
from pytest_specbench.plugin.disturbance import DisturbanceMeter, MachineCpu, Snapshot

# cpuN user nice system idle iowait irq softirq steal guest guest_nice (ticks of 10 ms)
STAT_BEFORE = """cpu  9000 30 3000 90000 100 20 20 60 0 0
cpu0 1000 10 500 9000 20 5 5 30 400 0
cpu1 2000 20 700 8000 40 5 5 30 0 0
cpu2 6000 0 1800 73000 40 10 10 0 0 0
intr 311304 0 0
ctxt 489384
"""
# over 10 s: cpu0 +300 user (+200 of it guest), +100 system, +10 irq, +10 softirq, +20 steal,
# +580 idle; cpu1 +500 user, +80 system, +420 idle; cpu2 (not ours) +1000 user
STAT_AFTER = """cpu  10800 30 3180 91000 100 30 30 80 200 0
cpu0 1300 10 600 9580 20 15 15 50 600 0
cpu1 2500 20 780 8420 40 5 5 30 0 0
cpu2 7000 0 1800 73000 40 10 10 0 0 0
intr 411304 0 0
"""


def test_the_share_is_the_machines_busy_time_minus_the_runs_own_from_proc_stat() -> None:
    a = disturbance.parse_proc_stat(STAT_BEFORE, cpus={0, 1}, hz=100)
    b = disturbance.parse_proc_stat(STAT_AFTER, cpus={0, 1}, hz=100)
    assert a == MachineCpu(
        busy_s=(1000 + 10 + 500 + 5 + 5 + 2000 + 20 + 700 + 5 + 5) / 100,
        steal_s=0.6,
        cores=2,
        source="/proc/stat",
    )
    assert b.busy_s - a.busy_s == pytest.approx(4.2 + 5.8)  # guest time is inside user, not added again
    assert b.steal_s - a.steal_s == pytest.approx(0.2)
    # the run itself took 6.0 s of CPU over the 10 s: others took 4.0 s, and the hypervisor 0.2 s
    o = disturbance.others(Snapshot(100.0, a, 50.0), Snapshot(110.0, b, 56.0))
    assert o.cpu_s == pytest.approx(4.2) and o.steal_s == pytest.approx(0.2)
    assert o.share == pytest.approx(4.2 / 20) and o.cores == 2 and o.wall_s == pytest.approx(10.0)
    # the run's own time beyond the machine's (the two counters tick apart): none taken, not < 0
    calm = disturbance.others(Snapshot(100.0, a, 50.0), Snapshot(110.0, a, 50.5))
    assert calm.cpu_s == 0.0 and calm.share == 0.0
    # more than all the cores' time (the counters tick in 10 ms steps, read after the wall
    # clock; 1.0456 seen on a saturated machine): a share of the machine is at most all of it
    full = disturbance.others(Snapshot(100.0, a, 50.0), Snapshot(110.0, b, 50.0))  # 10.2 s of 20
    assert full.share == pytest.approx(10.2 / 20)
    over = disturbance.others(Snapshot(100.0, a, 50.0), Snapshot(100.45, b, 50.0))  # 10.2 s of 0.9
    assert over.share == 1.0 and over.cpu_s == pytest.approx(10.2)
    # all cores when no set is given; a set naming no listed core is an error, not 0 %
    assert disturbance.parse_proc_stat(STAT_BEFORE).cores == 3
    with pytest.raises(ValueError, match="no per-core lines"):
        disturbance.parse_proc_stat(STAT_BEFORE, cpus={7})


def _scripted_meter(monkeypatch: pytest.MonkeyPatch, other_cpu_s: float) -> dict:
    """A DisturbanceMeter (its default threshold) over a 10 s window of 2 cores in which other
    processes took ``other_cpu_s`` and the run 5 s."""
    readings = iter(
        [
            Snapshot(0.0, MachineCpu(100.0, 0.0, 2, "/proc/stat"), 40.0),
            Snapshot(10.0, MachineCpu(100.0 + 5.0 + other_cpu_s, 0.0, 2, "/proc/stat"), 45.0),
        ]
    )
    monkeypatch.setattr(disturbance, "snapshot", lambda: next(readings))
    meter = DisturbanceMeter()
    meter.start()
    return meter.stop()


def test_a_cell_is_disturbed_above_a_tenth_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _scripted_meter(monkeypatch, 3.0)  # 15 % of 2 cores × 10 s
    assert out["other_cpu_share"] == pytest.approx(0.15) and out["other_cpu_s"] == pytest.approx(3.0)
    assert out["disturbed"].startswith(
        "other processes took 15% of the 2 cores over the timed rounds (more than 10%): "
    )
    assert "disturbed" not in _scripted_meter(monkeypatch, 1.8)  # 9 %


def test_short_lived_processes_outside_the_run_are_counted(tmp_path: Path) -> None:
    """A spawner outside this process tree (its launcher forks it off and exits, in a session of
    its own), started before the window, waits for the window to open, then runs short CPU-bound
    children one after another, each starting and ending inside the window, and reaps them: no
    process that the meter could read at either end of the window ran that CPU time."""
    go, done = tmp_path / "go", tmp_path / "done"
    burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.15: pass"
    spawner = f"""
import os, subprocess, sys, time
if os.fork():
    os._exit(0)
while not os.path.exists({str(go)!r}):
    time.sleep(0.01)
for _ in range(8):
    subprocess.run([sys.executable, "-c", "{burn}"], check=True)
t = os.times()
with open({str(done)!r} + ".tmp", "w") as f:
    f.write(str(t.children_user + t.children_system))
os.rename({str(done)!r} + ".tmp", {str(done)!r})
"""
    subprocess.run([sys.executable, "-c", spawner], check=True, start_new_session=True)
    meter = DisturbanceMeter()
    meter.start()
    go.touch()
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    out = meter.stop()
    burned = float(done.read_text())
    assert burned >= 8 * 0.15, burned
    # all of it counted (other processes on a busy machine only add to both figures), and none
    # of it explained by a process seen at the window's ends
    assert out["other_cpu_s"] >= 0.7 * burned, (burned, out)
    assert out["other_cpu_short_lived_s"] >= 0.7 * burned, (burned, out)
    assert out["disturbed"].startswith("other processes took "), out
    assert out["other_cpu_source"] == f"/proc/stat over {len(os.sched_getaffinity(0))} cores"


def test_the_runs_own_children_are_not_others() -> None:
    """The run's own CPU counts a child that started and ended inside the window (reaped: its
    time is in os.times' children times) and a live one."""
    before = disturbance.own_cpu_s()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    live = subprocess.Popen([sys.executable, "-c", burn + "\ntime.sleep(60)"])
    try:
        while (disturbance._cpu(psutil.Process(live.pid)) or 0.0) < 0.3:
            time.sleep(0.05)
        assert disturbance.own_cpu_s() - before >= 0.6
    finally:
        live.kill()
        live.wait()
