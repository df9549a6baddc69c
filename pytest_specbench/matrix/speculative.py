"""What a speculative method is: its algorithm and knobs (Speculative), which knobs each algorithm
takes, which algorithms honour a forced accept length, and the settings SGLang would refuse as
written (checked before any engine starts). The matrix's methods (cells.py) hold one. No pytest,
no I/O, no heavy imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SPEC_ALGORITHMS = ("ngram", "draft", "standalone", "eagle", "eagle3", "dflash")


@dataclass(frozen=True)
class Speculative:
    algorithm: str
    draft_model: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    max_ngram: int | None = None
    block_size: int | None = None
    # forced acceptance: the engine accepts this many tokens per verify step whatever the draft
    # (SGLang's SGLANG_SIMULATE_ACC_LEN; the hf engine's verify): a system-cost measurement
    simulate_accept_length: float | None = None
    simulate_accept_method: str | None = None  # SGLANG_SIMULATE_ACC_METHOD (sglang backends)
    # planning only (never sent to an engine): the tokens a verify step is expected to yield
    expect_accept_length: float | None = None

    def max_tokens_per_step(self, engine: str) -> int | None:
        """The most tokens one verify step can commit as configured (None: not known here).
        ``engine`` "hf": num_draft_tokens drafts plus the target's own token; "sglang": its
        num_draft_tokens counts the verified root too (NGRAM, and draft, which runs as
        STANDALONE), a tree commits at most num_steps + 1, DFLASH a block."""
        n, steps = self.num_draft_tokens, self.num_steps
        if engine == "hf":
            return n + 1 if self.algorithm in ("draft", "ngram") and n else None
        if self.algorithm in ("draft", "ngram") and n:
            return n
        if self.algorithm in ("standalone", "eagle", "eagle3") and (steps or n):
            return min(x for x in ((steps + 1) if steps else None, n) if x)
        if self.algorithm == "dflash" and self.block_size:
            return self.block_size
        return None

    @property
    def expected_oracle_accept(self) -> int | None:
        """Accept length when the draft equals the target (every draft accepted)."""
        if self.algorithm == "draft" and self.num_draft_tokens:
            return self.num_draft_tokens + 1
        if self.algorithm == "standalone" and self.num_steps:
            return self.num_steps + 1
        return None


# which knobs each algorithm takes (others are refused: the engine would ignore them)
ALGORITHM_KEYS = {
    "ngram": ("num_draft_tokens", "max_ngram"),
    "draft": ("num_draft_tokens",),
    "standalone": ("num_steps", "topk", "num_draft_tokens"),
    "eagle": ("num_steps", "topk", "num_draft_tokens"),
    "eagle3": ("num_steps", "topk", "num_draft_tokens"),
    "dflash": ("num_steps", "topk", "num_draft_tokens", "block_size"),
}
# algorithms whose engines honour a forced accept length. SGLang 0.5.17 reads SGLANG_SIMULATE_ACC_LEN
# once per process (srt/speculative/spec_utils.py) and applies it in eagle_utils.eagle_sample, the
# verify of EAGLE, EAGLE3, MTP, STANDALONE (EAGLEWorkerV2) and NGRAM (ngram_worker.py calls it),
# and in DFLASH's and DSPARK's own verify; the hf engine's verify forces it for draft and ngram
FORCED_ACCEPT_ALGORITHMS = SPEC_ALGORITHMS


def refused_setting(algorithm: str, s: dict[str, Any]) -> str | None:
    """Why SGLang 0.5.17 would not run a speculative setting as written (checked before any start)."""
    steps, topk, draft = s.get("num_steps"), s.get("topk"), s.get("num_draft_tokens")
    if algorithm == "dflash" and ((steps or 1) != 1 or (topk or 1) != 1):
        return "DFLASH drafts one block per step: sglang forces num_steps 1 and topk 1"
    if algorithm in ("standalone", "eagle", "eagle3") and steps is not None and draft is not None:
        if (topk or 1) == 1 and draft != steps + 1:
            return (
                f"with topk 1 the draft is a chain: sglang sets num_draft_tokens to num_steps + 1 "
                f"({steps + 1}), not {draft}; leave num_draft_tokens out or give {steps + 1}"
            )
        if topk and draft > topk * steps + 1:
            return (
                f"num_draft_tokens {draft} exceeds the tree's topk x num_steps + 1 = {topk * steps + 1} nodes"
            )
    return None
