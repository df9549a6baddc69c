"""Group and run hooks: shell commands around engine groups and the run (plugin/group_hooks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import THROUGHPUT_BENCH, count_starts, write_project
from fake_engine import CONFTEST

MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: fake, model: m}
  ngram:
    backend: fake
    model: m
    speculative: {algorithm: ngram, num_draft_tokens: 3}
    hooks:
      before_group: 'echo "up $SPECBENCH_GROUP" >> {SEEN}'
      after_group: 'echo "down $SPECBENCH_GROUP ok=$SPECBENCH_GROUP_OK" >> {SEEN}'
tp: [1, 2]
include:
  # the seed's GPU 0 service: stopped for the TP2 groups, restarted after each
  - tp: 2
    hooks:
      before_group: >-
        echo "stop $SPECBENCH_GROUP tp=$SPECBENCH_TP gpus=$SPECBENCH_GPUS";
        echo "stop $SPECBENCH_GROUP" >> {SEEN}; {FAIL}
      after_group: 'echo "start $SPECBENCH_GROUP ok=$SPECBENCH_GROUP_OK" >> {SEEN}'
hooks: {before_run: 'echo run-up >> {SEEN}', after_run: 'echo run-down >> {SEEN}'}
workloads:
  throughput:
    concurrency: [1, 4]
    output_tokens: [16]
    prompt_tokens: 8
    rounds: 2
    warmup: 1
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    write_project(pytester, None, CONFTEST, THROUGHPUT_BENCH, "test_throughput.py")  # the matrix: write()
    count_starts(monkeypatch, tmp_path / "starts.txt")
    return pytester


def write(project: pytest.Pytester, seen: Path, fail: str) -> None:
    m = MATRIX.replace("{SEEN}", str(seen)).replace("{FAIL}", fail)
    (project.path / "benches" / "specbench.yaml").write_text(m)


def test_a_failing_before_group_hook_fails_only_its_group(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen.txt"
    # the TP2 hook fails for ngram only: ar-tp2 runs, ngram-tp2's cells fail with the hook's words
    write(project, seen, 'test "$SPECBENCH_METHOD" != ngram || { echo "unit is masked" >&2; exit 3; }')
    out = tmp_path / "o.json"
    logs = tmp_path / "logs"
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(logs))
    res = project.runpytest("benches", "--benchmark-json", str(out))
    res.assert_outcomes(passed=6, errors=2)
    doc = json.loads(out.read_text())
    failed = doc["specbench"]["failed_cells"]
    assert {f["cell"] for f in failed} == {"ngram-tp2-c1-out16", "ngram-tp2-c4-out16"}
    assert "GroupHookError: ngram-tp2: before_group hook `echo" in failed[0]["error"]
    assert "failed (exit status 3): stop ngram-tp2 tp=2 gpus= | unit is masked; log: " in failed[0]["error"]
    assert len(doc["benchmarks"]) == 6
    assert {b["params"]["method"] + f"-tp{b['params']['tp']}" for b in doc["benchmarks"]} == {
        "ar-tp1",
        "ngram-tp1",
        "ar-tp2",
    }
    # in order: the run's hooks around everything; each after-hook also after a failed start;
    # ngram-tp2's include hooks replace the method's own (later over earlier)
    assert seen.read_text().splitlines() == [
        "run-up",
        "stop ar-tp2",
        "start ar-tp2 ok=1",
        "up ngram-tp1",
        "down ngram-tp1 ok=1",
        "stop ngram-tp2",
        "start ngram-tp2 ok=0",
        "run-down",
    ]
    # the hook's output is in the group's log, with the command and its exit status
    log = (logs / "engine-ngram-tp2.log").read_text()
    assert (
        "== specbench before_group hook (hook before_group, group ngram-tp2, method ngram, tp 2, gpus )"
        in log
    )
    assert "stop ngram-tp2 tp=2 gpus=\nunit is masked\n== specbench before_group hook exited 3 after" in log
    assert "== specbench after_group hook exited 0" in log
    assert "run-up" not in log and "echo run-up" in (logs / "run-hooks.log").read_text()
    events = {e["group"]: e for e in doc["specbench"]["engine_groups"]}
    assert events["ngram-tp2"]["ok"] is False
    assert events["ngram-tp2"]["before_group"]["ok"] is False
    assert events["ngram-tp2"]["after_group"] == {"ok": True}
    stops = {e["group"]: e for e in doc["specbench"]["engine_stops"]}
    assert stops["ar-tp2"]["after_group"] == {"ok": True} and "after_group" not in stops["ar-tp1"]


def test_a_failing_before_run_hook_stops_the_run(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path / "logs"))
    seen = tmp_path / "seen.txt"
    write(project, seen, "true")
    m = (project.path / "benches" / "specbench.yaml").read_text()
    (project.path / "benches" / "specbench.yaml").write_text(
        m.replace("before_run: 'echo run-up >> ", "before_run: 'echo no unit >&2; exit 4; echo ")
    )
    res = project.runpytest("benches")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(
        ["*before_run hook `echo no unit >&2; exit 4; *` failed (exit status 4): no unit; *"]
    )
    res.stdout.fnmatch_lines(["*the run stopped before any engine started*"])
    assert seen.read_text().splitlines() == ["run-down"]  # after_run still ran; no group started
    assert not (tmp_path / "starts.txt").exists()
    # a plan or a collection runs no hook
    seen.unlink()
    project.runpytest("benches", "--specbench-plan")
    project.runpytest("benches", "--collect-only")
    assert not seen.exists()


def test_a_failing_after_group_hook_fails_the_run_and_says_what_may_be_left_stopped(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's GPU 0 service is restarted by an after_group hook: when that fails, the cells
    stay measured but the run is not green, and the summary and JSON name the hook and its output."""
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path / "logs"))
    seen = tmp_path / "seen.txt"
    write(project, seen, "true")
    m = (project.path / "benches" / "specbench.yaml").read_text()
    (project.path / "benches" / "specbench.yaml").write_text(
        m.replace(
            'after_group: \'echo "start $SPECBENCH_GROUP ok=$SPECBENCH_GROUP_OK" >> ',
            "after_group: 'echo restarting the service failed; exit 3; echo ",
        )
    )
    res = project.runpytest("benches", "--benchmark-json", "out.json")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(
        [
            "HOOKS FAILED: 2 (the run failed; what they were to restore may be left stopped):",
            "  ar-tp2: after_group hook `echo restarting the service failed; exit 3; *",
        ]
    )
    said = " ".join(ln.strip() for ln in res.stdout.lines)
    assert "failed (exit status 3): restarting the service failed; log: " in said
    assert "may be left stopped: whatever its before_group hook stopped (that hook ran)" in said
    # the report of the JSON says the same
    from pytest_specbench.report import screen

    assert screen.hook_view(json.loads((project.path / "out.json").read_text()))[0].startswith(
        "HOOKS FAILED: 2"
    )
    doc = json.loads((project.path / "out.json").read_text())
    failures = doc["specbench"]["hook_failures"]
    assert sorted(f["group"] for f in failures) == ["ar-tp2", "ngram-tp2"]
    assert all(f["hook"] == "after_group" and "exit status 3" in f["error"] for f in failures)
    assert len(doc["benchmarks"]) == 8  # every cell measured is kept


def test_an_interrupt_stops_a_running_before_group_hook_before_its_after_group_runs(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path / "logs"))
    seen = tmp_path / "seen.txt"
    pid_file = tmp_path / "before.pid"
    write(project, seen, f"echo $$ > {pid_file}; sleep 60; echo before-end >> {seen}")
    m = (project.path / "benches" / "specbench.yaml").read_text()
    (project.path / "benches" / "specbench.yaml").write_text(m.replace("tp: [1, 2]", "tp: [2]"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "benches", "-p", "no:cacheprovider", "--benchmark-json", "out.json"],
        cwd=project.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):  # until the before_group hook is sleeping
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    hook_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    lines = seen.read_text().splitlines()
    assert "before-end" not in lines  # the before-hook never finished after the run stopped
    assert lines.index("stop ar-tp2") < lines.index("start ar-tp2 ok=0"), lines  # the after-hook ran
    try:
        os.kill(hook_pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the before_group hook's shell outlived the run"
    doc = json.loads((project.path / "out.json").read_text())
    (ev,) = [e for e in doc["specbench"]["engine_groups"] if e.get("before_group")]
    assert "interrupted: its processes were stopped before after_group" in ev["before_group"]["error"], out
