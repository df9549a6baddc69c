"""Matrix parsing: ids, expansion, validation messages."""

from __future__ import annotations

import pytest

from pytest_specbench.matrix.cells import fmt_tokens
from pytest_specbench.matrix.schema import MatrixError, load, parse

DOC = {
    "models": {"t": "embedded:tiny", "d": {"path": "embedded:tiny-draft"}},
    "methods": {
        "ar": {"backend": "hf", "model": "t"},
        "sa": {
            "backend": "sglang",
            "model": "t",
            "tp": [1, 4],
            "speculative": {"algorithm": "standalone", "draft_model": "t", "num_steps": 3},
            "engine_args": {"mem_fraction_static": 0.8},
        },
    },
    "tp": [1],
    "workloads": {
        "throughput": {"concurrency": [1, 32], "output_tokens": [256]},
        "long": {"kind": "throughput", "context_tokens": [3000, 100000], "output_tokens": [64]},
    },
}


def test_ids_groups_and_params() -> None:
    m = parse(DOC, "m.yaml")
    assert [g.id for g in m.groups()] == ["ar-tp1", "sa-tp1", "sa-tp4"]
    ids = [c.id for c in m.cells("throughput")]
    assert "throughput-ar-tp1-c32-out256" in ids  # two workloads of one kind: prefixed
    assert "long-sa-tp4-c1-ctx100k-out64" in ids
    c = next(c for c in m.cells() if c.id == "long-sa-tp4-c1-ctx100k-out64")
    assert c.params() == {
        "method": "sa",
        "tp": 4,
        "workload": "long",
        "concurrency": 1,
        "context_tokens": 100000,
        "output_tokens": 64,
    }
    assert m.method("sa").speculative.expected_oracle_accept == 4
    assert dict(m.method("sa").engine_args) == {"mem_fraction_static": 0.8}
    hash(c)  # frozen all the way down


def test_baselines_share_the_target_model() -> None:
    import copy

    doc = copy.deepcopy(DOC)
    doc["models"]["h"] = "embedded:tiny-draft"
    doc["methods"]["h-ar"] = {"backend": "hf", "model": "h"}
    doc["methods"]["h-ngram"] = {"backend": "hf", "model": "h", "speculative": {"algorithm": "ngram"}}
    doc["methods"]["lone"] = {"backend": "hf", "model": "d", "speculative": {"algorithm": "ngram"}}
    assert parse(doc, "m.yaml").baselines() == {
        "ar": "ar",
        "sa": "ar",
        "h-ar": "h-ar",
        "h-ngram": "h-ar",
        "lone": None,  # no AR method on its model: no speedup rather than one against another model
    }


def test_fmt_tokens() -> None:
    assert [fmt_tokens(n) for n in (256, 3000, 30000, 100000, 1024)] == ["256", "3k", "30k", "100k", "1024"]


def test_waves_set_requests_per_round_from_concurrency() -> None:
    import copy

    doc = copy.deepcopy(DOC)
    doc["workloads"]["throughput"]["waves"] = 1
    w = next(w for w in parse(doc, "m.yaml").workloads if w.name == "throughput")
    assert [w.requests_per_round(c) for c in (1, 32)] == [1, 32]
    assert parse(DOC, "m.yaml").workloads[0].requests_per_round(32) == 128  # default: 4 waves of 32
    doc["workloads"]["throughput"]["requests"] = 8
    with pytest.raises(MatrixError, match=r"m.yaml: workloads.throughput.waves: give requests .* not both"):
        parse(doc, "m.yaml")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("methods", "ar", "speculative"),
            {"algorithm": "draft"},
            "m.yaml: methods.ar.speculative.draft_model: algorithm 'draft' needs a draft_model",
        ),
        (("methods", "ar", "tp"), [2, 2], "m.yaml: methods.ar.tp: duplicate values in [2, 2]"),
        (
            ("workloads", "throughput", "kind"),
            "soak",
            "m.yaml: workloads.throughput.kind: 'soak' is not allowed; allowed: throughput, ttft",
        ),
        (
            ("workloads", "throughput", "warmup"),
            -1,
            "m.yaml: workloads.throughput.warmup: expected an integer >= 0",
        ),
        (
            ("workloads", "throughput", "methods"),
            ["zz"],
            "m.yaml: workloads.throughput.methods[0]: 'zz' is not",
        ),
        (
            ("models", "t"),
            {"path": "x", "load_format": "gguf"},
            "m.yaml: models.t.load_format: 'gguf' is not allowed; allowed: auto, dummy",
        ),
    ],
)
def test_validation_names_file_key_and_allowed(path, value, message) -> None:
    import copy

    doc = copy.deepcopy(DOC)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(MatrixError) as e:
        parse(doc, "m.yaml")
    assert message in str(e.value)


def test_load_reports_yaml_syntax(tmp_path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("models: [\n")
    with pytest.raises(MatrixError, match="bad.yaml: not valid YAML"):
        load(p)


def test_default_matrix_is_a_tour_and_full_keeps_the_sweep() -> None:
    from pathlib import Path

    root = Path(__file__).parents[1] / "benches"
    m = load(root / "specbench.yaml", ("hf", "sglang"))
    assert {x.name for x in m.methods} == {"ar", "ngram-d4", "draft", "draft-oracle"}
    # every workload kind once, closed and open loop, an SLO; one shape per kind
    kinds = [w.kind for w in m.workloads]
    assert sorted(kinds) == sorted(
        ["throughput", "throughput", "ttft", "long_context", "agentic", "categories", "trace"]
    )
    assert any(w.request_rate for w in m.workloads) and any(w.slo for w in m.workloads)
    assert any(w.temperature for w in m.workloads)
    cells = m.cells()
    assert len(cells) == 19
    # the comparison that separates (draft) and the one that does not (draft-oracle), at c4, T = 1
    assert {c.id for c in cells if c.id.startswith("throughput-")} == {
        "throughput-ar-tp1-c4-out32-t1",
        "throughput-draft-tp1-c4-out32-t1",
        "throughput-draft-oracle-tp1-c4-out32-t1",
    }
    full = load(root / "full.yaml", ("hf", "sglang"))
    assert {x.name for x in full.methods} == {"ar", "ngram-d2", "ngram-d4", "draft", "draft-oracle"}
    assert set(kinds) == {w.kind for w in full.workloads}
    assert any(w.temperature for w in full.workloads)
    assert {3000, 10000, 30000, 100000} <= {c.context_tokens for c in full.cells("long_context")}
    assert {1, 4} <= {c.concurrency for c in full.cells("throughput")}
    assert len({dict(c.extra).get("category") for c in full.cells("categories")}) == 7


def test_slo_key_is_checked_and_enters_the_fingerprint() -> None:
    base = {"concurrency": [1], "output_tokens": [16]}
    plain = parse(
        {**DOC, "methods": {"ar": DOC["methods"]["ar"]}, "workloads": {"throughput": base}}, "t.yaml"
    ).cells()[0]
    with_slo = parse(
        {
            **DOC,
            "methods": {"ar": DOC["methods"]["ar"]},
            "workloads": {"throughput": {**base, "slo": {"e2e_s": 2}}},
        },
        "t.yaml",
    ).cells()[0]
    assert with_slo.workload.slo == (("e2e_s", 2.0),)
    assert with_slo.id == plain.id and with_slo.fingerprint() != plain.fingerprint()
    streamed = {**base, "options": {"stream": True}, "slo": {"ttft_ms": 200, "tpot_ms": 50}}
    assert parse(
        {**DOC, "methods": {"ar": DOC["methods"]["ar"]}, "workloads": {"throughput": streamed}}, "t.yaml"
    ).workloads[0].slo == (
        ("tpot_ms", 50.0),
        ("ttft_ms", 200.0),
    )
    for slo, message in (
        ({"ttft_ms": 200}, "workloads.throughput.slo.ttft_ms: needs streamed requests"),
        ({"p99": 1}, "workloads.throughput.slo.p99: unknown key; allowed: ttft_ms, tpot_ms, e2e_s"),
        ({"e2e_s": 0}, "workloads.throughput.slo.e2e_s: expected a number > 0 (a finite number); got 0"),
        ({}, "workloads.throughput.slo: expected at least one of ttft_ms, tpot_ms, e2e_s"),
    ):
        with pytest.raises(MatrixError) as e:
            parse(
                {
                    **DOC,
                    "methods": {"ar": DOC["methods"]["ar"]},
                    "workloads": {"throughput": {**base, "slo": slo}},
                },
                "t.yaml",
            )
        assert message in str(e.value)
