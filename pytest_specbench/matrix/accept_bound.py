"""How many tokens one verify step of a speculative setting can commit, and the check that its
``expect_accept_length`` (the planner's assumed acceptance) does not exceed that: an ETA planned
on an acceptance the setting cannot reach is low by up to the ratio."""

from __future__ import annotations

from .algorithms import HF_DEFAULT_DRAFT_TOKENS, algorithm
from .cells import Method
from .checks import Ctx


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


def commit_bound(method: Method) -> tuple[int, str] | None:
    """(the most tokens one verify step of ``method`` can commit, why), or None where that is not
    known before the engine starts (SGLang chooses an EAGLE draft's steps by the model; an
    algorithm whose declaration, algorithms.py, has no accept_bound). A verify step commits the
    draft tokens it accepts plus one."""
    s = method.speculative
    if s is None:
        return None
    a = algorithm(s.algorithm)
    if method.backend == "hf":  # the hf engine drafts num_draft_tokens, the target adds its own
        if a is None or a.hf is None:
            return None
        k, src = (
            (s.num_draft_tokens, "num_draft_tokens")
            if s.num_draft_tokens
            else (HF_DEFAULT_DRAFT_TOKENS, "the hf engine's default")
        )
        return k + 1, f"the hf engine verifies {k} draft tokens ({src}) plus the target's own token"
    return a.accept_bound(method) if a is not None and a.accept_bound is not None else None
