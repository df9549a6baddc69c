"""Any algorithm name, any engine argument or variable swept: readable ids that -k selects, a
plan, what reaches the engine, and what differs between groups (FakeArgsEngine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import fake_conftest, write_project

from pytest_specbench.matrix.checks import MatrixError
from pytest_specbench.matrix.schema import parse
from pytest_specbench.report import provenance

HERE = Path(__file__).parent
CONFTEST = fake_conftest("FakeArgsEngine", 'register_backend("fake-args", FakeArgsEngine, gpu=False)')
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-args, model: m}
  ddtree:
    backend: fake-args
    model: m
    speculative: {algorithm: ddtree, draft_model: m, num_steps: 3}
    engine_args: {speculative_ddtree_budget: [32, 64], cuda_graph_max_bs: 8}
    env: {SGLANG_ENABLE_SPEC_V2: ["0", "1"]}
    labels: {speculative_ddtree_budget: b, SGLANG_ENABLE_SPEC_V2: spec-v2-}
workloads:
  throughput: {concurrency: [2], output_tokens: [8], prompt_tokens: 8, rounds: 2, warmup: 0}
"""
IDS = [
    "ddtree-b32-spec-v2-0-tp1-c2-out8",
    "ddtree-b32-spec-v2-1-tp1-c2-out8",
    "ddtree-b64-spec-v2-0-tp1-c2-out8",
    "ddtree-b64-spec-v2-1-tp1-c2-out8",
]


def _project(pytester: pytest.Pytester) -> None:
    write_project(pytester, MATRIX, CONFTEST)


def test_an_unknown_algorithm_swept_over_an_engine_argument_and_a_variable_is_four_groups(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _project(pytester)
    log = tmp_path / "args.jsonl"
    monkeypatch.setenv("FAKE_ARGS_LOG", str(log))
    monkeypatch.delenv("SGLANG_ENABLE_SPEC_V2", raising=False)
    res = pytester.runpytest("benches", "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = sorted(ln.split("[", 1)[1].rstrip("]") for ln in res.stdout.lines if "ddtree" in ln and "[" in ln)
    assert ids == IDS
    plan = pytester.runpytest("benches", "--specbench-plan", "-p", "no:cacheprovider")
    plan.stdout.fnmatch_lines(
        ["*ddtree: the matrix checks no settings of it, SGLang validates them at start; planned as a block*"]
    )
    assert plan.stdout.str().count("run  ddtree-") == 4
    res = pytester.runpytest(
        "benches", "-k", "ar or (b64 and spec-v2-1)", "--benchmark-json=out.json", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(passed=2)
    started = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert started == [
        ["ar-tp1", None, {}, {}],
        [
            "ddtree-b64-spec-v2-1-tp1",
            "ddtree",
            {"cuda_graph_max_bs": 8, "speculative_ddtree_budget": 64},
            {"SGLANG_ENABLE_SPEC_V2": "1"},
        ],
    ]
    doc = json.loads((pytester.path / "out.json").read_text())
    keys, rows = provenance.differences(doc)
    assert keys == [
        "cuda_graph_max_bs",
        "env SGLANG_ENABLE_SPEC_V2",
        "speculative_algorithm",
        "speculative_ddtree_budget",
    ]
    assert rows["ddtree-b64-spec-v2-1-tp1"] == {
        "cuda_graph_max_bs": 8,
        "env SGLANG_ENABLE_SPEC_V2": "1",
        "speculative_algorithm": "DDTREE",
        "speculative_ddtree_budget": 64,
    }
    assert rows["ar-tp1"]["env SGLANG_ENABLE_SPEC_V2"] is None
    res.stdout.fnmatch_lines(["*engine settings that differ between groups (cuda_graph_max_bs, env SGLANG_*"])


def test_sweeps_name_their_settings_and_refuse_what_they_cannot() -> None:
    base = {
        "models": {"m": "embedded:tiny"},
        "workloads": {"throughput": {}},
    }
    m = parse(
        {
            **base,
            "engine_args_unchecked": ["x"],  # not SGLang's: passed unchecked
            "methods": {
                "s": {
                    "backend": "sglang",
                    "model": "m",
                    "engine_args": {"page_size": [1, 16], "cuda_graph_bs_decode": [1, 2, 4], "x": [[3, 4]]},
                    "env": {"SGLANG_ENABLE_SPEC_V2": [0, 1]},
                }
            },
        },
        "m.yaml",
    )
    assert [x.name for x in m.methods] == [
        "s-page-size-1-enable-spec-v2-0",
        "s-page-size-1-enable-spec-v2-1",
        "s-page-size-16-enable-spec-v2-0",
        "s-page-size-16-enable-spec-v2-1",
    ]
    # a list-valued SGLang argument given flat, and any list given nested: one value, not a sweep
    assert dict(m.methods[0].engine_args)["cuda_graph_bs_decode"] == (1, 2, 4)
    assert dict(m.methods[0].engine_args)["x"] == (3, 4)
    assert dict(m.methods[3].env) == {"SGLANG_ENABLE_SPEC_V2": "1"}
    with pytest.raises(
        MatrixError, match=r"methods.ar.labels.page_size: labels a key that is not swept here"
    ):
        parse(
            {**base, "methods": {"ar": {"backend": "sglang", "model": "m", "labels": {"page_size": "p"}}}},
            "m.yaml",
        )
    with pytest.raises(
        MatrixError, match=r"methods.x.speculative.algorithm: 'dd tree' is not an algorithm name"
    ):
        parse(
            {
                **base,
                "methods": {
                    "x": {"backend": "sglang", "model": "m", "speculative": {"algorithm": "dd tree"}}
                },
            },
            "m.yaml",
        )
    with pytest.raises(MatrixError, match=r"methods.ar.engine_args.page_size: duplicate values"):
        parse(
            {
                **base,
                "methods": {"ar": {"backend": "sglang", "model": "m", "engine_args": {"page_size": [1, 1]}}},
            },
            "m.yaml",
        )
    # values that would reach the engine as something else than written, and ids -k cannot select
    for ar, where, why in (
        ({"engine_args": {"page_size": [32, "32"]}}, "engine_args.page_size", "duplicate values"),
        ({"env": {"V": ["0", {"a": 1}]}}, "env.V", r"\{'a': 1\} is not a variable's value"),
        ({"env": {"V": None}}, "env.V", "None is not a variable's value"),
        ({"env": {"V": [True, False]}}, "env.V", r"True is not a variable's value: .*quoted"),
        (
            {"env": {"V": ["0", "1"]}, "labels": {"V": "b b"}},
            "labels",
            "expected .* label \\(letters, digits",
        ),
    ):
        with pytest.raises(MatrixError, match=rf"methods.ar.{where}: {why}"):
            parse({**base, "methods": {"ar": {"backend": "sglang", "model": "m", **ar}}}, "m.yaml")


def test_a_name_close_to_a_known_algorithm_is_planned_with_a_question() -> None:
    from pytest_specbench.matrix.cells import EngineGroup
    from pytest_specbench.planning import plan

    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "x": {"backend": "sglang", "model": "m", "speculative": {"algorithm": "eagel3", "num_steps": 3}}
        },
        "workloads": {"throughput": {}},
    }
    gp = plan.plan_group(EngineGroup(parse(doc, "m.yaml").methods[0], 1), None)
    assert any(n.endswith("; did you mean eagle3?") and "no rules known for eagel3" in n for n in gp.notes)


def test_a_gpu_named_on_the_command_line_plans_without_nvml(pytester: pytest.Pytester) -> None:
    """--specbench-gpu NAME: memory, bandwidth and FLOP/s from the datasheet table, so the plan
    has an ETA for every cell; a name not in the table is a usage error listing the known ones."""
    write_project(pytester, None, CONFTEST)  # the matrix: --specbench-matrix
    seed = str(HERE.parent / "benches" / "examples" / "seed-27b-hybrid.yaml")
    res = pytester.runpytest(
        "benches", "--specbench-matrix", seed, "--specbench-plan", "--specbench-gpu", "B200"
    )
    out = res.stdout.str()
    assert "GPU: B200, 167.6 GiB, 8.00 TB/s (datasheet value for B200" in out
    assert "without an estimate" not in out
    bad = pytester.runpytest(
        "benches", "--specbench-matrix", seed, "--specbench-plan", "--specbench-gpu", "X9"
    )
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["*'X9' is not in the GPU table; known: GH200, B300, B200, H200*RTX PRO 6000*MI300X*"]
    )
