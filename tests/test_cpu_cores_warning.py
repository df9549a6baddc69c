"""Under -n K, a session that runs cells of a CPU backend is warned once that its K engines share
the cores (plugin/xdist_sched.py, warn_cpu_engines_share_cores); a session beside a CPU matrix
that collected none of its cells (a project's own tests) is not."""

from __future__ import annotations

import pytest
from bench_project import THROUGHPUT_BENCH, fake_conftest, write_project

CONFTEST = fake_conftest("FakeEngine", 'register_backend("fake", FakeEngine, gpu=False)')
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
  twin: {backend: fake, model: m}
workloads:
  throughput: {concurrency: [1], output_tokens: [4], prompt_tokens: 8, rounds: 1, warmup: 0}
"""
WARNING = "-n 2 runs 2 CPU engines at once on "


def test_cpu_cells_under_xdist_are_warned_once_and_a_session_without_cells_is_not(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester, MATRIX, CONFTEST, bench=THROUGHPUT_BENCH)
    (pytester.path / "test_own.py").write_text("def test_own():\n    assert True\n")
    cells = pytester.runpytest("benches", "-p", "no:cacheprovider", "-n", "2")
    cells.assert_outcomes(passed=2)
    assert cells.stdout.str().count(WARNING) == 1, cells.stdout.str()
    own = pytester.runpytest("test_own.py", "-p", "no:cacheprovider", "-n", "2")
    own.assert_outcomes(passed=1)
    assert WARNING not in own.stdout.str() and "PytestConfigWarning" not in own.stdout.str()
    # --specbench-plan under -n: the controller collects the cells itself and says it there too
    plan = pytester.runpytest("benches", "-p", "no:cacheprovider", "-n", "2", "--specbench-plan")
    assert plan.ret == 0 and plan.stdout.str().count(WARNING) == 1, plan.stdout.str()
