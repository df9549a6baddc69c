"""expect_accept_length is bounded by what one verify step of the setting can commit: above it the
matrix is refused with the key, the value, the maximum and why (the plan's ETAs would be low)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.matrix.checks import MatrixError
from pytest_specbench.matrix.schema import parse

ROOT = Path(__file__).resolve().parents[1]
Q27 = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-hybrid")
DFLASH = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-dflash")  # config block_size 16


def _doc(method: dict[str, Any], draft: str = DFLASH) -> dict[str, Any]:
    return {
        "models": {"t": {"path": Q27, "load_format": "dummy"}, "d": {"path": draft, "load_format": "dummy"}},
        "methods": {"m": {"backend": "sglang", "model": "t", **method}},
        "workloads": {"throughput": {"concurrency": [1], "output_tokens": [64]}},
    }


def _spec(algorithm: str, expect: float, **knobs: Any) -> dict[str, Any]:
    draft = {"draft_model": "d"} if algorithm in ("dflash", "ddtree", "dspark", "eagle3", "draft") else {}
    return {"speculative": {"algorithm": algorithm, **draft, **knobs, "expect_accept_length": expect}}


TOO_HIGH = [
    # a chain: num_steps + 1, or the verified tokens given
    (_spec("eagle3", 4.5, num_steps=3), "4.5", 4, "3 draft steps (num_steps)"),
    (_spec("eagle3", 3.5, num_steps=4, topk=4, num_draft_tokens=3), "3.5", 3, "3 verified tokens"),
    (
        {**_spec("eagle3", 3.5), "engine_args": {"speculative_num_steps": 2}},
        "3.5",
        3,
        "2 draft steps (engine_args.speculative_num_steps)",
    ),
    # DFLASH: its block, from block_size, num_draft_tokens, engine_args or the draft's config.json
    (_spec("dflash", 9, block_size=8), "9", 8, "one block of 8 (block_size)"),
    (_spec("dflash", 9, num_draft_tokens=8), "9", 8, "one block of 8 (num_draft_tokens)"),
    (
        {**_spec("dflash", 9), "engine_args": {"speculative_dflash_block_size": 8}},
        "9",
        8,
        "one block of 8 (engine_args.speculative_dflash_block_size)",
    ),
    (_spec("dflash", 17), "17", 16, "one block of 16 (the draft's config.json)"),
    # NGRAM: its verified tokens, the last committed one among them; SGLang's default 12
    (_spec("ngram", 5, num_draft_tokens=4), "5", 4, "NGRAM verifies 4 tokens a step (num_draft_tokens)"),
    (_spec("ngram", 12.5), "12.5", 12, "NGRAM verifies 12 tokens a step (SGLang's default)"),
    # DDTREE: a tree of budget + 1 nodes over the block; DSPARK: gamma + 1
    (
        {**_spec("ddtree", 5.5), "engine_args": {"speculative_ddtree_budget": 4}},
        "5.5",
        5,
        "a tree of 5 nodes (speculative_ddtree_budget 4)",
    ),
    (_spec("dspark", 8.5, block_size=7), "8.5", 8, "DSPARK drafts gamma 7 tokens (block_size)"),
]


@pytest.mark.parametrize(("method", "value", "most", "why"), TOO_HIGH)
def test_an_expected_accept_length_above_what_the_setting_commits_is_refused(
    method: dict[str, Any], value: str, most: int, why: str
) -> None:
    with pytest.raises(MatrixError) as e:
        parse(_doc(method), "m.yaml")
    msg = str(e.value)
    assert msg.startswith("m.yaml: methods.m.speculative.expect_accept_length: "), msg
    assert f"{value} tokens per verify step cannot be expected" in msg, msg
    assert f"this setting commits at most {most}: " in msg and why in msg, msg


def test_the_hf_engine_commits_its_draft_tokens_plus_one() -> None:
    for spec, most in (({"num_draft_tokens": 3}, 4), ({}, 5)):  # the hf engine drafts 4 by default
        m = {"backend": "hf", **_spec("draft", most + 0.5, **spec)}
        with pytest.raises(MatrixError, match=rf"commits at most {most}: the hf engine verifies"):
            parse(_doc(m), "m.yaml")
        m["speculative"]["expect_accept_length"] = most
        assert parse(_doc(m), "m.yaml").methods[0].speculative.expect_accept_length == most


def test_a_sweep_names_the_setting_that_cannot_reach_it() -> None:
    m = {**_spec("ddtree", 5.5), "engine_args": {"speculative_ddtree_budget": [64, 4]}}
    with pytest.raises(
        MatrixError, match=r"5.5 tokens per verify step cannot be expected of the setting m-ddtree-budget-4: "
    ):
        parse(_doc(m), "m.yaml")
    m["engine_args"] = {"speculative_ddtree_budget": [64, 8]}  # 9 and 16 (the block) both reach 5.5
    assert len(parse(_doc(m), "m.yaml").methods) == 2


@pytest.mark.parametrize(
    ("method", "draft"),
    [
        (_spec("dflash", 16), DFLASH),  # exactly the block
        (_spec("eagle3", 4, num_steps=3), DFLASH),
        (_spec("ngram", 12), DFLASH),
        (_spec("eagle3", 9), DFLASH),  # SGLang chooses the steps by the model: not known here
        (_spec("dflash", 30), "org/a-hub-draft"),  # the draft's config is not read from the hub
        (_spec("pld", 30), DFLASH),  # an algorithm without rules here
    ],
)
def test_what_the_setting_can_commit_or_an_unknown_bound_is_accepted(
    method: dict[str, Any], draft: str
) -> None:
    m = parse(_doc(method, draft), "m.yaml")
    assert m.methods[0].speculative is not None and m.methods[0].speculative.expect_accept_length is not None
