"""Sharding a matrix over machines (--specbench-shard I/N, the schedulers' variables) and merging the
shards' JSONs (python -m pytest_specbench.report merge)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_project import count_starts, write_project
from fake_engine import CONFTEST

from pytest_specbench.matrix import schema, shards
from pytest_specbench.plugin import disturbance  # imported before pytester's sys.modules snapshot
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


SLURM_VARS = tuple(f"SLURM_ARRAY_TASK_{k}" for k in ("ID", "COUNT", "MIN", "MAX", "STEP"))


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    write_project(pytester, MATRIX, CONFTEST, BENCH, "test_bench.py")
    count_starts(monkeypatch, tmp_path / "starts.txt")
    for k in ("JOB_COMPLETION_INDEX", "SPECBENCH_SHARDS", *SLURM_VARS):
        monkeypatch.delenv(k, raising=False)
    return pytester


def _ids(doc: dict) -> dict[str, str]:
    return {b["param"]: b["extra_info"]["cell_fingerprint"] for b in doc["benchmarks"]}


@pytest.mark.slow
def test_three_shards_merge_into_the_unsharded_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the disturbance meter off (its own tests cover it): a cell the suite's other worker disturbed
    # has no gate verdict, and with every cell of the unsharded run disturbed the gate against it
    # was inconclusive (exit 3) instead of reading the merged file's cells
    monkeypatch.setattr(disturbance.DisturbanceMeter, "start", lambda self: None)
    monkeypatch.setattr(disturbance.DisturbanceMeter, "stop", lambda self: {})
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
    # shard 2's JSON lost: the merge names each of its cells and writes nothing
    lost = sorted(b["param"] for b in json.loads(Path(paths[2]).read_text())["benchmarks"])
    r = _merge_cli(*paths[:2], "-o", str(out))
    assert r.returncode == 1 and f"{len(lost)} cells missing: {', '.join(lost)}" in r.stdout, r.stdout
    assert not out.exists()
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


SPLIT = [["x"], ["y"], ["z1", "z2"]]  # the cells of shards 0, 1 and 2 of _doc's split


def _doc(
    index: int,
    count: int = 3,
    split: str = "s1",
    matrix: str = "m1",
    cells=("a",),
    sglang="0.5.17",
    split_cells=SPLIT,
):
    return {
        "benchmarks": [{"param": c, "extra_info": {"provenance": {"host": f"h{index}"}}} for c in cells],
        "machine_info": {"specbench": {"versions": {"pytest-specbench": "0.2.0", "sglang": sglang}}},
        "specbench": {
            "shard": {
                "index": index,
                "count": count,
                "split_digest": split,
                "matrix_digest": matrix,
                "split_cells": split_cells,
            },
            "engine_starts": 1,
        },
    }


def test_merge_refuses_what_is_not_one_run() -> None:
    ok = [("a.json", _doc(0, cells=("x",))), ("b.json", _doc(1, cells=("y",)))]
    doc, notes = merge.merge(ok)
    assert [b["param"] for b in doc["benchmarks"]] == ["x", "y"] and doc["specbench"]["engine_starts"] == 2
    assert notes == [
        "shards missing: 2/3: their cells are not in the merge",
        "2 cells missing: z1, z2",
    ]
    assert doc["specbench"]["missing_cells"] == [
        {"cell": "z1", "shard": "2/3", "why": "shard 2/3 not given"},
        {"cell": "z2", "shard": "2/3", "why": "shard 2/3 not given"},
    ]
    for docs, why in (
        ([ok[0], ("b.json", _doc(0, cells=("y",)))], "shard 0/3 is given twice: a.json and b.json"),
        ([ok[0], ("b.json", _doc(1, matrix="m2", cells=("y",)))], "b.json is a shard of a different matrix"),
        ([ok[0], ("b.json", _doc(1, split="s2", cells=("y",)))], "b.json is a shard of a different split"),
        ([ok[0], ("b.json", _doc(1, count=2, cells=("y",)))], "a different number of shards"),
        ([ok[0], ("b.json", _doc(1, cells=("x",)))], "cell x is in a.json and in b.json"),
        ([ok[0], ("b.json", _doc(1, sglang="0.5.18", cells=("y",)))], r"sglang 0.5.17 \(a.json\) vs 0.5.18"),
        ([ok[0], ("b.json", {"benchmarks": []})], "b.json: not a results JSON of pytest-specbench"),
        ([], "give the shard JSONs of one sharded run, or two or more runs"),
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


def _merge_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_specbench.report", "merge", *args], capture_output=True, text=True
    )


def test_a_missing_shard_names_its_cells_and_fails_the_merge_unless_allowed(tmp_path: Path) -> None:
    paths = []
    for i, cells in enumerate((("x",), ("y",))):
        paths.append(tmp_path / f"s{i}.json")
        paths[-1].write_text(json.dumps(_doc(i, cells=cells)))
    out = tmp_path / "run.json"
    r = _merge_cli(*map(str, paths), "-o", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "merge incomplete, nothing written: 2 cells missing: z1, z2" in r.stdout
    assert "missing: z1: shard 2/3 not given" in r.stdout and "missing: z2: shard 2/3 not given" in r.stdout
    assert not out.exists()
    r = _merge_cli(*map(str, paths), "-o", str(out), "--allow-missing")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note: 2 cells missing: z1, z2" in r.stdout
    merged = json.loads(out.read_text())
    assert [m["cell"] for m in merged["specbench"]["missing_cells"]] == ["z1", "z2"]
    # one shard file alone: the same, naming the cells of the other two
    r = _merge_cli(str(paths[0]), "-o", str(out))
    assert r.returncode == 1 and "3 cells missing: y, z1, z2" in r.stdout, r.stdout
    # the report of the partial run names them; the gate against a complete run fails on them
    from pytest_specbench.report.summary import main

    complete = tmp_path / "complete.json"
    doc = _doc(0, cells=("x", "y", "z1", "z2"))
    for b in doc["benchmarks"]:
        b["extra_info"]["output_tokens_per_s"] = 100.0
    for b in merged["benchmarks"]:
        b["extra_info"]["output_tokens_per_s"] = 100.0
    out.write_text(json.dumps(merged))
    complete.write_text(json.dumps(doc))
    r = subprocess.run(
        [sys.executable, "-m", "pytest_specbench.report", str(out)], capture_output=True, text=True
    )
    assert "- missing `z1`: shard 2/3 not given" in r.stdout, r.stdout
    assert main([str(complete), str(out), "--max-tok-s-drop", "0.05"]) == 1


def test_an_interrupted_shard_names_the_cells_it_did_not_reach() -> None:
    a = _doc(0, cells=("x",))
    b = _doc(1, cells=(), split_cells=[["x"], ["y1", "y2", "y3"], []], count=2)
    a["specbench"]["shard"].update(count=2, split_cells=[["x"], ["y1", "y2", "y3"], []])
    b["benchmarks"] = [{"param": "y1", "extra_info": {}}]
    b["specbench"]["failed_cells"] = [{"cell": "y2", "phase": "call", "error": "x"}]
    b["specbench"]["interrupted"] = {"cell": "y2", "why": "interrupted by SIGTERM"}
    doc, notes = merge.merge([("a.json", a), ("b.json", b)])
    assert doc["specbench"]["missing_cells"] == [
        {"cell": "y3", "shard": "1/2", "why": "shard 1/2 was interrupted before it"}
    ]
    assert "1 cell missing: y3" in notes


def _slurm(task: int, ids: list[int], step: int = 1) -> dict[str, str]:
    """SLURM's variables for one task of ``--array`` with these ids (job_mgr.c: COUNT the ids,
    MIN and MAX the lowest and highest, STEP the number after ':' in --array, else 1)."""
    return {
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
        "SLURM_ARRAY_TASK_MIN": str(min(ids)),
        "SLURM_ARRAY_TASK_MAX": str(max(ids)),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }


@pytest.mark.parametrize(
    "ids, step", [([0, 1, 2], 1), ([1, 2, 3], 1), ([0, 2, 4], 2), ([1, 5, 9], 1), ([3], 1)]
)
def test_every_task_of_a_slurm_array_runs_its_own_shard(ids: list[int], step: int) -> None:
    """--array=0-2, 1-3, 0-4:2, 1,5,9 and 3: task k of the array is shard k/N, each shard once."""
    got = [shards.from_env(_slurm(t, ids, step)) for t in ids]
    assert [(s.index, s.count) for s in got] == [(i, len(ids)) for i in range(len(ids))]


def test_a_slurm_task_whose_shard_cannot_be_known_is_a_usage_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(shards.ShardError, match="the array's ids are not evenly spaced"):
        shards.from_env(_slurm(1, [0, 1, 3]))  # --array=0,1,3
    with pytest.raises(shards.ShardError, match="SLURM_ARRAY_TASK_COUNT .* is not"):
        shards.from_env({"SLURM_ARRAY_TASK_ID": "1"})
    for bad in ("abc", "1.5"):
        env = {**_slurm(1, [0, 1, 2]), "SLURM_ARRAY_TASK_ID": bad}
        with pytest.raises(shards.ShardError, match=f"SLURM_ARRAY_TASK_ID='{bad}': expected a whole number"):
            shards.from_env(env)
    for k, v in {**_slurm(1, [0, 1, 2]), "SLURM_ARRAY_TASK_ID": "abc"}.items():
        monkeypatch.setenv(k, v)
    res = project.runpytest("benches", "--collect-only", "-q")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "SLURM_ARRAY_TASK_ID='abc': expected a whole number" in err and "INTERNALERROR" not in err


def test_unsharded_runs_of_different_matrices_refuse_to_merge(project: pytest.Pytester) -> None:
    other = MATRIX.replace(
        "prompt_tokens: 8\n    rounds: 2\n    warmup: 0", "prompt_tokens: 9\n    rounds: 2\n    warmup: 0"
    )
    assert other != MATRIX
    (project.path / "other.yaml").write_text(other)
    project.runpytest("benches", "-k", "ttft and ar", "--benchmark-json", "a.json").assert_outcomes(passed=1)
    project.runpytest("benches", "-k", "ttft and eagle3", "--benchmark-json", "b.json").assert_outcomes(
        passed=1
    )
    project.runpytest(
        "benches", "-k", "ttft and eagle3", "--specbench-matrix", "other.yaml", "--benchmark-json", "c.json"
    ).assert_outcomes(passed=1)
    docs = {n: json.loads((project.path / n).read_text()) for n in ("a.json", "b.json", "c.json")}
    doc, notes = merge.merge([("a.json", docs["a.json"]), ("b.json", docs["b.json"])])  # one matrix: fine
    assert len(doc["benchmarks"]) == 2 and notes == []
    with pytest.raises(
        merge.MergeError, match=r"c.json and a.json are runs of different matrices \(matrix_digest"
    ):
        merge.merge([("a.json", docs["a.json"]), ("c.json", docs["c.json"])])


def test_a_frontier_across_hosts_says_so_and_labels_each_point_with_its_host() -> None:
    from pytest_specbench.report import pareto

    def b(method: str, c: int, tok_s: float, tpot_ms: float, host: str) -> dict:
        return {
            "param": f"{method}-c{c}",
            "params": {
                "method": method,
                "tp": 1,
                "workload": "throughput",
                "concurrency": c,
                "output_tokens": 64,
            },
            "extra_info": {
                "output_tokens_per_s": tok_s,
                "tpot_ms_p50": tpot_ms,
                "provenance": {"host": host},
            },
        }

    doc = {
        "benchmarks": [
            b("ar", 1, 100.0, 10.0, "h0"),
            b("ar", 8, 640.0, 12.5, "h0"),
            b("ngram", 1, 150.0, 6.25, "h1"),
        ]
    }
    (pts,) = pareto.points(doc).values()
    front = pareto.frontier(pts)
    assert [q.cell for q in front] == ["ar-c8", "ngram-c1"]
    assert (
        pareto.hosts_note(front, pareto.hosts(doc))
        == "frontier across 2 hosts (h0, h1): points labelled @host"
    )
    one = {
        "benchmarks": [
            {**x, "extra_info": {**x["extra_info"], "provenance": {"host": "h0"}}} for x in doc["benchmarks"]
        ]
    }
    assert pareto.hosts_note(front, pareto.hosts(one)) is None
    pytest.importorskip("matplotlib")
    from pytest_specbench.report.plots_pareto import draw

    fig = draw(doc, pareto.trade_panels(pareto.points(doc)))
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert ax.get_title().endswith("\nfrontier across 2 hosts (h0, h1): points labelled @host")
    assert sorted(t.get_text() for t in ax.texts) == ["c1 @h0", "c1 @h1", "c8 @h0"]


def _families(doc: dict, matrix_path: Path) -> set[str]:
    """The families of the cells a JSON measured (matrix/shards.py's family_of)."""
    m = schema.load(str(matrix_path))
    by_id = {c.id: c for c in m.cells()}
    return {shards.family_of(by_id[b["param"]], m.baselines()) for b in doc["benchmarks"]}


@pytest.mark.slow
def test_under_xdist_the_split_is_what_the_workers_collected(project: pytest.Pytester) -> None:
    """-n 2 with -m (not -k) and a bench file not named test_specbench.py: the two shards' JSONs
    carry the split the workers ran (the same as without -n), list only families they ran, and
    merge complete; an empty shard under -n writes an empty JSON and exits 0."""
    (project.path / "benches" / "test_bench.py").write_text(
        "import pytest\n\n@pytest.mark.heavy\ndef test_throughput(engine, cell, specbench):\n"
        "    specbench.run(engine, cell)\n\n"
        "def test_ttft(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )
    (project.path / "pytest.ini").write_text("[pytest]\nmarkers = heavy: a marker -m selects\n")
    sel = ("benches", "-m", "heavy", "-k", "c1 or c2", "-p", "no:cacheprovider")
    serial = project.runpytest(*sel, "--specbench-shard", "0/2", "--collect-only", "-q")
    assert serial.ret == 0
    paths, ran = [], 0
    for i in range(2):
        res = project.runpytest_subprocess(
            *sel, "-n", "2", "--specbench-shard", f"{i}/2", "--benchmark-json", f"x{i}.json"
        )
        assert res.ret == 0, res.stdout.str()
        paths.append(str(project.path / f"x{i}.json"))
        doc = json.loads(Path(paths[-1]).read_text())
        ran += len(doc["benchmarks"])
        assert doc["benchmarks"], i
        assert sorted(doc["specbench"]["shard"]["families"]) == sorted(
            _families(doc, project.path / "benches" / "specbench.yaml")
        )
    # the same split as a run without -n computes (its line names the digest)
    digest = json.loads(Path(paths[0]).read_text())["specbench"]["shard"]["split_digest"]
    assert f"split {digest}" in serial.stdout.str()
    assert (
        ran == 6
    )  # throughput (heavy) at c1 and c2: ar, ngram-d2, ngram-d4, eagle3 at c1; ar, ngram-d4 sampled c2
    r = _merge_cli(*paths, "-o", str(project.path / "x.json"))
    assert r.returncode == 0 and f"merged 2 files, {ran} cells" in r.stdout, r.stdout
    # an empty shard under -n: exit 0 and a JSON without cells
    k = ("benches", "-k", "throughput and c1 and tp1", "-p", "no:cacheprovider")
    res = project.runpytest_subprocess(
        *k, "-n", "2", "--specbench-shard", "1/2", "--benchmark-json", "e.json"
    )
    assert res.ret == 0, res.stdout.str()
    empty = json.loads((project.path / "e.json").read_text())
    assert empty["benchmarks"] == [] and empty["specbench"]["shard"]["families"] == []
    assert len(empty["specbench"]["shard"]["split_cells"][0]) == 4


def test_raced_shards_merge_every_shards_drops_sentinels_and_drift() -> None:
    """Each shard's dropped and tuned-out cells, drift sentinels and drift records are the run's:
    the merge keeps all of them, not the first shard's."""
    docs = []
    for i in range(3):
        d = _doc(i, cells=(f"c{i}",))
        d["specbench"]["race"] = {
            "dropped_cells": [{"cell_id": f"lose{i}"}],
            "tuned_out": [{"cell_id": f"knob{i}", "reason": "tuned out"}],
            "tuning": {"knob": {"kept": ["knob-d4"]}},
        }
        d["specbench"]["sentinels"] = [{"family": f"ar-tp{i}"}]
        d["specbench"]["drift"] = [{"family": f"ar-tp{i}", "drift": -0.01 * i}]
        docs.append((f"s{i}.json", d))
    doc, _ = merge.merge(docs)
    race = doc["specbench"]["race"]
    assert [d["cell_id"] for d in race["dropped_cells"]] == ["lose0", "lose1", "lose2"]
    assert [t["cell_id"] for t in race["tuned_out"]] == ["knob0", "knob1", "knob2"]
    assert race["tuning"] == {"knob": {"kept": ["knob-d4"]}}
    assert [s["family"] for s in doc["specbench"]["sentinels"]] == ["ar-tp0", "ar-tp1", "ar-tp2"]
    assert [r["family"] for r in doc["specbench"]["drift"]] == ["ar-tp0", "ar-tp1", "ar-tp2"]
