"""The project the plugin's end-to-end tests run in a pytester directory: a conftest.py that puts
tests/ on sys.path and registers fake engines (tests/fake_engine.py), a matrix at
benches/specbench.yaml, a bench file beside it, and the file the fake engines append their starts
to ($FAKE_ENGINE_STARTS)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

# the repository's bench file: one bench function per workload kind
BENCH = (HERE.parent / "benches" / "test_specbench.py").read_text()

# a bench file of one function, for matrices of throughput workloads only
THROUGHPUT_BENCH = """
def test_throughput(engine, cell, specbench):
    specbench.run(engine, cell)
"""


def fake_conftest(engine: str, register: str, head: str = "import sys") -> str:
    """A conftest.py that imports ``engine`` from tests/fake_engine.py and runs ``register`` (one
    or more ``register_backend(...)`` lines)."""
    return f"""
{head}
sys.path.insert(0, {str(HERE)!r})
from fake_engine import {engine}
from pytest_specbench.engines import register_backend
{register}
"""


def write_project(
    pytester: pytest.Pytester,
    matrix: str | None,
    conftest: str | None,
    bench: str = BENCH,
    bench_file: str = "test_specbench.py",
) -> pytest.Pytester:
    """conftest.py (None: keep the one there, if any), benches/specbench.yaml (None: none
    written, for a matrix named on the command line) and benches/<bench_file>."""
    if conftest is not None:
        pytester.makeconftest(conftest)
    benches = pytester.path / "benches"
    benches.mkdir(exist_ok=True)
    if matrix is not None:
        (benches / "specbench.yaml").write_text(matrix)
    (benches / bench_file).write_text(bench)
    return pytester


def count_starts(monkeypatch: pytest.MonkeyPatch, path: Path) -> Path:
    """The fake engines append one line per start (group, worker, ...) to ``path``."""
    monkeypatch.setenv("FAKE_ENGINE_STARTS", str(path))
    return path
