"""The extension points: a speculative algorithm is one declaration
(matrix/algorithms.py ``register``), a workload kind one declaration and one runner
(matrix/workload_kinds.py ``register_kind``, workloads/kinds.py ``register_runner``). A fork's
algorithm that drafts like NGRAM on the embedded hf backend and a kind that runs like throughput
are each registered in one place (the inner project's conftest.py) and run end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_project import write_project

from pytest_specbench.matrix import algorithms, workload_kinds
from pytest_specbench.workloads import kinds

# the one place each is declared: what a user's conftest.py (or plugin) holds
CONFTEST = """
import dataclasses

from pytest_specbench.matrix.algorithms import ALGORITHMS, register
from pytest_specbench.matrix.workload_kinds import WorkloadKind, register_kind
from pytest_specbench.workloads.kinds import register_runner, throughput

# a fork's algorithm: NGRAM's declaration under its own name (the hf engine drafts n-grams for it)
register(dataclasses.replace(ALGORITHMS["ngram"], name="fake-ngram", aliases=()))
# a kind of exact prompts in waves, not streamed, that runs like throughput
register_kind(WorkloadKind("fake-throughput", stream=False, keys=("request_rate",)))
register_runner("fake-throughput", throughput)
"""
BENCH = """
import pytest


@pytest.mark.specbench("fake-throughput")
def test_fake(engine, cell, specbench):
    specbench.run(engine, cell)
"""
MATRIX = """
models: {m: "embedded:tiny"}
methods:
  ar: {backend: hf, model: m}
  fake: {backend: hf, model: m, speculative: {algorithm: FAKE-NGRAM, num_draft_tokens: 3}}
workloads:
  fake-throughput:
    {concurrency: [1], output_tokens: [8], prompt_tokens: 16, requests: 2, rounds: 2, warmup: 0}
"""


@pytest.fixture
def registries() -> Iterator[None]:
    """The registries as they were before the test: the inner run registers in this process."""
    saved = [(r, dict(r)) for r in (algorithms.ALGORITHMS, workload_kinds.WORKLOAD_KINDS, kinds.WORKLOADS)]
    yield
    for reg, before in saved:
        reg.clear()
        reg.update(before)


def test_a_registered_algorithm_and_kind_run_end_to_end_on_the_embedded_backend(
    pytester: pytest.Pytester, registries: None
) -> None:
    write_project(pytester, MATRIX, CONFTEST, BENCH, "test_fake.py")
    res = pytester.runpytest("benches", "--benchmark-json=out.json", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str() + res.stderr.str()
    res.assert_outcomes(passed=2)
    doc = json.loads(Path(pytester.path / "out.json").read_text())
    cells = {b["params"]["method"]: b for b in doc["benchmarks"]}
    assert set(cells) == {"ar", "fake"}
    fake = cells["fake"]
    assert fake["param"] == "fake-throughput-fake-tp1-c1-out8"
    assert fake["group"] == fake["params"]["workload"] == "fake-throughput"  # the kind's workload
    ex = fake["extra_info"]
    assert ex["errors"] == 0 and ex["output_tokens"] > 0
    # the hf engine drafted n-grams for it: a speculative cell, its verify steps counted
    assert ex["accept_length"] is not None and ex["accept_length"] >= 1 and ex["accept_histogram"]
    assert cells["ar"]["extra_info"]["errors"] == 0
    info = {g["group"]: g["info"] for g in doc["specbench"]["engine_groups"]}
    assert info["fake-tp1"]["algorithm"] == "fake-ngram" and info["fake-tp1"]["num_draft_tokens"] == 3
    assert info["ar-tp1"]["algorithm"] is None


def test_the_registries_are_as_before_after_the_run() -> None:
    assert "fake-ngram" not in algorithms.ALGORITHMS
    assert "fake-throughput" not in workload_kinds.WORKLOAD_KINDS and "fake-throughput" not in kinds.WORKLOADS
