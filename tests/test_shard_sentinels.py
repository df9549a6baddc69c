"""Drift sentinels of a sharded run: the split (matrix/shards.py) is by shape, so a drift family's
shapes may sit on several shards; every shard that holds a family's baseline and members runs its
own sentinel on one of its shapes, and the merge keeps each shard's drift for that shard's
members (deciding/families.py ``by_part``, plugin/sentinel.py, report/merge.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from bench_project import count_starts, fake_conftest, write_project

from pytest_specbench.deciding.families import as_first, by_part, families
from pytest_specbench.matrix import shards
from pytest_specbench.matrix.schema import parse
from pytest_specbench.plugin import disturbance  # imported before pytester's sys.modules snapshot
from pytest_specbench.report import drift, merge, screen

CONFTEST = fake_conftest(
    "FakeStepDriftEngine",
    'register_backend("fake-step", FakeStepDriftEngine, gpu=False, sentinel=True, max_tp=2)',
)
# two shapes of one family (ar and fast at c1 and c2): two shards, one shape each
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-step, model: m}
  fast: {backend: fake-step, model: m}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 16
    rounds: 3
    warmup: 1
"""


def _cells_and_split(n: int):
    doc = {
        "models": {"m": "/nonexistent/model"},
        "methods": {
            "ar": {"backend": "sglang", "model": "m"},
            "a": {"backend": "sglang", "model": "m"},
            "b": {"backend": "sglang", "model": "m"},
        },
        "tp": [1],
        "workloads": {"throughput": {"concurrency": [1, 4, 16]}},
    }
    m = parse(doc, "m.yaml")
    cells = m.cells()
    sp = shards.split(cells, m.baselines(), n, lambda c: None, lambda g: 30.0)
    parts = [[c for c in cells if sp.shard_of(c, m.baselines()) == i] for i in range(n)]
    return m, cells, parts


@pytest.mark.parametrize("n", [2, 3])
def test_every_part_with_a_baseline_and_members_gets_the_family_and_its_own_sentinel(n: int) -> None:
    m, cells, parts = _cells_and_split(n)
    kw = {"baselines": m.baselines(), "sentinel_backends": {"sglang"}, "interleaving": set()}
    (whole,) = families(cells, **kw)
    assert whole.first.id == "ar-tp1-c1-out64"  # unsharded: one sentinel, on the first shape
    got = by_part(parts, **kw)
    assert all(parts) and len(got) == n
    for part, fams in zip(parts, got, strict=True):
        (f,) = fams  # every shard holds ar and its members at its shapes: the family, here too
        ids = {c.id for c in part}
        assert f.first.id in ids  # its sentinel re-runs a shape this shard measured
        assert f.first.method.name == "ar" and set(f.members) == {"a-tp1", "b-tp1"}
    # each part's sentinel is one of those every process can collect (plugin/sentinel.py possible)
    possible = {rid for f in as_first([whole], cells) for rid, _ in f.runs()}
    mine = [rid for fams in got for f in fams for rid, _ in f.runs()]
    assert len(set(mine)) == n and set(mine) <= possible


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(pytester, MATRIX, CONFTEST)
    monkeypatch.setattr(disturbance.DisturbanceMeter, "start", lambda self: None)
    monkeypatch.setattr(disturbance.DisturbanceMeter, "stop", lambda self: {})
    monkeypatch.setenv("FAKE_DRIFT_PER_START", "1.0")
    monkeypatch.setenv("FAKE_TOKEN_S", "0.002")
    count_starts(monkeypatch, pytester.path / "starts.txt")
    for k in ("JOB_COMPLETION_INDEX", "SPECBENCH_SHARDS", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(k, raising=False)


def test_each_shard_runs_its_familys_sentinel_and_the_merge_keeps_each_members_drift(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, monkeypatch)
    plan = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", "--specbench-plan", "--specbench-shards", "2"
    )
    lines = [ln for ln in plan.stdout.lines if ln.startswith("shard ")]
    assert len(lines) == 2 and all(", drift sentinels ar-tp1-c" in ln for ln in lines), lines
    docs = []
    for i in range(2):
        monkeypatch.setenv("FAKE_STEP_RUN", uuid.uuid4().hex)  # each shard its own machine
        out = f"s{i}.json"
        res = pytester.runpytest(
            "benches", "-p", "no:cacheprovider", "--specbench-shard", f"{i}/2", f"--benchmark-json={out}"
        )
        res.assert_outcomes(passed=3)  # its two cells and its sentinel
        # the shard's status counts its cells, not its sentinel item
        assert (
            f"specbench: shard {i}/2 (from --specbench-shard): 2 of the 4 selected cells" in res.stdout.str()
        )
        doc = json.loads((pytester.path / out).read_text())
        (sent,) = doc["specbench"]["sentinels"]
        shape = {b["param"] for b in doc["benchmarks"] if b["param"].startswith("ar-")}
        assert sent["baseline_cell"] in shape and sent["groups"] == ["ar-tp1", "fast-tp1"]
        assert doc["specbench"]["shard"]["sentinels"] == [sent["cell_id"]]  # as the split planned
        docs.append((out, doc))
    got, notes = merge.merge(docs)
    assert not [n for n in notes if "sentinel" in n], notes
    recs = got["specbench"]["drift"]
    assert [r["shard"] for r in recs] == ["0/2", "1/2"] and all(r["drift"] < -0.3 for r in recs), recs
    by_sentinel = {r["sentinel_cell"]: r for r in recs}
    members = [b for b in got["benchmarks"] if b["param"].startswith("fast-")]
    assert len(members) == 2
    for b in members:  # every member carries the drift its own shard's sentinel read
        d = b["extra_info"]["speedup_drift"]
        rec = by_sentinel[d["sentinel_cell"]]
        assert d["shard"] == rec["shard"] == b["extra_info"]["provenance"]["shard"]
        assert d["drift"] == rec["drift"]
    said = drift.lines(got)
    assert [ln.split(":")[0] for ln in said] == ["drift ar-tp1 (shard 0/2)", "drift ar-tp1 (shard 1/2)"]
    shown = screen.drift_view(got)  # the screen names each shard's drift apart too
    assert [ln.split(":")[0] for ln in shown] == ["drift ar-tp1 (shard 0/2)", "drift ar-tp1 (shard 1/2)"]


def test_a_sentinel_the_split_planned_that_a_shard_lacks_is_noted() -> None:
    docs = []
    for i in range(2):
        spec = {
            "shard": {
                "index": i,
                "count": 2,
                "split_digest": "s",
                "matrix_digest": "m",
                "split_cells": [["x"], ["y"]],
                "sentinels": [f"ar-c{i}-sentinel"],
            },
            "sentinels": [{"cell_id": "ar-c0-sentinel", "family": "ar-tp1"}] if i == 0 else [],
        }
        docs.append((f"s{i}.json", {"benchmarks": [{"param": "xy"[i], "extra_info": {}}], "specbench": spec}))
    _, notes = merge.merge(docs)
    assert notes == [
        "s1.json: shard 1/2's drift sentinel ar-c1-sentinel did not run: its members of that family "
        "carry no drift"
    ]


def test_unsharded_runs_collect_one_sentinel_per_family(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a shard collects a sentinel per shape: an unsharded run keeps one, on the first shape."""
    _project(pytester, monkeypatch)
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--collect-only", "-q")
    assert [ln for ln in res.stdout.lines if "sentinel" in ln] == [
        "benches/test_specbench.py::test_throughput[ar-tp1-c1-out8-sentinel]"
    ]
    assert len([ln for ln in res.stdout.lines if "::test_throughput[" in ln]) == 5  # 4 cells, 1 sentinel
