"""GPU code paths on a CPU: a fake engine registered as `sglang` and a fake NVML inventory of
4 GPUs. Checks pinning, per-worker slices under -n 2, TP skips and explicit --specbench-gpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

HERE = Path(__file__).parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench import gpus
from pytest_specbench.engines import register_backend

register_backend("sglang", FakeEngine)  # the plugin's GPU paths, without sglang
gpus.inventory = lambda: [gpus.GPU(i, "NVIDIA H200", 143771, 618, 0) for i in range(4)]
gpus.driver_info = lambda: {{"driver": "fake", "cuda_driver": "fake"}}
_served = [0]
_generate = FakeEngine.agenerate


async def _counting(self, request):
    _served[0] += 1
    return await _generate(self, request)


FakeEngine.agenerate = _counting


def _energy(indices):  # each GPU's counter: 25 J per request served so far (warm-up included)
    return {{i: _served[0] * 25_000 for i in indices}}


gpus.energy_mj = _energy
"""

MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: sglang, model: m}
  ngram: {backend: sglang, model: m, speculative: {algorithm: ngram}}
tp: [1, 2, 4]
workloads:
  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8, waves: 2, rounds: 1, warmup: 1}
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "benches").mkdir()
    (pytester.path / "benches" / "specbench.yaml").write_text(MATRIX)
    (pytester.path / "benches" / "test_b.py").write_text(
        "def test_throughput(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )
    monkeypatch.setenv("FAKE_ENGINE_STARTS", str(tmp_path / "starts.txt"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return pytester


def _starts(tmp_path: Path) -> dict[str, tuple[str, str]]:
    lines = (tmp_path / "starts.txt").read_text().splitlines()
    return {ln.split()[0]: (ln.split()[1], ln.split()[2]) for ln in lines}


def test_one_process_owns_every_free_gpu(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest_subprocess("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=6)
    assert {g: v[1] for g, v in _starts(tmp_path).items()} == {
        "ar-tp1": "0,1,2,3",
        "ar-tp2": "0,1,2,3",
        "ar-tp4": "0,1,2,3",
        "ngram-tp1": "0,1,2,3",
        "ngram-tp2": "0,1,2,3",
        "ngram-tp4": "0,1,2,3",
    }
    doc = json.loads((project.path / "out.json").read_text())
    assert [g["name"] for g in doc["machine_info"]["specbench"]["gpus"]] == ["NVIDIA H200"] * 4
    assert doc["specbench"]["gpus_used"] == [0, 1, 2, 3]


def test_two_workers_get_disjoint_slices(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest_subprocess("benches", "-n", "2", "--benchmark-json", "out.json", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    starts = _starts(tmp_path)
    assert set(starts) == {"ar-tp1", "ar-tp2", "ngram-tp1", "ngram-tp2"}
    for group, (worker, devices) in starts.items():
        assert devices == {"gw0": "0,1", "gw1": "2,3"}[worker], (group, worker, devices)
    out = res.stdout.str()
    assert "cell ar-tp4-c1-out8 skipped: needs 4 GPUs (TP=4); gw" in out and "owns 2 (" in out
    doc = json.loads((project.path / "out.json").read_text())
    assert len(doc["benchmarks"]) == 4
    assert {e["cuda_visible_devices"] for e in doc["specbench"]["engine_groups"]} == {"0,1", "2,3"}


def test_explicit_gpu_list(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "2,3", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    assert {v[1] for v in _starts(tmp_path).values()} == {"2,3"}
    assert "needs 4 GPUs (TP=4); main owns 2 (2, 3)" in res.stdout.str()
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "5")
    assert (
        "--specbench-gpus names GPU(s) [5]; this host has [0, 1, 2, 3]" in res.stderr.str() + res.stdout.str()
    )


def test_gpu_energy_over_the_timed_rounds(project: pytest.Pytester) -> None:
    """NVML energy counters read before and after a cell's timed rounds, on the GPUs its engine
    uses. The fake counter advances 25 J per request served: the timed round's 2 requests give 50 J
    per GPU (100 J at TP2); a meter started before the warm-up round would read twice that."""
    res = project.runpytest_subprocess("benches", "-k", "ar and not tp4", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=2)
    by = {
        b["param"]: b["extra_info"] for b in json.loads((project.path / "out.json").read_text())["benchmarks"]
    }
    tp1, tp2 = by["ar-tp1-c1-out8"], by["ar-tp2-c1-out8"]
    assert tp1["energy_j"] == 50.0 and tp1["energy_j_per_gpu"] == {"0": 50.0}
    assert tp2["energy_j"] == 100.0 and tp2["energy_j_per_gpu"] == {"0": 50.0, "1": 50.0}
    assert tp1["output_tokens"] == 16  # 2 requests x 8 tokens, one timed round
    assert tp1["joules_per_output_token"] == 50.0 / 16
    assert tp1["power_w_avg"] > 0
    assert "J/token" in res.stdout.str() and f"{50 / 16:.4f}" in res.stdout.str()  # the summary table


def test_pin_sets_pci_order_unless_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_specbench import gpus

    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus.pin((2, 3))
    assert (os.environ["CUDA_DEVICE_ORDER"], os.environ["CUDA_VISIBLE_DEVICES"]) == ("PCI_BUS_ID", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    gpus.pin((0,))
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
