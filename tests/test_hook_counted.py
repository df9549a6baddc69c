"""A failed after-hook is a failed test in pytest's own count: the last line of a CI log says
"1 failed, 2 passed", not "2 passed" above an exit status of 1 (plugin/group_hooks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_project import THROUGHPUT_BENCH, write_project
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
      after_group: '{AFTER_GROUP}'
{RUN_HOOKS}
workloads:
  throughput:
    concurrency: [1]
    output_tokens: [16]
    prompt_tokens: 8
    rounds: 2
    warmup: 1
"""


def _project(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str, run: str = ""
) -> None:
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path / "logs"))
    m = MATRIX.replace("{AFTER_GROUP}", after).replace("{RUN_HOOKS}", run)
    write_project(pytester, m, CONFTEST, THROUGHPUT_BENCH, "test_throughput.py")


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_failed_after_group_hook_is_one_failed_test_in_pytests_last_line(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    _project(pytester, tmp_path, monkeypatch, "echo the service did not come back; exit 3")
    args = ["benches", "--benchmark-json", "out.json", "-rf"] + (["-n", "2"] if xdist else [])
    res = pytester.runpytest_subprocess(*args) if xdist else pytester.runpytest(*args)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    last = res.stdout.lines[-1]
    assert "1 failed, 2 passed" in last, last
    res.assert_outcomes(passed=2, failed=1)
    # the short summary names the matrix, the hook and its group, and why it failed
    res.stdout.fnmatch_lines(
        ["FAILED benches/specbench.yaml::after_group[[]ngram-tp1[]] - after_group hook*"]
    )
    res.stdout.fnmatch_lines(["HOOKS FAILED: 1 *"])  # the screen still says it
    assert (pytester.path / "out.json").is_file()


def test_a_failed_after_run_hook_is_counted_too_and_a_clean_run_counts_no_hook(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, tmp_path, monkeypatch, "true", "hooks: {after_run: 'echo no unit >&2; exit 4'}")
    res = pytester.runpytest("benches", "-rf")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    assert "1 failed, 2 passed" in res.stdout.lines[-1], res.stdout.lines[-1]
    res.stdout.fnmatch_lines(["FAILED benches/specbench.yaml::after_run - after_run hook*"])
    # hooks that exit 0 are no tests: the count is the cells'
    _project(pytester, tmp_path, monkeypatch, "true", "hooks: {after_run: 'true'}")
    res = pytester.runpytest("benches")
    assert res.ret == pytest.ExitCode.OK
    res.assert_outcomes(passed=2)
