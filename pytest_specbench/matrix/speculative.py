"""What a speculative method is: its algorithm and knobs (Speculative), and the settings SGLang
would refuse as written (checked before any engine starts). What each algorithm takes and does is
its declaration (algorithms.py); SPEC_ALGORITHMS, ALGORITHM_KEYS and FORCED_ACCEPT_ALGORITHMS are
read from the registry. The matrix's methods (cells.py) hold one. No pytest, no I/O, no heavy
imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import algorithms


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
        STANDALONE), a tree commits at most num_steps + 1, DFLASH a block (the algorithm's
        declaration: Algorithm.tokens_per_step)."""
        a = algorithms.algorithm(self.algorithm)
        return a.tokens_per_step(self, engine) if a is not None and a.tokens_per_step else None

    @property
    def expected_oracle_accept(self) -> int | None:
        """Accept length when the draft equals the target (every draft accepted)."""
        a = algorithms.algorithm(self.algorithm)
        return a.oracle_accept(self) if a is not None and a.oracle_accept else None


def __getattr__(name: str) -> Any:
    """The registry's current view under the names this module always had: SPEC_ALGORITHMS (the
    algorithms the matrix checks), ALGORITHM_KEYS (which knobs each takes; others are refused:
    the engine would ignore them) and FORCED_ACCEPT_ALGORITHMS (those whose engines honour a
    forced accept length)."""
    if name == "SPEC_ALGORITHMS":
        return algorithms.names()
    if name == "ALGORITHM_KEYS":
        return {n: a.knobs for n, a in algorithms.ALGORITHMS.items() if a.checked and a.knobs is not None}
    if name == "FORCED_ACCEPT_ALGORITHMS":
        return tuple(n for n in algorithms.names() if algorithms.ALGORITHMS[n].forced_accept)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def refused_setting(algorithm: str, s: dict[str, Any]) -> str | None:
    """Why SGLang 0.5.17 would not run a speculative setting as written (checked before any start)."""
    a = algorithms.algorithm(algorithm)
    return a.refuse(s) if a is not None and a.refuse is not None else None
