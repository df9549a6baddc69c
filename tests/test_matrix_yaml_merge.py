"""Merge keys by the YAML merge-key spec on every PyYAML: in ``<<: [*a, *b]`` an earlier map's key
wins over a later one's, keys written in the mapping override merged ones; a key (``<<`` too)
given twice in one mapping is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbench.matrix.schema import MatrixError, load
from pytest_specbench.matrix.yaml_load import DuplicateKeyError, load_matrix_yaml

# keys PyYAML 6.0.4 gets wrong (not interned by Python) next to ones it gets right by chance
DOC = """
a: &a {mem fraction static: 1, y: 1, speculative-num-steps: 1, model: small}
b: &b {mem fraction static: 2, z: 2, speculative-num-steps: 2, model: big, y: 2}
m: {<<: [*a, *b], w: 0}
n: {<<: [*a, *b], model: own}
c: &c {<<: *b, z: 3}
o: {<<: [*c, *a]}
p: {<<: {<<: *a, y: 5}}
"""


def test_merge_sequence_earlier_map_wins_and_own_keys_override() -> None:
    d = load_matrix_yaml(DOC)
    # hand-checked against yaml.org/type/merge.html: earlier maps in the sequence first
    assert d["m"] == {"mem fraction static": 1, "y": 1, "speculative-num-steps": 1, "model": "small",
                      "z": 2, "w": 0}  # fmt: skip
    assert d["n"]["model"] == "own" and d["n"]["mem fraction static"] == 1 and d["n"]["z"] == 2
    # c is b with z overridden; merged before a, so c's keys win, a adds only y
    assert d["o"] == {"mem fraction static": 2, "z": 3, "speculative-num-steps": 2, "model": "big", "y": 2}
    assert d["p"] == {"mem fraction static": 1, "y": 5, "speculative-num-steps": 1, "model": "small"}
    assert d["c"] == {"mem fraction static": 2, "z": 3, "speculative-num-steps": 2, "model": "big", "y": 2}


MATRIX = """
models:
  small: embedded:tiny
  big: embedded:tiny-draft
x-fast: &fast {backend: hf, model: small, env: {SPECBENCH_TEST_KNOB: "fast"}}
x-base: &base {backend: hf, model: big, env: {SPECBENCH_TEST_KNOB: "base"}, tp: [1]}
methods:
  ar: {<<: [*fast, *base]}
  ngram:
    <<: [*base, *fast]
    speculative: {algorithm: ngram, num_draft_tokens: 4}
workloads:
  throughput: {concurrency: [1], output_tokens: [16]}
"""


def test_a_matrix_file_merges_by_the_spec(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(MATRIX)
    m = load(p)
    ar, ngram = m.method("ar"), m.method("ngram")
    assert ar.model.name == "small" and dict(ar.env) == {"SPECBENCH_TEST_KNOB": "fast"}
    assert ngram.model.name == "big" and dict(ngram.env) == {"SPECBENCH_TEST_KNOB": "base"}
    assert ar.tp == (1,) and ngram.tp == (1,)  # only in *base: merged into both


def test_a_key_or_a_merge_key_given_twice_is_refused(tmp_path: Path) -> None:
    twice = r"line 3: the merge key '<<' is given twice.*'<<: \[\*a, \*b\]'"
    with pytest.raises(DuplicateKeyError, match=twice):
        load_matrix_yaml("a: &a {x: 1}\nb: &b {x: 2}\nm: {<<: *a, <<: *b}\n")
    p = tmp_path / "m.yaml"
    p.write_text(MATRIX.replace("  ar: {<<: [*fast, *base]}", "  ar: {<<: [*fast, *base], tp: [1], tp: [2]}"))
    with pytest.raises(MatrixError, match=r"m\.yaml: line 8: key 'tp' is given twice in one mapping"):
        load(p)
    # a key written once beside a merge that also has it is an override, not a repeat
    p.write_text(MATRIX.replace("  ar: {<<: [*fast, *base]}", "  ar: {<<: [*fast, *base], model: big}"))
    assert load(p).method("ar").model.name == "big"


def test_an_anchored_map_with_an_override_merged_then_reused_is_not_a_repeat() -> None:
    """The anchored map is merged into ``first`` and built again as ``second``: its ``source``
    overrides the merged one both times (building ``first`` must not rewrite the anchored map)."""
    doc = """
first:
  <<: &defaults
    <<: &base
      source: staging.orders
    source: production.orders
second: *defaults
third: {<<: [*base, *defaults]}
"""
    d = load_matrix_yaml(doc)
    assert d == {
        "first": {"source": "production.orders"},
        "second": {"source": "production.orders"},
        "third": {"source": "staging.orders"},  # the earlier map of the sequence wins
    }
