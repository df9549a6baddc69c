"""x- keys are the matrix file's own (anchors, notes): ignored at every level, not only the top."""

from __future__ import annotations

from pathlib import Path

from pytest_specbench.matrix.cells import thaw
from pytest_specbench.matrix.checks import without_x_keys
from pytest_specbench.matrix.schema import load

ANCHORS = """
models:
  x-paths: &tiny embedded:tiny
  t: *tiny
  x-draft: {path: embedded:tiny-draft}
methods:
  x-sglang: &sglang
    backend: sglang
    model: t
    x-note: merged into every method below, ignored there too
  ar:
    <<: *sglang
  ngram:
    <<: *sglang
    x-why: a note beside the keys
    speculative: {algorithm: ngram, num_draft_tokens: 8, x-tried: [4, 16]}
    engine_args: {mem_fraction_static: 0.8, x-old: {mem_fraction_static: 0.9}}
    env: {SGLANG_ENABLE_SPEC_V2: "1", x-off: "0"}
workloads:
  x-shape: &shape {concurrency: [1, 4], output_tokens: [64]}
  throughput:
    <<: *shape
    x-comment: two concurrencies
include:
  - {tp: 1, engine_args: {cuda_graph_max_bs_decode: 8}, x-why: small batches}
"""


def test_x_keys_under_methods_models_and_workloads_are_ignored(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(ANCHORS)
    m = load(p)
    assert [x.name for x in m.methods] == ["ar", "ngram"]  # no method x-sglang runs
    assert [x.name for x in m.models] == ["t"]
    assert [w.name for w in m.workloads] == ["throughput"]
    assert m.workloads[0].concurrency == (1, 4)
    ngram = m.methods[1]
    assert ngram.speculative is not None and ngram.speculative.num_draft_tokens == 8
    assert thaw(ngram.engine_args) == {"mem_fraction_static": 0.8}
    assert dict(ngram.env) == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert {c.method.name for c in m.cells()} == {"ar", "ngram"}
    assert len(m.cells()) == 4
    assert all("x-" not in str(c.method.engine_args) for c in m.cells())


def test_without_x_keys_keeps_the_rest_and_shared_or_recursive_values() -> None:
    shared = {"a": 1, "x-b": 2}
    loop: list = []
    loop.append(loop)
    out = without_x_keys({"p": shared, "q": shared, "x-r": 3, "s": [{"x-t": 1, "u": 2}], "v": loop, 5: 6})
    assert out == {"p": {"a": 1}, "q": {"a": 1}, "s": [{"u": 2}], "v": out["v"], 5: 6}
    assert out["p"] is out["q"] and out["v"][0] is out["v"]
    assert shared == {"a": 1, "x-b": 2}  # the loaded document is not changed
