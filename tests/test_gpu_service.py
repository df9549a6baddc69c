"""A live service's GPU is never leased unsaid: a GPU other processes hold memory on is refused
before the run (naming the GPU, the memory and the processes), unless the matrix's hooks stop its
service or --specbench-allow-busy-gpus names it, and then it is flagged on the screen and in the
JSON; the plan says the same. With hooks on ``gpus: [0]`` the service is stopped once, before the
first engine start that needs GPU 0, and started once, after the last, in one process and under
-n, on 8 fake GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import THROUGHPUT_BENCH, write_project

from pytest_specbench.gpus.service_window import ServiceWindows

HERE = Path(__file__).parent

CONFTEST = f"""
import os, sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench.gpus import inventory as gpus
from pytest_specbench.engines import register_backend


class FakeLoggedGPUEngine(FakeEngine):
    \"\"\"Appends "start GROUP WORKER DEVICES" and "stop GROUP" to $FAKE_LOG, the file the hooks
    append to as well: one order of events across the run's processes.\"\"\"

    def __init__(self, group):
        super().__init__(group)
        self._log(f"start {{group.id}} {{os.environ.get('PYTEST_XDIST_WORKER', 'main')}} "
                  f"{{os.environ.get('CUDA_VISIBLE_DEVICES', '-')}}")

    def _log(self, line):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(line + "\\n")

    def close(self):
        super().close()
        self._log(f"stop {{self.group.id}}")


register_backend("fakegpu", FakeLoggedGPUEngine, gpu=True, sentinel=True)


def _inventory():  # 8 H200s; GPU 0 runs someone's service when FAKE_GPU0_BUSY is set
    busy = bool(os.environ.get("FAKE_GPU0_BUSY"))
    return [
        gpus.GPU(i, "NVIDIA H200", 143771, 53410 if busy and i == 0 else 618, int(busy and i == 0))
        for i in range(8)
    ]


gpus.inventory = _inventory
gpus.gpu_processes = lambda idx: {{i: [(4242, 52000)] if i == 0 and os.environ.get("FAKE_GPU0_BUSY") else []
                                  for i in idx}}
gpus.process_name = lambda pid: "ddtree-svc" if pid == 4242 else None
gpus.driver_info = lambda: {{"driver": "fake", "cuda_driver": "fake"}}
"""

HOOKS = """
include:
  - hooks:
      gpus: [0]
      before_group: echo "hook-stop $SPECBENCH_GROUP $SPECBENCH_GPUS" >> "$FAKE_LOG"
      after_group: echo "hook-start $SPECBENCH_GROUP $SPECBENCH_GPUS" >> "$FAKE_LOG"
"""


def _matrix(methods: tuple[str, ...] = ("ar", "fast"), hooks: bool = True) -> str:
    ms = "\n".join(f"  {m}: {{backend: fakegpu, model: m}}" for m in methods)
    return (
        "models: {m: /nonexistent/model}\nmethods:\n"
        + ms
        + "\ntp: [1, 8]\nworkloads:\n  throughput: {concurrency: [1], output_tokens: [8, 16], "
        "prompt_tokens: 8, waves: 1, rounds: 1, warmup: 0}\n" + (HOOKS if hooks else "")
    )


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    write_project(pytester, _matrix(), CONFTEST, THROUGHPUT_BENCH, "test_b.py")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "events.txt"))
    monkeypatch.setenv("FAKE_GPU0_BUSY", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return pytester


def _events(tmp_path: Path) -> list[list[str]]:
    p = tmp_path / "events.txt"
    return [ln.split() for ln in p.read_text().splitlines()] if p.exists() else []


# ------------------------------------------------------------------------------ a busy GPU

HELD = "GPU 0: 53410 of 143771 MiB in use, by pid 4242 (ddtree-svc, 52000 MiB)"


def test_a_busy_gpu_of_an_explicit_pool_is_refused_naming_it(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hooks on GPU 0, no option: the run stops before any engine starts, and says which GPU,
    how much memory is in use, by which process, and the three ways on; the user's
    CUDA_VISIBLE_DEVICES names the pool the same way."""
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(hooks=False))
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "0,1,2,3")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert (
        f"--specbench-gpus 0,1,2,3 includes busy GPU 0 ({HELD}): a run leases no GPU other processes "
        "hold memory on. Leave it out (--specbench-gpus 1,2,3), stop the service for the starts that "
        "need the GPU with hooks (hooks: {gpus: [0], before_group: ..., after_group: ...}, "
        'docs/matrix.md "Hooks"), or lease it beside them: --specbench-allow-busy-gpus 0'
    ) in err, err
    assert _events(tmp_path) == []  # no engine started
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    res = project.runpytest_subprocess("benches")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert f"CUDA_VISIBLE_DEVICES=0,1 includes busy GPU 0 ({HELD})" in res.stderr.str()
    # a free GPU of the pool is not refused: GPU 0 idle
    monkeypatch.delenv("FAKE_GPU0_BUSY")
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "0,1", "-k", "tp1")
    res.assert_outcomes(passed=5)  # 4 cells and the family's sentinel


def test_a_busy_gpu_allowed_by_the_option_is_leased_and_flagged(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(hooks=False))
    res = project.runpytest_subprocess(
        "benches", "--specbench-gpus", "0,1", "--specbench-allow-busy-gpus", "0", "-k", "tp1",
        "--benchmark-json", "out.json",
    )  # fmt: skip
    res.assert_outcomes(passed=5)
    flag = (
        f"busy GPU 0 leased beside other processes (--specbench-allow-busy-gpus; {HELD}): its cells "
        "share the GPU's memory and compute with them"
    )
    out = res.stdout.str()
    assert f"specbench: {flag}" in out  # the header, before any cell
    assert out.count(flag) == 2, out  # and the summary
    assert {e[3] for e in _events(tmp_path) if e[0] == "start"} == {"0"}  # TP1 starts lease GPU 0
    doc = json.loads((project.path / "out.json").read_text())["specbench"]
    assert doc["gpus_busy"] == [
        {
            "gpu": 0,
            "used_mib": 53410,
            "total_mib": 143771,
            "processes": [{"pid": 4242, "name": "ddtree-svc", "used_mib": 52000}],
            "leased": "allowed",
        }
    ]
    assert doc["gpus_used"] == [0, 1]


def test_a_busy_gpu_the_hooks_name_joins_the_pool_flagged(project: pytest.Pytester) -> None:
    """Without --specbench-gpus a busy GPU is left out, unless the matrix's hooks stop its
    service: then it joins the pool (the TP8 cells run) and is flagged as the hooks' service."""
    res = project.runpytest_subprocess("benches", "--benchmark-json", "out.json", "-rs")
    res.assert_outcomes(passed=10)  # 8 cells and the two families' sentinels
    flag = f"busy GPU 0 leased for its hooks' service ({HELD}): its before_group stops it once"
    assert res.stdout.str().count(flag) == 2
    doc = json.loads((project.path / "out.json").read_text())["specbench"]
    assert doc["gpus_used"] == list(range(8))
    assert [(b["gpu"], b["leased"]) for b in doc["gpus_busy"]] == [(0, "hooks")]
    # the same matrix without hooks: GPU 0 left out, the TP8 cells skipped with the reason
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(hooks=False))
    res = project.runpytest_subprocess("benches", "-rs")
    res.assert_outcomes(passed=5, skipped=4)
    assert "needs 8 GPUs; 7 free: GPU 0 busy, 56 GB used by another process" in res.stdout.str()


def test_the_plan_says_which_busy_gpus_its_schedule_uses(project: pytest.Pytester) -> None:
    """--specbench-plan refuses nothing: it says the busy GPU its schedule puts starts on, and
    that a run refuses it; with hooks, that its service is stopped for the window."""
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(hooks=False))
    args = ("benches", "--specbench-plan", "--specbench-gpus", "0,1,2,3,4,5,6,7", "-n", "2")
    res = project.runpytest_subprocess(*args, "--specbench-plan-json", "p.json")
    assert res.ret == 0, res.stderr.str()
    assert (
        f"GPU 0 is busy now ({HELD}): 6 engine start(s) of the schedule lease it; a run refuses it: "
        "leave it out of --specbench-gpus, stop its service with hooks (hooks: {gpus: [0], ...}) or "
        "lease it beside them with --specbench-allow-busy-gpus 0"
    ) in res.stdout.str()
    plan = json.loads((project.path / "p.json").read_text())
    assert [(b["gpu"], b["leased"]) for b in plan["gpus_busy"]] == [(0, "refused")]
    (project.path / "benches" / "specbench.yaml").write_text(_matrix())
    res = project.runpytest_subprocess(*args)
    out = res.stdout.str()
    assert (
        f"GPU 0 is busy now ({HELD}): 3 engine start(s) of the schedule lease it; its hooks' service: "
        "stopped once for the window of the starts that lease it"
    ) in out
    res.stdout.re_match_lines(
        [
            r"  GPU 0 \(its hooks' service\): 3 engine start\(s\) lease it, back to back in one window, "
            r"3:00 -> 6:00: the service is down 3\.0 min of the run's 6\.0, stopped once before the first "
            r"start and started once after the last"
        ]
    )


# ------------------------------------------------------------------------------ the hook window


def _one_window(events: list[list[str]]) -> None:
    """One hook-stop and one hook-start; every engine start on GPU 0 (the TP8 groups, a family's
    sentinel restart too) between them, and no other."""
    kinds = [e[0] for e in events]
    assert kinds.count("hook-stop") == 1 and kinds.count("hook-start") == 1, events
    stop, start = kinds.index("hook-stop"), kinds.index("hook-start")
    on0 = [i for i, e in enumerate(events) if e[0] == "start" and "0" in e[3].split(",")]
    assert on0 and all(stop < i < start for i in on0), events
    tp8 = [i for i, e in enumerate(events) if e[0] == "stop" and e[1].endswith("-tp8")]
    assert all(stop < i < start for i in tp8), events
    assert events[stop][2] == events[start][2] == "0,1,2,3,4,5,6,7"  # told the GPUs leased


def test_the_service_is_stopped_once_for_the_window_in_one_process(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    """ar-tp8, fast-tp8 and ar-tp8's sentinel restart lease GPU 0, one after another: the
    before-hook runs before the first, the after-hook after the last, once each."""
    res = project.runpytest_subprocess("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=10)
    events = _events(tmp_path)
    _one_window(events)
    tp8 = [e[1] for e in events if e[0] == "start" and e[1].endswith("-tp8")]
    assert tp8 == ["ar-tp8", "fast-tp8", "ar-tp8"]
    doc = json.loads((project.path / "out.json").read_text())["specbench"]
    (w,) = doc["hook_windows"]
    assert (w["gpus"], w["starts"], w["stopped_by"], w["started_by"]) == ([0], tp8, "ar-tp8", "ar-tp8")
    assert (w["before_group_runs"], w["after_group_runs"], w["open"]) == (1, 1, False)
    (fast,) = [e for e in doc["engine_groups"] if e["group"] == "fast-tp8"]
    assert fast["before_group"] == {
        "ok": True,
        "ran": False,
        "window": "open: an earlier start's before_group ran",
    }
    assert doc["hook_failures"] == []
    # the plan of the same run says the window the run kept: its starts on GPU 0, in that order,
    # one stop and one start
    plan = project.runpytest_subprocess("benches", "--specbench-plan", "--specbench-plan-json", "p.json")
    slots = json.loads((project.path / "p.json").read_text())["schedule"]["slots"]
    assert [x["group"].split(" ")[0] for x in slots if 0 in x["gpus"]] == w["starts"]
    plan.stdout.fnmatch_lines(
        [
            "  GPU 0 (its hooks' service): 3 engine start(s) lease it, back to back in one window, *: "
            "the service is down * min of the run's *, stopped once before the first start and "
            "started once after the last"
        ]
    )


def test_a_window_its_cells_leave_open_is_closed_at_the_runs_end(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    """broken-tp8's engine does not start after ar-tp8 opened the window: its cells fail and no
    engine of the window stops after them, so the run's end starts the service, once, with the
    hook of the group that stopped it."""
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(("ar", "broken")))
    res = project.runpytest_subprocess("benches", "--specbench-no-sentinel", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=4, errors=4)
    events = _events(tmp_path)
    hooks = [e for e in events if e[0].startswith("hook-")]
    assert hooks == [["hook-stop", "ar-tp8", "0,1,2,3,4,5,6,7"], ["hook-start", "ar-tp8", "0"]], events
    assert events[-1] == ["hook-start", "ar-tp8", "0"]  # after every engine of the run
    doc = json.loads((project.path / "out.json").read_text())["specbench"]
    (w,) = doc["hook_windows"]
    assert (w["starts"], w["started_by"], w["before_group_runs"], w["after_group_runs"]) == (
        ["ar-tp8", "broken-tp8"],
        None,
        1,
        1,
    )
    assert doc["hook_failures"] == []


def test_the_service_is_stopped_once_for_the_window_under_xdist(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    """Three TP8 groups, each its own scope (no sentinels), handed to three workers that lease
    GPU 0 in turn: still one stop before the first and one start after the last."""
    (project.path / "benches" / "specbench.yaml").write_text(_matrix(("ar", "fast", "wide")))
    res = project.runpytest_subprocess(
        "benches", "-n", "3", "--specbench-no-sentinel", "--benchmark-json", "out.json"
    )
    res.assert_outcomes(passed=12)
    events = _events(tmp_path)
    _one_window(events)
    tp8 = [e for e in events if e[0] == "start" and e[1].endswith("-tp8")]
    assert sorted(e[1] for e in tp8) == ["ar-tp8", "fast-tp8", "wide-tp8"]
    print("workers of the TP8 starts:", [e[2] for e in tp8])
    (w,) = json.loads((project.path / "out.json").read_text())["specbench"]["hook_windows"]
    assert (w["before_group_runs"], w["after_group_runs"]) == (1, 1)


# ------------------------------------------------------------------------------ the window's state


def test_the_window_opens_for_the_first_start_and_closes_after_the_last_cell(tmp_path: Path) -> None:
    w = ServiceWindows(tmp_path)
    w.expect({"a1": "k", "a2": "k", "b1": "k"})
    assert w.enter("k", "t1", "a") is True  # closed: this start runs the before-hook
    w.opened("k", True)
    w.done("a1")
    w.done("a2")
    assert w.leave("k", "t1", "a") == (False, 1)  # b1 still to run: the service stays stopped
    assert w.enter("k", "t2", "b") is False  # open: no before-hook
    w.done("b1")
    assert w.leave("k", "t2", "b") == (True, 0)  # the last out with nothing left: after-hook
    assert w.close_open() == []
    info = w.info()["k"]
    assert (info["before_runs"], info["after_runs"], info["starts"]) == (1, 1, ["a", "b"])


def test_a_failed_before_hook_leaves_the_window_closed(tmp_path: Path) -> None:
    """Its after-hook runs as for any failed start (it restores what the before-hook did), and
    the next start tries the before-hook again; a window still open at the run's end is closed."""
    w = ServiceWindows(tmp_path)
    w.expect({"a1": "k", "b1": "k"})
    assert w.enter("k", "t1", "a") is True
    w.opened("k", False)
    assert w.leave("k", "t1", "a") == (True, 2)
    assert w.enter("k", "t2", "b") is True
    w.opened("k", True)
    assert w.leave("k", "t2", "b") == (False, 2)  # its cells never ran (interrupted)
    assert w.close_open() == [("k", "b")]
    assert w.info()["k"]["after_runs"] == 2
