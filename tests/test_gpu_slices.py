"""GPU code paths on a CPU: a fake engine registered as `sglang` and a fake NVML inventory of
4 GPUs (GPU 0 busy with $FAKE_GPU0_BUSY). Checks per-start leases and CUDA_VISIBLE_DEVICES, one
pool shared by -n 2 workers, TP skips with the free count, explicit --specbench-gpus, the plan's
schedule for -n K."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

HERE = Path(__file__).parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench.gpus import inventory as gpus
from pytest_specbench.engines import register_backend

register_backend("sglang", FakeEngine)  # the plugin's GPU paths, without sglang
import os


def _inventory():
    busy = bool(os.environ.get("FAKE_GPU0_BUSY"))
    return [
        gpus.GPU(i, "NVIDIA H200", 143771, 53410 if busy and i == 0 else 618, int(busy and i == 0))
        for i in range(4)
    ]


gpus.inventory = _inventory
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


def _lease_log(project: pytest.Pytester) -> list[dict]:
    from pytest_specbench.gpus.leases import read_log

    return read_log(project.path / "specbench-logs" / "gpu-leases.jsonl")


def test_each_start_leases_its_tp_in_one_process(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest_subprocess("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=6)
    assert {g: v[1] for g, v in _starts(tmp_path).items()} == {
        "ar-tp1": "0",
        "ar-tp2": "0,1",
        "ar-tp4": "0,1,2,3",
        "ngram-tp1": "0",
        "ngram-tp2": "0,1",
        "ngram-tp4": "0,1,2,3",
    }
    doc = json.loads((project.path / "out.json").read_text())
    assert [g["name"] for g in doc["machine_info"]["specbench"]["gpus"]] == ["NVIDIA H200"] * 4
    assert doc["specbench"]["gpus_used"] == [0, 1, 2, 3]
    starts = {e["group"]: e for e in doc["specbench"]["engine_groups"]}
    assert starts["ar-tp2"]["lease"]["gpus"] == [0, 1]
    assert starts["ar-tp2"]["cuda_visible_devices"] == "0,1"
    assert starts["ar-tp2"]["lease"]["taken_at"] >= starts["ar-tp2"]["lease"]["requested_at"]
    stops = {e["group"]: e for e in doc["specbench"]["engine_stops"]}
    assert stops["ar-tp4"]["lease"]["gpus"] == [0, 1, 2, 3]
    assert stops["ar-tp4"]["lease"]["returned_at"] >= starts["ar-tp4"]["lease"]["taken_at"]
    log = _lease_log(project)  # kept in --specbench-log-dir: every take has its return
    assert [e["event"] for e in log] == ["taken", "returned"] * 6
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_two_workers_share_one_pool(project: pytest.Pytester, tmp_path: Path) -> None:
    """-n 2 runs every TP (a slice per worker would skip TP4): each start leases its TP from the
    pool both workers share, and the log never has a GPU held twice."""
    from pytest_specbench.gpus.leases import overlaps

    res = project.runpytest_subprocess("benches", "-n", "2", "--benchmark-json", "out.json", "-rs")
    res.assert_outcomes(passed=6)
    starts = _starts(tmp_path)
    assert {w for w, _ in starts.values()} == {"gw0", "gw1"}
    order = [ln.split()[0] for ln in (tmp_path / "starts.txt").read_text().splitlines()]
    # handed out longest first, the larger TP first among equals (every group plans 60 s here),
    # not in collection order (ar-tp1 first): the two TP4 groups start first, one after the other
    assert sorted(order[:2]) == ["ar-tp4", "ngram-tp4"]
    for group, (_, devices) in starts.items():
        assert len(devices.split(",")) == int(group.rsplit("tp", 1)[1]), (group, devices)
    doc = json.loads((project.path / "out.json").read_text())
    assert len(doc["benchmarks"]) == 6
    assert sorted(len(e["lease"]["gpus"]) for e in doc["specbench"]["engine_groups"]) == [1, 1, 2, 2, 4, 4]
    log = _lease_log(project)
    assert sorted(e["event"] for e in log) == ["returned"] * 6 + ["taken"] * 6
    assert overlaps(log) == []


def test_cell_wider_than_the_free_gpus_is_skipped_with_the_count(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_GPU0_BUSY", "1")
    res = project.runpytest_subprocess("benches", "-n", "2", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    out = res.stdout.str()
    assert (
        "cell ar-tp4-c1-out8 skipped: needs 4 GPUs; 3 free: GPU 0 busy, 56 GB used by another process" in out
    )
    assert all("0" not in devices.split(",") for _, devices in _starts(tmp_path).values())


def test_explicit_gpu_list(project: pytest.Pytester, tmp_path: Path) -> None:
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "2,3", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    assert {g: v[1] for g, v in _starts(tmp_path).items()} == {
        "ar-tp1": "2",
        "ar-tp2": "2,3",
        "ngram-tp1": "2",
        "ngram-tp2": "2,3",
    }
    assert "needs 4 GPUs; 2 free: GPUs 0, 1 not in --specbench-gpus" in res.stdout.str()
    res = project.runpytest_subprocess("benches", "--specbench-gpus", "5")
    assert (
        "--specbench-gpus names GPU(s) [5]; this host has [0, 1, 2, 3]" in res.stderr.str() + res.stdout.str()
    )


def test_cuda_visible_devices_of_the_user_is_the_pool(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's CUDA_VISIBLE_DEVICES=2,3 (GPUs reserved for them) is the run's pool, as
    --specbench-gpus 2,3 would be: no engine lands on GPU 0 or 1."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    res = project.runpytest_subprocess("benches", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    assert {g: v[1] for g, v in _starts(tmp_path).items()} == {
        "ar-tp1": "2",
        "ar-tp2": "2,3",
        "ngram-tp1": "2",
        "ngram-tp2": "2,3",
    }


def test_plan_prints_the_schedule_for_the_workers_given(project: pytest.Pytester) -> None:
    """--specbench-plan -n 2: the controller prints the packed schedule itself (no worker starts,
    no engine); the serial time is the sum of the groups. Two workers sharing 4 GPUs: the TP4
    groups one after the other (each takes every GPU; largest TP first among equal durations),
    then the two TP2 groups side by side, then the two TP1 groups."""
    res = project.runpytest_subprocess(
        "benches", "--specbench-plan", "-n", "2", "--specbench-plan-json", "plan.json"
    )
    assert res.ret == 0
    out = res.stdout.str()
    assert "schedule with 2 workers, GPU pool 0,1,2,3:" in out
    assert re.search(r"ar-tp4 +GPUs 0,1,2,3 ", out)
    sched = json.loads((project.path / "plan.json").read_text())["schedule"]
    assert sched["workers"] == 2 and sched["pool"] == [0, 1, 2, 3]
    assert len(sched["slots"]) == 6
    assert sched["serial_s"] == pytest.approx(6 * 60.0, abs=1.0)  # 6 starts, cells ~0 s (no ETA)
    assert sched["makespan_s"] == pytest.approx(4 * 60.0, abs=1.0)
    assert [(x["group"], x["gpus"], x["start_s"]) for x in sched["slots"]] == [
        ("ar-tp4", [0, 1, 2, 3], 0.0),
        ("ngram-tp4", [0, 1, 2, 3], 60.0),
        ("ar-tp2", [0, 1], 120.0),
        ("ngram-tp2", [2, 3], 120.0),
        ("ar-tp1", [0], 180.0),
        ("ngram-tp1", [1], 180.0),
    ]
    assert "ngram-tp4  GPUs 0,1,2,3             1:00 ->     2:00  (waits 1:00 for GPUs)" in out
    assert "makespan 4.0 min with 2 workers; serial 6.0 min, 1.5x" in out
    assert not (project.path / "specbench-logs" / "gpu-leases.jsonl").exists()


def test_gpu_energy_over_the_timed_rounds(project: pytest.Pytester) -> None:
    """NVML energy counters read before and after a cell's timed rounds, on the GPUs its engine
    uses. The fake counter advances 25 J per request served: the timed round's 2 requests give 50 J
    per GPU (100 J at TP2); a meter started before the warm-up round would read twice that."""
    res = project.runpytest_subprocess(
        "benches", "-k", "ar and not tp4", "--benchmark-json", "out.json", "--specbench-summary", "full"
    )
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
    from pytest_specbench.gpus import inventory as gpus

    for name in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"):  # set, then removed: restored after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    gpus.pin((2, 3))
    assert (os.environ["CUDA_DEVICE_ORDER"], os.environ["CUDA_VISIBLE_DEVICES"]) == ("PCI_BUS_ID", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    gpus.pin((0,))
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
