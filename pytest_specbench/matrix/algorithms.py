"""One declaration per speculative algorithm (:class:`Algorithm`) and their registry: the knobs it
takes, whether it needs a draft model, the most tokens a verify step commits, its oracle
acceptance and accept bound, SGLang's name for it, how the embedded hf engine drafts for it and
its planning structure (what one step runs). Every layer reads the declaration: the matrix
(speculative.py, accept_bound.py, schema.py), the planner (planning/structure.py, eta.py,
sglang_memory.py, plan.py) and the engines (engines/sglang.py, engines/hf.py, the hf backend's
algorithms). A fork's algorithm (a DDTree, say) is one :func:`register` call, e.g. in a conftest.py.

An algorithm the registry does not hold still runs: its name goes to the engine as given and the
planner sizes it as an EAGLE-like draft of ``num_steps`` steps. No pytest, no I/O at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # cells.py imports speculative.py, which imports this module
    from .cells import Method

Speculative = Any  # a speculative.Speculative (that module reads this one: not imported here)

# what SGLang 0.5.17 and the hf engine use where the matrix gives no value
NGRAM_DEFAULT_DRAFT_TOKENS = 12
HF_DEFAULT_DRAFT_TOKENS = 4
DFLASH_DEFAULT_BLOCK = 16  # SGLang 0.5.17 arg_groups/speculative_hook.py:238-244
DSPARK_DEFAULT_GAMMA = 7  # SGLang 0.5.17 speculative/dspark_components/dspark_config.py:16
EAGLE_KNOBS = ("num_steps", "topk", "num_draft_tokens")


@dataclass(frozen=True)
class StepShape:
    """One speculative step of a method's engine (planning/structure.py)."""

    draft_steps: int  # draft forwards per verify step
    verify_tokens: int  # tokens per request the target verifies (matmuls, KV writes)
    draft_tokens: int  # tokens per request in the draft's first forward (a block drafter's block)
    state_width: int  # draft-token states a hybrid's state pool reserves per running request
    shares_target_head: bool  # the draft uses the target's embedding and LM head
    why: str  # how the verify width was found, for the plan's note


Bound = tuple[int, str]


@dataclass(frozen=True)
class Algorithm:
    """A speculative algorithm as every layer sees it. ``name``: lower case, as the matrix writes
    it; ``aliases``: other names the matrix takes for it (any case), written as ``name``."""

    name: str
    # the speculative: knobs it takes (others are refused: the engine would ignore them); None: any
    knobs: tuple[str, ...] | None = None
    needs_draft: bool = False  # a draft_model is required
    aliases: tuple[str, ...] = ()
    # the matrix checks it: the name is matched in any case and written in lower case, its knobs
    # and draft model are checked, and it is listed among the known algorithms (SPEC_ALGORITHMS).
    # False: a fork's algorithm the plugin only plans for; its name goes to the engine as written
    # and SGLang validates its settings at start
    checked: bool = True
    forced_accept: bool = True  # its engines honour a forced accept length (simulate_accept_length)
    sglang: str | None = None  # SGLang's speculative_algorithm (None: the name in upper case)
    # SGLang pins num_draft_tokens to num_steps + 1 for topk 1 (a chain): the recorded args say so
    chain: bool = False
    hf: str | None = None  # how the embedded hf engine drafts for it: "ngram", "draft"; None: it cannot
    cpu_drafts: bool = False  # drafts on the CPU each step (NGRAM's suffix match: planning/eta.py)
    block_drafter: bool = False  # one draft forward over a block; the target's embedding + LM head
    default_draft_tokens: int | None = None  # SGLang's num_draft_tokens when none is given (else steps + 1)
    # the most tokens one verify step commits as configured (spec, "sglang" | "hf"); None: not known
    tokens_per_step: Callable[[Speculative, str], int | None] | None = None
    # the accept length when the draft equals the target (every draft token accepted)
    oracle_accept: Callable[[Speculative], int | None] | None = None
    # (the most tokens a verify step commits on an SGLang engine, why) from the method's knobs and
    # engine args, before the engine starts (None: not known then); accept_bound.py
    accept_bound: Callable[[Method], Bound | None] | None = None
    # why SGLang would refuse a setting ({knob: value}) as written, or None
    refuse: Callable[[dict[str, Any]], str | None] | None = None
    # the step its SGLang engine runs (method, the draft's config.json); None: EAGLE-like
    step: Callable[[Method, dict[str, Any] | None], StepShape] | None = None


ALGORITHMS: dict[str, Algorithm] = {}  # name and each alias -> its declaration


def register(alg: Algorithm) -> Algorithm:
    """Declare an algorithm (or replace the declaration of its name): the one place a new one is
    added. Returns it."""
    if alg.name != alg.name.lower():
        raise ValueError(f"algorithm name {alg.name!r}: give it in lower case (the matrix writes it so)")
    for n in (alg.name, *(a.lower() for a in alg.aliases)):
        ALGORITHMS[n] = alg
    return alg


def algorithm(name: str | None) -> Algorithm | None:
    """The declaration of an algorithm name in any case (None: none registered)."""
    return ALGORITHMS.get(name.lower()) if name else None


def names(checked: bool = True) -> tuple[str, ...]:
    """The declared algorithms' names in registration order (``checked``: only those the matrix
    checks, SPEC_ALGORITHMS)."""
    return tuple(n for n, a in ALGORITHMS.items() if n == a.name and (a.checked or not checked))


def hf_algorithms() -> tuple[str, ...]:
    """The algorithms the embedded hf engine implements (the hf backend's ``algorithms``)."""
    return tuple(n for n in names(checked=False) if ALGORITHMS[n].hf)


# ------------------------------------------------------------------------------ knobs as the engine gets them


def engine_int(method: Method, arg: str) -> int | None:
    v = dict(method.engine_args).get(arg)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def knob(method: Method, field: str, arg: str) -> tuple[int | None, str]:
    """A speculative knob as the engine gets it: engine_args' ``arg`` (passed last, it wins), else
    the speculative block's ``field``."""
    v = engine_int(method, arg)
    if v is not None:
        return v, f"engine_args.{arg}"
    v = getattr(method.speculative, field)
    return (v, field) if v else (None, "")


def draft_cfg(method: Method) -> dict[str, Any] | None:
    """The draft's config.json where the draft is a local directory (a hub id: not read here)."""
    if method.draft_model is None:
        return None
    p = Path(method.draft_model.path) / "config.json"
    try:
        cfg = json.loads(p.read_text()) if p.is_file() else None
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def block(method: Method) -> Bound | None:
    """A DFLASH-style draft's block: block_size, num_draft_tokens, the draft's config, else SGLang's
    16 (None: the draft's config cannot be read here)."""
    for field, arg in (("block_size", "speculative_dflash_block_size"), ("num_draft_tokens", "")):
        v, src = knob(method, field, arg) if arg else (getattr(method.speculative, field), field)
        if v:
            return v, src
    cfg = draft_cfg(method)
    if cfg is None:
        return None
    v = (cfg.get("dflash_config") or {}).get("block_size") or cfg.get("block_size")
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v, "the draft's config.json"
    return DFLASH_DEFAULT_BLOCK, "SGLang's default"


# ------------------------------------------------------------------------------ tokens per verify step


def _draft_tokens_per_step(s: Speculative, engine: str) -> int | None:
    """num_draft_tokens: on hf the drafts plus the target's own token; on SGLang they count the
    verified root too (NGRAM, and draft, which runs as STANDALONE)."""
    n = s.num_draft_tokens
    if engine == "hf":
        return n + 1 if n else None
    return n or None


def _chain_tokens_per_step(s: Speculative, engine: str) -> int | None:
    """A tree commits at most num_steps + 1 (and at most num_draft_tokens)."""
    n, steps = s.num_draft_tokens, s.num_steps
    if engine == "hf" or not (steps or n):
        return None
    return min(x for x in ((steps + 1) if steps else None, n) if x)


def _block_tokens_per_step(s: Speculative, engine: str) -> int | None:
    """DFLASH commits at most its block."""
    return s.block_size if engine != "hf" and s.block_size else None


# ------------------------------------------------------------------------------ oracle acceptance


def _draft_oracle(s: Speculative) -> int | None:
    return s.num_draft_tokens + 1 if s.num_draft_tokens else None


def _steps_oracle(s: Speculative) -> int | None:
    return s.num_steps + 1 if s.num_steps else None


# ------------------------------------------------------------------------------ accept bounds (SGLang)


def _ngram_bound(method: Method) -> Bound | None:
    n, src = knob(method, "num_draft_tokens", "speculative_num_draft_tokens")
    if n is None:
        n, src = NGRAM_DEFAULT_DRAFT_TOKENS, "SGLang's default"
    return n, f"NGRAM verifies {n} tokens a step ({src}), the last committed token among them"


def _chain_bound(method: Method) -> Bound | None:
    steps, ssrc = knob(method, "num_steps", "speculative_num_steps")
    n, nsrc = knob(method, "num_draft_tokens", "speculative_num_draft_tokens")
    bounds = []
    if steps:
        bounds.append((steps + 1, f"{steps} draft steps ({ssrc}): a chain or tree is that deep, plus one"))
    if n:
        bounds.append((n, f"{n} verified tokens ({nsrc}), the last committed token among them"))
    return min(bounds) if bounds else None


def _dflash_bound(method: Method) -> Bound | None:
    b = block(method)
    return (
        (b[0], f"a DFLASH step verifies one block of {b[0]} ({b[1]}) and commits at most the block")
        if b
        else None
    )


def _ddtree_bound(method: Method) -> Bound | None:
    b = block(method)
    budget = engine_int(method, "speculative_ddtree_budget")
    bounds = []
    if b:
        bounds.append((b[0], f"the tree is drafted over a block of {b[0]} ({b[1]}): at most that deep"))
    if budget:
        bounds.append((budget + 1, f"a tree of {budget + 1} nodes (speculative_ddtree_budget {budget})"))
    return min(bounds) if bounds else None


def _dspark_bound(method: Method) -> Bound | None:
    g, src = knob(method, "block_size", "speculative_dspark_block_size")
    if g is None:
        cfg = draft_cfg(method)
        if cfg is None:
            return None
        v = cfg.get("block_size")
        g, src = (
            (v, "the draft's config.json")
            if isinstance(v, int) and v > 0
            else (DSPARK_DEFAULT_GAMMA, "SGLang's default")
        )
    return g + 1, f"DSPARK drafts gamma {g} tokens ({src}), verified with one more"


# ------------------------------------------------------------------------------ settings SGLang refuses


def _chain_refusal(s: dict[str, Any]) -> str | None:
    steps, topk, draft = s.get("num_steps"), s.get("topk"), s.get("num_draft_tokens")
    if steps is not None and draft is not None:
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


def _dflash_refusal(s: dict[str, Any]) -> str | None:
    if (s.get("num_steps") or 1) != 1 or (s.get("topk") or 1) != 1:
        return "DFLASH drafts one block per step: sglang forces num_steps 1 and topk 1"
    return None


# ------------------------------------------------------------------------------ planning structure (SGLang)


def _arg(method: Method, key: str) -> Any:
    return dict(method.engine_args).get(key)


def draft_block(method: Method, cfg: dict[str, Any] | None) -> Bound:
    """A DFLASH-style draft's block as the planner reads it: block_size, the engine arg,
    num_draft_tokens, the draft config's, else 16."""
    s = method.speculative
    assert s is not None
    for v, src in (
        (s.block_size, "block_size"),
        (_arg(method, "speculative_dflash_block_size"), "speculative_dflash_block_size"),
        (s.num_draft_tokens, "num_draft_tokens"),
    ):
        if v:
            return int(v), src
    c = cfg or {}
    v = (c.get("dflash_config") or {}).get("block_size") or c.get("block_size")
    if v:
        return int(v), "the draft's config.json"
    return DFLASH_DEFAULT_BLOCK, "SGLang's default"


def ngram_step(method: Method, cfg: dict[str, Any] | None = None, extra: int = 0) -> StepShape:
    """No draft model: num_draft_tokens (SGLang's 12) verified (``extra``: the hf engine's own token)."""
    s = method.speculative
    assert s is not None
    n = (s.num_draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS) + extra
    return StepShape(0, n, 0, n, False, f"{n} draft tokens")


def hf_draft_step(method: Method, cfg: dict[str, Any] | None = None) -> StepShape:
    """The hf engine's draft: num_draft_tokens draft steps, verified with the last token."""
    s = method.speculative
    assert s is not None
    steps = s.num_draft_tokens or 3
    return StepShape(steps, steps + 1, steps + 1, steps + 1, False, f"{steps} draft tokens")


def eagle_step(method: Method, cfg: dict[str, Any] | None = None) -> StepShape:
    """An EAGLE-like draft: num_steps (3) draft forwards, num_draft_tokens (steps + 1) verified."""
    s = method.speculative
    assert s is not None
    steps = s.num_steps or 3
    verify = s.num_draft_tokens or steps + 1
    return StepShape(steps, verify, verify, verify, False, f"{steps} draft steps, {verify} verified")


def _dflash_step(method: Method, cfg: dict[str, Any] | None) -> StepShape:
    b, src = draft_block(method, cfg)
    return StepShape(1, b, b, b, True, f"DFLASH block {b} ({src}), one draft forward")


def _dspark_step(method: Method, cfg: dict[str, Any] | None) -> StepShape:
    s = method.speculative
    assert s is not None
    g = s.block_size or _arg(method, "speculative_dspark_block_size")
    src = "block_size"
    if not g:
        g, src = (cfg or {}).get("block_size"), "the draft's config.json"
    if not g:
        g, src = DSPARK_DEFAULT_GAMMA, "SGLang's default"
    g = int(g)
    return StepShape(1, g + 1, g, g + 1, True, f"DSPARK gamma {g} ({src}): {g + 1} verified")


def _ddtree_step(method: Method, cfg: dict[str, Any] | None) -> StepShape:
    b, src = draft_block(method, cfg)
    budget = _arg(method, "speculative_ddtree_budget")
    how = "speculative_ddtree_budget" if budget else f"block {b} - 1"
    budget = int(budget) if budget else b - 1
    return StepShape(
        1,
        budget + 1,
        b,
        budget + 1,
        True,
        f"DDTREE tree of {budget + 1} nodes (budget {budget}, {how}) over a block of {b} ({src})",
    )


def hf_ngram_step(method: Method, cfg: dict[str, Any] | None = None) -> StepShape:
    """The hf engine's n-gram drafts: num_draft_tokens (12) verified with the target's own token."""
    return ngram_step(method, cfg, extra=1)


# the hf engine's drafters (Algorithm.hf) and the step each runs
HF_STEPS: dict[str, Callable[[Method, dict[str, Any] | None], StepShape]] = {
    "ngram": hf_ngram_step,
    "draft": hf_draft_step,
}


def step_shape(method: Method, cfg: dict[str, Any] | None = None) -> StepShape | None:
    """The step of ``method``'s engine (None: autoregressive). On the hf backend, the hf engine's
    drafter (an algorithm it does not implement: its draft loop); else the declaration's step,
    EAGLE-like where none is declared."""
    s = method.speculative
    if s is None:
        return None
    a = algorithm(s.algorithm)
    if method.backend == "hf":
        return HF_STEPS[a.hf if a is not None and a.hf in HF_STEPS else "draft"](method, cfg)
    return (a.step if a is not None and a.step is not None else eagle_step)(method, cfg)


# ------------------------------------------------------------------------------ the built-in algorithms

_EAGLE_LIKE: dict[str, Any] = {
    "knobs": EAGLE_KNOBS,
    "chain": True,
    "tokens_per_step": _chain_tokens_per_step,
    "accept_bound": _chain_bound,
    "refuse": _chain_refusal,
    "step": eagle_step,
}
# SGLang 0.5.17 reads SGLANG_SIMULATE_ACC_LEN once per process (srt/speculative/spec_utils.py) and
# applies it in eagle_utils.eagle_sample, the verify of EAGLE, EAGLE3, MTP, STANDALONE
# (EAGLEWorkerV2) and NGRAM (ngram_worker.py calls it), and in DFLASH's and DSPARK's own verify;
# the hf engine's verify forces it for draft and ngram: every built-in honours a forced length
register(
    Algorithm(
        "ngram",
        knobs=("num_draft_tokens", "max_ngram"),
        sglang="NGRAM",
        hf="ngram",
        cpu_drafts=True,
        default_draft_tokens=NGRAM_DEFAULT_DRAFT_TOKENS,
        tokens_per_step=_draft_tokens_per_step,
        accept_bound=_ngram_bound,
        step=ngram_step,
    )
)
register(
    Algorithm(
        "draft",  # a draft model of its own: SGLang runs it as STANDALONE
        knobs=("num_draft_tokens",),
        needs_draft=True,
        sglang="STANDALONE",
        chain=True,
        hf="draft",
        tokens_per_step=_draft_tokens_per_step,
        oracle_accept=_draft_oracle,
        accept_bound=_chain_bound,
        step=eagle_step,
    )
)
register(
    Algorithm("standalone", needs_draft=True, sglang="STANDALONE", oracle_accept=_steps_oracle, **_EAGLE_LIKE)
)
register(Algorithm("eagle", sglang="EAGLE", **_EAGLE_LIKE))
register(Algorithm("eagle3", needs_draft=True, sglang="EAGLE3", **_EAGLE_LIKE))
register(
    Algorithm(
        "dflash",
        knobs=(*EAGLE_KNOBS, "block_size"),
        needs_draft=True,
        sglang="DFLASH",
        block_drafter=True,
        tokens_per_step=_block_tokens_per_step,
        accept_bound=_dflash_bound,
        refuse=_dflash_refusal,
        step=_dflash_step,
    )
)
# forks' block drafters the planner sizes; the matrix checks none of their settings
register(
    Algorithm("dspark", checked=False, block_drafter=True, accept_bound=_dspark_bound, step=_dspark_step)
)
register(
    Algorithm("ddtree", checked=False, block_drafter=True, accept_bound=_ddtree_bound, step=_ddtree_step)
)
