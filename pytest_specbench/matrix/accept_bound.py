"""How many tokens one verify step of a speculative setting can commit, and the check that its
``expect_accept_length`` (the planner's assumed acceptance) does not exceed that: an ETA planned
on an acceptance the setting cannot reach is low by up to the ratio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .cells import Method
from .checks import Ctx

NGRAM_DEFAULT_DRAFT_TOKENS = 12
HF_DEFAULT_DRAFT_TOKENS = 4
DFLASH_DEFAULT_BLOCK = 16
DSPARK_DEFAULT_GAMMA = 7


def check_expected_accept(cx: Ctx, key: str, method: Method, setting: str | None) -> None:
    """Refuse an ``expect_accept_length`` above the most tokens one verify step of the method's
    setting can commit: the plan's ETAs would assume a speed the engine cannot reach."""
    s = method.speculative
    if s is None or s.expect_accept_length is None:
        return
    bound = commit_bound(method)
    if bound is None or s.expect_accept_length <= bound[0]:
        return
    most, why = bound
    of = f" of the setting {setting}" if setting and setting != method.sweep else ""
    raise cx.err(
        f"{key}.speculative.expect_accept_length",
        f"{s.expect_accept_length:g} tokens per verify step cannot be expected{of}: this setting "
        f"commits at most {most}: {why}; give at most {most}",
    )


def _engine_int(method: Method, arg: str) -> int | None:
    v = dict(method.engine_args).get(arg)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _knob(method: Method, field: str, arg: str) -> tuple[int | None, str]:
    """A speculative knob as the engine gets it: engine_args' ``arg`` (passed last, it wins), else
    the speculative block's ``field``."""
    v = _engine_int(method, arg)
    if v is not None:
        return v, f"engine_args.{arg}"
    v = getattr(method.speculative, field)
    return (v, field) if v else (None, "")


def _draft_cfg(method: Method) -> dict[str, Any] | None:
    """The draft's config.json where the draft is a local directory (a hub id: not read here)."""
    if method.draft_model is None:
        return None
    p = Path(method.draft_model.path) / "config.json"
    try:
        cfg = json.loads(p.read_text()) if p.is_file() else None
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def _block(method: Method) -> tuple[int, str] | None:
    """A DFLASH-style draft's block: block_size, num_draft_tokens, the draft's config, else SGLang's
    16 (None: the draft's config cannot be read here)."""
    for field, arg in (("block_size", "speculative_dflash_block_size"), ("num_draft_tokens", "")):
        v, src = _knob(method, field, arg) if arg else (getattr(method.speculative, field), field)
        if v:
            return v, src
    cfg = _draft_cfg(method)
    if cfg is None:
        return None
    v = (cfg.get("dflash_config") or {}).get("block_size") or cfg.get("block_size")
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v, "the draft's config.json"
    return DFLASH_DEFAULT_BLOCK, "SGLang's default"


def commit_bound(method: Method) -> tuple[int, str] | None:
    """(the most tokens one verify step of ``method`` can commit, why), or None where that is not
    known before the engine starts (SGLang chooses an EAGLE draft's steps by the model; an
    algorithm without rules here). A verify step commits the draft tokens it accepts plus one."""
    s = method.speculative
    if s is None:
        return None
    algo = s.algorithm.lower()
    if method.backend == "hf":  # the hf engine drafts num_draft_tokens, the target adds its own
        if algo not in ("ngram", "draft"):
            return None
        k, src = (
            (s.num_draft_tokens, "num_draft_tokens")
            if s.num_draft_tokens
            else (HF_DEFAULT_DRAFT_TOKENS, "the hf engine's default")
        )
        return k + 1, f"the hf engine verifies {k} draft tokens ({src}) plus the target's own token"
    if algo == "ngram":
        n, src = _knob(method, "num_draft_tokens", "speculative_num_draft_tokens")
        if n is None:
            n, src = NGRAM_DEFAULT_DRAFT_TOKENS, "SGLang's default"
        return n, f"NGRAM verifies {n} tokens a step ({src}), the last committed token among them"
    if algo in ("draft", "standalone", "eagle", "eagle3"):
        steps, ssrc = _knob(method, "num_steps", "speculative_num_steps")
        n, nsrc = _knob(method, "num_draft_tokens", "speculative_num_draft_tokens")
        bounds = []
        if steps:
            bounds.append(
                (steps + 1, f"{steps} draft steps ({ssrc}): a chain or tree is that deep, plus one")
            )
        if n:
            bounds.append((n, f"{n} verified tokens ({nsrc}), the last committed token among them"))
        return min(bounds) if bounds else None
    if algo == "dflash":
        b = _block(method)
        return (
            (b[0], f"a DFLASH step verifies one block of {b[0]} ({b[1]}) and commits at most the block")
            if b
            else None
        )
    if algo == "ddtree":
        b = _block(method)
        budget = _engine_int(method, "speculative_ddtree_budget")
        bounds = []
        if b:
            bounds.append((b[0], f"the tree is drafted over a block of {b[0]} ({b[1]}): at most that deep"))
        if budget:
            bounds.append((budget + 1, f"a tree of {budget + 1} nodes (speculative_ddtree_budget {budget})"))
        return min(bounds) if bounds else None
    if algo == "dspark":
        g, src = _knob(method, "block_size", "speculative_dspark_block_size")
        if g is None:
            cfg = _draft_cfg(method)
            if cfg is None:
                return None
            v = cfg.get("block_size")
            g, src = (
                (v, "the draft's config.json")
                if isinstance(v, int) and v > 0
                else (DSPARK_DEFAULT_GAMMA, "SGLang's default")
            )
        return g + 1, f"DSPARK drafts gamma {g} tokens ({src}), verified with one more"
    return None
