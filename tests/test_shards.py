"""Sharding a matrix over machines (--specbench-shard I/N, the schedulers' variables) and merging the
shards' JSONs (python -m pytest_specbench.report merge)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_engine import CONFTEST

from pytest_specbench.matrix import schema, shards
from pytest_specbench.report import merge

HERE = Path(__file__).parent
ROOT = HERE.parent


# shaped like the default job: a baseline, a sweep and a draft, several workloads
MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: [2, 4]}}
  eagle3: {backend: fake, model: m, speculative: {algorithm: eagle3, draft_model: m, num_draft_tokens: 4}}
tp: [1]
workloads:
  throughput:
    concurrency: [1, 4]
    output_tokens: [16]
    prompt_tokens: 8
    rounds: 2
    warmup: 1
  sampled:
    kind: throughput
    methods: [ar, ngram-d4]
    temperature: [1.0]
    concurrency: [2]
    output_tokens: [16]
    prompt_tokens: 8
    rounds: 2
    warmup: 1
  ttft:
    concurrency: [1]
    output_tokens: [8]
    prompt_tokens: 8
    rounds: 2
    warmup: 0
"""

BENCH = """
def test_throughput(engine, cell, specbench):
    specbench.run(engine, cell)

def test_ttft(engine, cell, specbench):
    specbench.run(engine, cell)
"""


def _split(path: str, n: int) -> tuple[list, shards.Split, dict]:
    m = schema.load(path)
    cells = m.cells()
    return cells, shards.split(cells, m.baselines(), n, lambda c: None, lambda g: 30.0), m.baselines()


@pytest.mark.parametrize("path", ["benches/specbench.yaml", "benches/examples/seed-27b-hybrid.yaml"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_shards_are_disjoint_cover_every_cell_keep_families_together_and_are_stable(
    path: str, n: int
) -> None:
    cells, sp, baselines = _split(str(ROOT / path), n)
    by_shard = [[c.id for c in cells if sp.shard_of(c, baselines) == i] for i in range(n)]
    assert sorted(i for ids in by_shard for i in ids) == sorted(c.id for c in cells)  # each cell once
    # a cell compared with a baseline is on the shard of the baseline's cell of the same shape
    where = {c.id: sp.shard_of(c, baselines) for c in cells}
    by_shape = {(c.request_key, c.tp, c.method.name): c.id for c in cells}
    compared = 0
    for c in cells:
        base = baselines.get(c.method.name)
        if base and base != c.method.name and (c.request_key, c.tp, base) in by_shape:
            assert where[c.id] == where[by_shape[(c.request_key, c.tp, base)]], c.id
            compared += 1
    assert compared > 0
    assert sp.digest == _split(str(ROOT / path), n)[1].digest  # the same split every time
    if n > 1:  # the matrices have enough families that no shard is idle
        assert all(by_shard), by_shard


def test_shard_from_the_option_and_the_schedulers_variables() -> None:
    assert str(shards.parse("2/3")) == "2/3"
    for bad, why in (("3/3", "I must be in 0..N-1"), ("1", "expected I/N"), ("a/b", "expected I/N")):
        with pytest.raises(shards.ShardError, match=why):
            shards.parse(bad)
    k8s = shards.from_env({"JOB_COMPLETION_INDEX": "1", "SPECBENCH_SHARDS": "4"})
    assert (k8s.index, k8s.count, k8s.source) == (1, 4, "JOB_COMPLETION_INDEX")
    with pytest.raises(shards.ShardError, match="SPECBENCH_SHARDS .* is not"):
        shards.from_env({"JOB_COMPLETION_INDEX": "1"})
    slurm = shards.from_env(
        {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1"}
    )
    assert (slurm.index, slurm.count) == (2, 3)  # --array=1-3 is renumbered from 0
    assert shards.from_env({"HOME": "/root"}) is None


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "benches").mkdir()
    (pytester.path / "benches" / "specbench.yaml").write_text(MATRIX)
    (pytester.path / "benches" / "test_bench.py").write_text(BENCH)
    monkeypatch.setenv("FAKE_ENGINE_STARTS", str(tmp_path / "starts.txt"))
    for k in ("JOB_COMPLETION_INDEX", "SPECBENCH_SHARDS", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(k, raising=False)
    return pytester


def _ids(doc: dict) -> dict[str, str]:
    return {b["param"]: b["extra_info"]["cell_fingerprint"] for b in doc["benchmarks"]}


@pytest.mark.slow
def test_three_shards_merge_into_the_unsharded_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project.runpytest("benches", "--benchmark-json", "full.json").assert_outcomes(passed=14)
    full = json.loads((project.path / "full.json").read_text())
    plan = project.runpytest("benches", "--specbench-plan", "--specbench-shards", "3").stdout.str()
    assert "shard 0/3: " in plan and "shard 2/3: " in plan and "shards: makespan " in plan
    counts = []
    for i in range(3):  # the first by the option, the others by SLURM's and Kubernetes' variables
        if i == 0:
            res = project.runpytest("benches", "--specbench-shard", "0/3", "--benchmark-json", "s0.json")
        elif i == 1:
            monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
            monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
            res = project.runpytest("benches", "--benchmark-json", "s1.json")
            monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
            monkeypatch.delenv("SLURM_ARRAY_TASK_COUNT")
        else:
            monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
            monkeypatch.setenv("SPECBENCH_SHARDS", "3")
            res = project.runpytest("benches", "--benchmark-json", "s2.json")
            monkeypatch.delenv("JOB_COMPLETION_INDEX")
        counts.append(res.parseoutcomes().get("passed", 0))
        doc = json.loads((project.path / f"s{i}.json").read_text())
        assert doc["specbench"]["shard"]["index"] == i and doc["specbench"]["shard"]["count"] == 3
        assert all(b["extra_info"]["provenance"]["shard"] == f"{i}/3" for b in doc["benchmarks"])
    assert sum(counts) == 14 and all(counts)
    paths = [str(project.path / f"s{i}.json") for i in range(3)]
    out = project.path / "merged.json"
    r = subprocess.run(
        [sys.executable, "-m", "pytest_specbench.report", "merge", *paths, "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "merged 3 files, 14 cells" in r.stdout
    merged = json.loads(out.read_text())
    assert _ids(merged) == _ids(full)  # same cell ids, same definitions
    assert [s["shard"] for s in merged["specbench"]["shards"]] == ["0/3", "1/3", "2/3"]
    # every speedup was computed on the shard that measured both sides
    by_id = {b["param"]: b for b in merged["benchmarks"]}
    assert by_id["throughput-ngram-d4-tp1-c4-out16"]["extra_info"]["speedup_vs_ar"] is not None
    # the report, the gate against the unsharded run, and the plots read the merged file
    for args in (
        [str(out)],
        [str(project.path / "full.json"), str(out), "--max-tok-s-drop", "0.99"],
        [str(out), "--plots", str(tmp_path / "plots")],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "pytest_specbench.report", *args], capture_output=True, text=True
        )
        assert r.returncode == 0, (args, r.stdout + r.stderr)
    assert (tmp_path / "plots" / "index.md").exists()
    cmp = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark.cli", "compare", str(out)], capture_output=True, text=True
    )
    assert cmp.returncode == 0, cmp.stderr


def _doc(index: int, count: int = 3, split: str = "s1", matrix: str = "m1", cells=("a",), sglang="0.5.17"):
    return {
        "benchmarks": [{"param": c, "extra_info": {"provenance": {"host": f"h{index}"}}} for c in cells],
        "machine_info": {"specbench": {"versions": {"pytest-specbench": "0.2.0", "sglang": sglang}}},
        "specbench": {
            "shard": {"index": index, "count": count, "split_digest": split, "matrix_digest": matrix},
            "engine_starts": 1,
        },
    }


def test_merge_refuses_what_is_not_one_run() -> None:
    ok = [("a.json", _doc(0, cells=("x",))), ("b.json", _doc(1, cells=("y",)))]
    doc, notes = merge.merge(ok)
    assert [b["param"] for b in doc["benchmarks"]] == ["x", "y"] and doc["specbench"]["engine_starts"] == 2
    assert notes == ["shards missing: 2/3: their cells are not in the merge"]
    for docs, why in (
        ([ok[0], ("b.json", _doc(0, cells=("y",)))], "shard 0/3 is given twice: a.json and b.json"),
        ([ok[0], ("b.json", _doc(1, matrix="m2", cells=("y",)))], "b.json is a shard of a different matrix"),
        ([ok[0], ("b.json", _doc(1, split="s2", cells=("y",)))], "b.json is a shard of a different split"),
        ([ok[0], ("b.json", _doc(1, count=2, cells=("y",)))], "a different number of shards"),
        ([ok[0], ("b.json", _doc(1, cells=("x",)))], "cell x is in a.json and in b.json"),
        ([ok[0], ("b.json", _doc(1, sglang="0.5.18", cells=("y",)))], r"sglang 0.5.17 \(a.json\) vs 0.5.18"),
        ([ok[0], ("b.json", {"benchmarks": []})], "b.json: not a results JSON of pytest-specbench"),
        ([ok[0]], "give two or more shard JSONs"),
    ):
        with pytest.raises(merge.MergeError, match=why):
            merge.merge(docs)
    unsharded = _doc(1, cells=("y",))
    unsharded["specbench"]["shard"] = None
    with pytest.raises(merge.MergeError, match="b.json: not a shard"):
        merge.merge([ok[0], ("b.json", unsharded)])


def test_bad_shard_options_are_refused_before_any_engine_starts(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    res = project.runpytest("benches", "--specbench-shard", "3/3")
    assert "I must be in 0..N-1" in res.stderr.str() and "JOB_COMPLETION_INDEX" in res.stderr.str()
    res = project.runpytest(
        "benches", "--specbench-shard", "0/3", "--specbench-shards", "2", "--specbench-plan"
    )
    assert "disagree on the number of shards" in res.stderr.str()
    assert not (tmp_path / "starts.txt").exists()


def test_a_shard_the_split_leaves_empty_succeeds_and_merges(project: pytest.Pytester) -> None:
    # one shape of one TP: one family, so of two shards the second gets nothing
    k = "throughput and c1 and tp1"
    res = project.runpytest("benches", "-k", k, "--specbench-shard", "1/2", "--benchmark-json", "e.json")
    assert res.ret == 0
    out = res.stdout.str()
    assert "specbench: shard 1/2 (from --specbench-shard): 0 of the 4 selected cells" in out
    assert "nothing to run here: the split gave every family of this selection to other shards" in out
    assert "selects none" not in out  # not the empty-selection message
    empty = json.loads((project.path / "e.json").read_text())
    assert empty["benchmarks"] == [] and empty["specbench"]["shard"]["families"] == []
    res = project.runpytest("benches", "-k", k, "--specbench-shard", "0/2", "--benchmark-json", "f.json")
    res.assert_outcomes(passed=4)
    assert "specbench: shard 0/2 (from --specbench-shard): 4 of the 4 selected cells" in res.stdout.str()
    doc, notes = merge.merge([(n, json.loads((project.path / n).read_text())) for n in ("f.json", "e.json")])
    assert len(doc["benchmarks"]) == 4 and notes == []
    plan = project.runpytest("benches", "-k", k, "--specbench-plan", "--specbench-shards", "2").stdout.str()
    assert "warning: 1 of 2 shards get no cells (more shards than families of this selection)" in plan
    # a shard of another selection (-k) is another split: the merge refuses it
    project.runpytest(
        "benches", "-k", f"{k} and ar", "--specbench-shard", "0/2", "--benchmark-json", "g.json"
    )
    with pytest.raises(merge.MergeError, match="a different split .other cells selected"):
        merge.merge([(n, json.loads((project.path / n).read_text())) for n in ("g.json", "e.json")])


def test_the_split_follows_what_k_matched_markers_included(project: pytest.Pytester) -> None:
    (project.path / "benches" / "test_bench.py").write_text(
        "import pytest\n\n@pytest.mark.heavy\ndef test_throughput(engine, cell, specbench):\n"
        "    specbench.run(engine, cell)\n\n"
        "def test_ttft(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )
    (project.path / "pytest.ini").write_text("[pytest]\nmarkers = heavy: a marker -k matches\n")

    def collected(*args: str) -> list[str]:
        res = project.runpytest("benches", "-k", "heavy and c1", "--collect-only", "-q", *args)
        return [ln for ln in res.outlines if "::test_" in ln]

    whole = collected()
    assert len(whole) == 4  # throughput (marked heavy) at c1: ar, ngram-d2, ngram-d4, eagle3
    parts = collected("--specbench-shard", "0/2") + collected("--specbench-shard", "1/2")
    assert sorted(parts) == sorted(whole)
