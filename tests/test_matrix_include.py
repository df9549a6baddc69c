"""``include`` as GitHub Actions reads it, where a combination is an engine group (one method at
one TP size): an entry adds its settings to every group it matches; an entry matching none that
names one method and one TP size adds that combination; what a matrix cannot add is refused with
the difference named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pytest_specbench.matrix.schema import MatrixError, parse

DOC: dict[str, Any] = {
    "models": {"t": "embedded:tiny"},
    "methods": {
        "ar": {"backend": "sglang", "model": "t"},
        "ngram": {
            "backend": "sglang",
            "model": "t",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": [2, 4]},
        },
    },
    "tp": [1, 4],
    "workloads": {
        "long": {
            "kind": "long_context",
            "context_tokens": [3000, 30000, 100000],
            "concurrency": [1, 8],
            "output_tokens": [256],
        }
    },
}
BASE_CELLS = 3 * 2 * 3 * 2  # ar, ngram-d2, ngram-d4 x TP1/TP4 x 3 contexts x 2 concurrencies = 36


def doc(**top: Any) -> dict[str, Any]:
    d = copy.deepcopy(DOC)
    d.update(top)
    return d


def test_an_entry_naming_a_method_at_a_tp_it_does_not_run_adds_that_group() -> None:
    assert len(parse(doc(), "m.yaml").cells()) == BASE_CELLS
    m = parse(
        doc(
            include=[
                {"tp": [1, 4], "engine_args": {"mem_fraction_static": 0.8}},  # attaches to the matrix's own
                {"method": "ngram", "tp": 8, "engine_args": {"mem_fraction_static": 0.9}},  # adds (a sweep)
            ]
        ),
        "m.yaml",
    )
    assert [g.id for g in m.groups()] == [
        "ar-tp1",
        "ar-tp4",
        "ngram-d2-tp1",
        "ngram-d2-tp4",
        "ngram-d2-tp8",
        "ngram-d4-tp1",
        "ngram-d4-tp4",
        "ngram-d4-tp8",
    ]
    # every shape its workload gives it: 2 settings x 3 contexts x 2 concurrencies = 12 more
    assert len(m.cells()) == BASE_CELLS + 12
    args = {g.id: dict(g.method.engine_args) for g in m.groups()}
    assert args["ngram-d2-tp8"] == {"mem_fraction_static": 0.9} == args["ngram-d4-tp8"]
    assert args["ngram-d2-tp4"] == {"mem_fraction_static": 0.8} == args["ar-tp1"]
    assert "long-ngram-d4-tp8-c8-ctx100k-out256" in {c.id for c in m.cells()}


def test_one_setting_of_a_sweep_is_added_alone_and_exclude_still_applies() -> None:
    m = parse(doc(include=[{"method": "ngram-d4", "tp": 8}]), "m.yaml")  # no settings: adds the group
    assert [g.id for g in m.groups() if g.tp == 8] == ["ngram-d4-tp8"]
    assert len(m.cells()) == BASE_CELLS + 6
    # exclude entries remove the added group's cells too: ar's 100k cells at every TP
    top = {"exclude": [{"method": "ar", "context_tokens": 100000}], "include": [{"method": "ar", "tp": 8}]}
    m = parse(doc(**top), "m.yaml")
    ar8 = sorted(c.id for c in m.cells() if c.tp == 8)
    assert ar8 == [
        "long-ar-tp8-c1-ctx30k-out256",
        "long-ar-tp8-c1-ctx3k-out256",
        "long-ar-tp8-c8-ctx30k-out256",
        "long-ar-tp8-c8-ctx3k-out256",
    ]
    assert len(m.cells()) == BASE_CELLS - 4 + 4  # ar's 100k at TP1/TP4 (2 x 2) gone, 4 cells at TP8 added


@pytest.mark.parametrize(
    ("include", "exclude", "message"),
    [
        (
            [{"tp": 8, "env": {"A": "1"}}],
            None,
            "m.yaml: include[0].tp: 8 is not a value of this axis; its values: 1, 4 (an include entry naming "
            "one method and one TP size adds that method at that TP)",
        ),
        (
            [{"method": ["ar", "ngram"], "tp": 8, "env": {"A": "1"}}],
            None,
            "m.yaml: include[0].tp: 8 is not a value of this axis",
        ),
        (
            [{"method": "ar", "tp": 4, "env": {"A": "1"}}],
            [{"method": "ar", "tp": 4}],
            "m.yaml: include[0]: matches only excluded cells (method: ar, tp: 4): in GitHub Actions an "
            "include entry adds an excluded combination back; here exclude has the last word",
        ),
        (
            [{"method": "ar", "tp": 8}, {"method": "ar", "tp": 8, "env": {"A": "1"}}],
            None,
            "m.yaml: include[1]: adds method ar at TP 8 again (include[0] adds it): give all its settings in "
            "that entry",
        ),
        (
            [{"method": "ar", "tp": 8, "concurrency": 4}],
            None,
            "m.yaml: include[0].concurrency: an include entry sets engine_args, env and hooks, which are per "
            "engine group (one method at one TP): match on method and tp only; unlike GitHub Actions, an "
            "include entry does not add workload shapes",
        ),
        (
            [{"method": "ar", "tp": 0}],
            None,
            "m.yaml: include[0].tp: expected a positive integer; got 0",
        ),
        (
            [{"method": "ar", "tpp": 8}],
            None,
            "m.yaml: include[0].tpp: unknown axis (did you mean 'tp'?)",
        ),
        (
            [{"method": "ar", "tp": 1}],
            None,
            "m.yaml: include[0]: sets nothing; give engine_args, env, hooks",
        ),
    ],
)
def test_what_a_matrix_cannot_add_is_refused_naming_the_difference(
    include: list[Any], exclude: list[Any] | None, message: str
) -> None:
    top: dict[str, Any] = {"include": include}
    if exclude:
        top["exclude"] = exclude
    with pytest.raises(MatrixError) as e:
        parse(doc(**top), "m.yaml")
    assert str(e.value).startswith(message), str(e.value)


def test_a_group_with_no_method_at_that_tp_is_named() -> None:
    """Each value exists on its axis (ngram-d4 runs at TP1 only, ar at TP4), but no group has both."""
    d = doc(include=[{"method": ["ngram-d4", "ngram-d2"], "tp": 4, "env": {"A": "1"}}])
    d["methods"]["ngram"]["tp"] = [1]
    d["methods"]["ngram"]["speculative"]["num_draft_tokens"] = [2, 4]
    with pytest.raises(MatrixError) as e:
        parse(d, "m.yaml")
    assert str(e.value) == (
        "m.yaml: include[0]: matches no engine group (method: ngram-d4|ngram-d2, tp: 4): each value exists, "
        "but no method runs at that TP size; GitHub Actions would add a combination of only these keys, and "
        "a cell needs one method at one TP: name one method and one TP size ({method: NAME, tp: N}) to run "
        "that method at that TP too"
    )


QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 40960,
}


def test_the_plan_sizes_each_group_with_the_mem_fraction_its_include_entry_gives(tmp_path: Any) -> None:
    """The engines get mem_fraction_static per TP from include (an added group too): the plan
    budgets each group's GPU memory with that fraction, so weights that do not fit in half of a
    48 GiB GPU at TP1 are refused before any engine starts, and TP2 (its own fraction) runs."""
    import json

    from pytest_specbench.planning import plan

    GiB = 1 << 30
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(QWEN3_8B))
    d = {
        "models": {"m": {"path": str(tmp_path / "model"), "load_format": "dummy"}},
        "methods": {"ar": {"backend": "sglang", "model": "m"}},
        "tp": [1, 2],
        "workloads": {"throughput": {"concurrency": [1], "output_tokens": [64]}},
        "include": [
            {"tp": 1, "engine_args": {"mem_fraction_static": 0.3}},
            {"tp": 2, "engine_args": {"mem_fraction_static": 0.85}},
            {"method": "ar", "tp": 4, "engine_args": {"mem_fraction_static": 0.6}},
        ],
    }
    m = parse(d, str(tmp_path / "m.yaml"))
    p = plan.make_plan(m.cells(), plan.GPUBudget(48 * GiB, 1e12))
    g1, g2, g4 = p.groups["ar-tp1"], p.groups["ar-tp2"], p.groups["ar-tp4"]
    assert (g1.mem_fraction_static, g2.mem_fraction_static, g4.mem_fraction_static) == (0.3, 0.85, 0.6)
    assert abs(g1.budget_bytes_per_gpu - 48 * GiB * 0.3) < 1
    # Qwen3-8B's bf16 weights (about 15.3 GiB) do not fit in 0.3 x 48 GiB = 14.4 GiB at TP1
    assert g1.error is not None and "14.4 GiB available (48.0 GiB x mem_fraction_static 0.3)" in g1.error
    cells = {c.tp: c for c in m.cells()}
    assert not p.cells[cells[1].id].feasible
    assert p.cells[cells[2].id].feasible and p.cells[cells[4].id].feasible
    assert g2.error is None and g4.error is None


HF_DOC: dict[str, Any] = {
    "models": {"t": "embedded:tiny"},
    "methods": {
        "ar": {"backend": "hf", "model": "t"},
        "ngram": {
            "backend": "hf",
            "model": "t",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": 4},
        },
    },
    "workloads": {"throughput": {"concurrency": [1], "output_tokens": [8]}},
    "include": [{"method": "ngram", "tp": 2}],
}
HF_REFUSED = (
    "m.yaml: include[0]: adds method ngram at TP 2, but its backend 'hf' runs at most TP=1 (it runs at TP "
    "1 already): remove the entry, or give the method a multi-GPU backend such as sglang"
)


def test_an_entry_adding_a_tp_its_backend_cannot_run_is_refused_at_load() -> None:
    """The hf backend runs at most TP=1 (the engines' registry, which the plugin hands the loader):
    an include entry adding ngram at TP 2 is refused naming the entry, the backend and its limit,
    not skipped at run time; without the limits (names only) the loader cannot tell."""
    with pytest.raises(MatrixError) as e:
        parse(copy.deepcopy(HF_DOC), "m.yaml", {"hf": 1, "sglang": None})
    assert str(e.value) == HF_REFUSED
    ok = parse(copy.deepcopy(HF_DOC), "m.yaml", ("hf", "sglang"))
    assert [g.id for g in ok.groups()] == ["ar-tp1", "ngram-tp1", "ngram-tp2"]
    # within the limit (sglang: any TP) the entry adds the group
    d = doc(include=[{"method": "ar", "tp": 8}])
    assert "ar-tp8" in [g.id for g in parse(d, "m.yaml", {"hf": 1, "sglang": None}).groups()]


def test_the_plugin_refuses_such_an_include_before_any_engine_starts(pytester: pytest.Pytester) -> None:
    """End to end: the plugin loads the matrix with the registry's TP limits, so the run stops
    with a usage error naming the entry (exit 4), nothing collected or started."""
    import yaml

    (pytester.path / "m.yaml").write_text(yaml.safe_dump(HF_DOC))
    pytester.makepyfile(test_b="def test_throughput(engine, cell, specbench):\n    pass")
    res = pytester.runpytest("--specbench-matrix", "m.yaml", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    assert f"ERROR: {HF_REFUSED}" in res.stderr.lines, res.stderr.str()
