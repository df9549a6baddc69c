"""The matrix's exclude:/include: lists, YAML merge keys, x- keys and "did you mean"."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pytest_specbench.matrix.schema import MatrixError, load, parse

DOC = {
    "models": {"t": "embedded:tiny"},
    "methods": {
        "ar": {"backend": "sglang", "model": "t", "engine_args": {"chunked_prefill_size": 4096}},
        "ngram": {
            "backend": "sglang",
            "model": "t",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": [2, 4]},
        },
    },
    "tp": [1, 4, 8],
    "workloads": {
        "long": {
            "kind": "long_context",
            "context_tokens": [3000, 30000, 100000],
            "concurrency": [1, 8],
            "output_tokens": [256],
        }
    },
}


def doc(**top: object) -> dict:
    d = copy.deepcopy(DOC)
    d.update(top)
    return d


def test_exclude_counts_by_hand() -> None:
    assert len(parse(doc(), "m.yaml").cells()) == 3 * 3 * 3 * 2  # methods x TP x contexts x concurrency = 54
    m = parse(
        doc(
            exclude=[
                {"tp": 1, "context_tokens": 100000},  # 3 methods x 2 concurrency: -6 -> 48
                {"method": "ngram-d4", "tp": [4, 8]},  # 2 TP x 3 contexts x 2 concurrency: -12 -> 36
                # a sweep's name stands for every setting: ngram-d2 at c8 on tp1 (3k, 30k), tp4 (3),
                # tp8 (3) = 8, ngram-d4 at c8 on tp1 (3k, 30k) = 2 (its TP4/8 are gone): -10 -> 26
                {"method": "ngram", "concurrency": 8},
            ]
        ),
        "m.yaml",
    )
    cells = m.cells()
    assert len(cells) == 26
    assert not any(c.tp == 1 and c.context_tokens == 100000 for c in cells)
    assert not any(c.method.sweep == "ngram" and c.concurrency == 8 for c in cells)
    # ngram-d4 at TP4 and TP8 is excluded whole: those engine groups are gone
    assert [g.id for g in m.groups()] == [
        "ar-tp1",
        "ar-tp4",
        "ar-tp8",
        "ngram-d2-tp1",
        "ngram-d2-tp4",
        "ngram-d2-tp8",
        "ngram-d4-tp1",
    ]
    assert "long-ar-tp4-c8-ctx100k-out256" in {c.id for c in cells}


def test_include_sets_per_tp_engine_args_without_renaming() -> None:
    m = parse(
        doc(
            include=[
                {"tp": 1, "engine_args": {"mem_fraction_static": 0.80, "context_length": 32768}},
                {"tp": [4, 8], "engine_args": {"mem_fraction_static": 0.85, "context_length": 131072}},
                {"method": "ngram", "tp": 8, "env": {"SGLANG_ENABLE_SPEC_V2": 1}},  # later entries add
            ]
        ),
        "m.yaml",
    )
    args = {g.id: dict(g.method.engine_args) for g in m.groups()}
    assert args["ar-tp1"] == {
        "chunked_prefill_size": 4096,
        "mem_fraction_static": 0.80,
        "context_length": 32768,
    }
    assert args["ar-tp8"] == {
        "chunked_prefill_size": 4096,
        "mem_fraction_static": 0.85,
        "context_length": 131072,
    }
    assert args["ngram-d4-tp4"] == {"mem_fraction_static": 0.85, "context_length": 131072}
    env = {g.id: dict(g.method.env) for g in m.groups()}
    assert (
        env["ngram-d2-tp8"] == {"SGLANG_ENABLE_SPEC_V2": "1"} and env["ngram-d2-tp4"] == {} == env["ar-tp8"]
    )
    # names and ids unchanged: the TP view lines the method up across TP sizes
    assert {g.method.name for g in m.groups()} == {"ar", "ngram-d2", "ngram-d4"}
    assert len(m.cells()) == 54
    a1, a4 = (next(c for c in m.cells() if c.id == f"long-ar-tp{t}-c1-ctx3k-out256") for t in (1, 4))
    assert dict(a1.method.engine_args)["mem_fraction_static"] == 0.80  # the cell's engine has it
    assert a1.fingerprint() != parse(doc(), "m.yaml").cells()[0].fingerprint()  # measured with it
    assert m.group("ar", 4).method == a4.method


@pytest.mark.parametrize(
    ("top", "message"),
    [
        (
            {"exclude": [{"tp": 1}, {"concurency": 8}]},
            "m.yaml: exclude[1].concurency: unknown axis (did you mean 'concurrency'?); axes: method, tp, "
            "workload, concurrency, context_tokens, output_tokens, request_rate",
        ),
        (
            {"exclude": [{"concurrency": 4}]},
            "m.yaml: exclude[0].concurrency: 4 is not a value of this axis; its values: 1, 8",
        ),
        (
            {"exclude": [{"method": "ngarm"}]},
            "m.yaml: exclude[0].method: 'ngarm' is not a value of this axis (did you mean 'ngram'?); "
            "its values: ar, ngram, ngram-d2, ngram-d4",
        ),
        (
            {"exclude": [{"tp": 1, "scenario": "etl"}]},
            "m.yaml: exclude[0].scenario: 'etl' is not a value of this axis; its values: ",
        ),
        (
            {
                "exclude": [
                    {"tp": 1, "output_tokens": 256},
                    {"tp": 1, "context_tokens": 100000, "concurrency": [1, 8]},
                ]
            },
            "",  # overlapping entries are fine: each matches cells of the full matrix
        ),
        (
            {"include": [{"tp": 4, "concurrency": 1, "engine_args": {"x": 1}}]},
            "m.yaml: include[0].concurrency: an include entry sets engine_args, env and hooks, which are per "
            "engine group (one method at one TP): match on method and tp only",
        ),
        (
            {"include": [{"tp": 4}]},
            "m.yaml: include[0]: sets nothing; give engine_args, env, hooks",
        ),
        (
            {"include": [{"tp": 4, "engine_arg": {"x": 1}}]},
            "m.yaml: include[0].engine_arg: unknown axis (did you mean 'engine_args'?); axes: method, tp",
        ),
        (
            {
                "exclude": [{"method": "ar", "tp": 8}],
                "include": [{"method": "ar", "tp": 8, "env": {"A": "1"}}],
            },
            "m.yaml: include[0]: matches only excluded cells (method: ar, tp: 8)",
        ),
        (
            {"include": [{"tp": 4, "engine_args": {"mem_fraction_static": [0.8, 0.85]}}]},
            "m.yaml: include[0].engine_args.mem_fraction_static: a list sweeps in a method, not in an",
        ),
    ],
)
def test_exclude_include_errors_name_the_entry(top: dict, message: str) -> None:
    if not message:
        parse(doc(**top), "m.yaml")
        return
    with pytest.raises(MatrixError) as e:
        parse(doc(**top), "m.yaml")
    assert message in str(e.value), str(e.value)


def test_an_exclude_entry_matching_no_cell_is_refused() -> None:
    d = doc(exclude=[{"method": "ar", "workload": "short"}])
    d["workloads"]["short"] = {"kind": "throughput", "concurrency": [1], "methods": ["ngram"]}
    with pytest.raises(MatrixError, match=r"exclude\[0\]: matches no cell \(method: ar, workload: short\)"):
        parse(d, "m.yaml")


def test_include_cannot_change_a_swept_value() -> None:
    d = doc(include=[{"method": "b", "engine_args": {"speculative_ddtree_budget": 8}}])
    d["methods"]["b"] = {
        "backend": "sglang",
        "model": "t",
        "speculative": {"algorithm": "ddtree"},
        "engine_args": {"speculative_ddtree_budget": [8, 64]},
    }
    with pytest.raises(MatrixError, match=r"include\[0\].engine_args.speculative_ddtree_budget: is swept"):
        parse(d, "m.yaml")


MERGED = """
x-sglang: &sglang
  backend: sglang
  model: t
  env: {SGLANG_ENABLE_SPEC_V2: "1"}
x-notes: free text the plugin ignores
models:
  t: embedded:tiny
methods:
  ar:
    <<: *sglang
  ngram:
    <<: *sglang
    env: {SGLANG_ENABLE_SPEC_V2: "0"}   # beside a merge key: overrides the merged value
    speculative: {algorithm: ngram}
workloads:
  throughput: {concurrency: [1, 16]}
"""


def test_merge_keys_and_x_keys_load(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(MERGED)
    m = load(p)
    assert [(x.name, x.backend, dict(x.env)) for x in m.methods] == [
        ("ar", "sglang", {"SGLANG_ENABLE_SPEC_V2": "1"}),
        ("ngram", "sglang", {"SGLANG_ENABLE_SPEC_V2": "0"}),
    ]
    assert len(m.cells()) == 4
    # a key beside the merge key overrides the merged one; a key written twice is still refused
    p.write_text(MERGED.replace("    <<: *sglang\n  ngram:", "    <<: *sglang\n    model: t\n  ngram:"))
    assert load(p).methods[0].model.name == "t"
    twice = "    speculative: {algorithm: ngram}"
    p.write_text(MERGED.replace(twice, f"{twice}\n{twice}"))
    with pytest.raises(MatrixError, match="key 'speculative' is given twice in one mapping"):
        load(p)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("workloads:", "workload:"),
            "m.yaml: (top level).workload: unknown key (did you mean 'workloads'?)",
        ),
        (
            ("  ar:\n", "  ar:\n    engine_arg: {}\n"),
            "m.yaml: methods.ar.engine_arg: unknown key (did you mean 'engine_args'?)",
        ),
        (
            ("{concurrency: [1, 16]}", "{concurency: [1, 16]}"),
            "workloads.throughput.concurency: unknown key (did you mean 'concurrency'?)",
        ),
        (
            ("{algorithm: ngram}", "{algoritm: ngram}"),
            "methods.ngram.speculative.algoritm: unknown key (did you mean 'algorithm'?)",
        ),
        (("x-notes:", "xnotes:"), "m.yaml: (top level).xnotes: unknown key; allowed: models"),
    ],
)
def test_unknown_keys_say_did_you_mean(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(MERGED.replace(*edit))
    with pytest.raises(MatrixError) as e:
        load(p)
    assert message in str(e.value), str(e.value)


def test_compare_tune_and_hooks_are_known_keys() -> None:
    d = doc(compare=[["ngram", "ar"]], hooks={"before_run": "true", "after_run": "echo done"})
    d["methods"]["ngram"]["tune"] = {"at": {"tp": 1}, "keep": 1}
    d["methods"]["ngram"]["hooks"] = {"before_group": "echo up", "after_group": "echo down"}
    m = parse(d, "m.yaml")
    assert m.hooks == (("before_run", "true"), ("after_run", "echo done"))
    assert dict(m.method("ngram-d2").hooks) == {"before_group": "echo up", "after_group": "echo down"}


K_MATRIX = """
models:
  m: /nonexistent/model
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: [3, 8]}}
tp: [1]
workloads:
  throughput: {concurrency: [1, 16], output_tokens: [16], prompt_tokens: 8, rounds: 2}
  throughput_long: {kind: throughput, concurrency: [1], output_tokens: [16], prompt_tokens: 64, rounds: 2}
"""


def _ids(res: pytest.RunResult) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in res.outlines if "::test_throughput[" in line]


def test_k_selects_c1_without_c16(pytester: pytest.Pytester) -> None:
    from fake_engine import CONFTEST

    pytester.makeconftest(CONFTEST)
    (pytester.path / "benches").mkdir()
    (pytester.path / "benches" / "specbench.yaml").write_text(K_MATRIX)
    (pytester.path / "benches" / "test_throughput.py").write_text(
        "def test_throughput(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )

    def k(expr: str) -> list[str]:
        return _ids(pytester.runpytest("benches", "--collect-only", "-q", "-k", expr))

    # substrings: c1 is in c16, ngram in ngram-d3, throughput in every item's test_throughput
    assert k("c1 and ar") == [
        "throughput-ar-tp1-c1-out16",
        "throughput-ar-tp1-c16-out16",
        "throughput_long-ar-tp1-c1-out16",
    ]
    assert k(":c1: and ar") == ["throughput-ar-tp1-c1-out16", "throughput_long-ar-tp1-c1-out16"]
    assert k(":c16:") == [
        "throughput-ar-tp1-c16-out16",
        "throughput-ngram-d3-tp1-c16-out16",
        "throughput-ngram-d8-tp1-c16-out16",
    ]
    assert k(":throughput: and :c1: and :ngram-d3:") == ["throughput-ngram-d3-tp1-c1-out16"]
    assert len(k(":ngram:")) == 6 and k(":ngram:") == k("ngram")  # the sweep's name: every setting
    assert k(":ar: and :throughput_long:") == ["throughput_long-ar-tp1-c1-out16"]


def test_unknown_names_say_did_you_mean() -> None:
    d = doc(baseline="arr")
    with pytest.raises(
        MatrixError, match=r"baseline: 'arr' is not defined under methods: \(did you mean 'ar'\?\)"
    ):
        parse(d, "m.yaml")
    d = doc()
    d["workloads"]["long"]["methods"] = ["ngarm"]
    with pytest.raises(
        MatrixError, match=r"methods\[0\]: 'ngarm' is not defined under methods: \(did you mean 'ngram'"
    ):
        parse(d, "m.yaml")
    d = doc()
    d["models"]["tiny-draft"] = "embedded:tiny-draft"
    d["methods"]["ar"]["model"] = "tiny-drat"
    with pytest.raises(
        MatrixError, match=r"'tiny-drat' is not defined under models: \(did you mean 'tiny-draft'\?\)"
    ):
        parse(d, "m.yaml")
