"""What a speculative engine runs per step, as SGLang builds it, and the accept length a plan assumes.

Per method (docs/plan.md "Speculative structure" cites the SGLang lines; each algorithm's
declaration in matrix/algorithms.py holds its step):
- verify tokens per request and step, which the target runs through every matmul and writes
  into its KV cache: EAGLE/MTP/STANDALONE ``num_draft_tokens`` (a chain: ``num_steps + 1``),
  NGRAM ``num_draft_tokens`` (12), DFLASH its block (``block_size``, else ``num_draft_tokens``,
  else the draft's config, else 16), DSPARK ``gamma + 1``, DDTREE its tree (budget + 1 nodes,
  budget ``speculative_ddtree_budget``, else block - 1);
- draft forwards per step: EAGLE-like drafts ``num_steps``, block drafters (DFLASH, DSPARK,
  DDTREE) one forward over their block;
- the draft's weights: block drafters hold no embedding and no LM head (they use the target's),
  plus the projection of the target's hidden states (``fc``);
- the draft-token states a hybrid's state pool reserves per running request: the verify width.

The accept length (tokens a verify step yields) a plan assumes, first that applies: forced
(``simulate_accept_length``: the engine does exactly that), ``speculative.expect_accept_length``
(planning only, never sent to an engine), a previous run's measured value for the method
(``--specbench-plan-from``), every draft token when the draft is the target itself, else 1: an
upper bound on the cell's time, which any draft that accepts something beats. No pytest.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..matrix import algorithms
from ..matrix.algorithms import StepShape
from ..matrix.cells import EngineGroup, Method
from .eta import GroupCosts, ModelCosts
from .shapes import Shape

UPPER_BOUND_WHY = (
    "an upper bound: 1 token per verify step is what a draft that accepts nothing gives; set "
    "speculative.expect_accept_length or --specbench-plan-from a run that measured it"
)


def step_shape(method: Method, draft_cfg: dict[str, Any] | None = None) -> StepShape | None:
    """The step of ``method`` (None: autoregressive). ``draft_cfg``: the draft's config.json. What
    each algorithm runs is its declaration's ``step`` (matrix/algorithms.py)."""
    return algorithms.step_shape(method, draft_cfg)


# ------------------------------------------------------------------------------ accept length


def measured_accept(doc: dict[str, Any] | None, method: str) -> tuple[float, int] | None:
    """(median accept length, cells) a previous results JSON measured for ``method`` (its
    unforced cells that ran; a forced cell measures the forcing, not the draft)."""
    if not doc:
        return None
    vals = []
    for b in doc.get("benchmarks") or []:
        ex = b.get("extra_info") or {}
        if (b.get("params") or {}).get("method") != method or ex.get("accept_forced_expected") is not None:
            continue
        if (ex.get("race") or {}).get("status") == "dropped":
            continue
        a = ex.get("accept_length")
        if isinstance(a, (int, float)) and a >= 1:
            vals.append(float(a))
    return (statistics.median(vals), len(vals)) if vals else None


def accept_length(
    method: Method, shape: StepShape | None, previous: dict[str, Any] | None = None, source: str = ""
) -> tuple[float, str, str]:
    """(tokens per verify step, from: forced | expected | measured | oracle | upper bound, why)."""
    s = method.speculative
    if s is None or shape is None:
        return 1.0, "", ""
    if s.simulate_accept_length is not None:
        return float(s.simulate_accept_length), "forced", "forced: simulate_accept_length"
    expect = getattr(s, "expect_accept_length", None)
    if expect is not None:
        return float(expect), "expected", "expected: speculative.expect_accept_length"
    got = measured_accept(previous, method.name)
    if got is not None:
        where = f" in {source}" if source else ""
        return got[0], "measured", f"measured: median of {got[1]} cell(s) of {method.name}{where}"
    oracle = s.expected_oracle_accept
    same = method.draft_model is not None and method.draft_model.path == method.model.path
    if oracle and same:
        return float(oracle), "oracle", "the draft is the target: every draft token accepted"
    return 1.0, "upper bound", UPPER_BOUND_WHY


# ------------------------------------------------------------------------------ the time model's inputs


def draft_config(method: Method) -> dict[str, Any] | None:
    if method.draft_model is None:
        return None
    from .shapes import read_config

    try:
        cfg, _, _ = read_config(method.draft_model)
        return cfg
    except Exception:  # unreadable: the defaults apply, the sizing already said why
        return None


def projection_bytes(draft_cfg: dict[str, Any] | None, shape: Shape, tp: int) -> int:
    """A DFLASH draft's ``fc``: K target layers' hidden states -> hidden (K: dflash_config's
    target_layer_ids, else the draft's layers; SGLang models/dflash.py:358-372), replicated."""
    cfg = draft_cfg or {}
    ids = (cfg.get("dflash_config") or {}).get("target_layer_ids") or cfg.get("target_layer_ids")
    k = len(ids) if isinstance(ids, list) and ids else shape.layers
    return k * shape.hidden * shape.hidden * shape.dtype_bytes


def markov_bytes(draft_cfg: dict[str, Any] | None, shape: Shape) -> int:
    """A DSPARK draft's Markov head: an embedding of vocab x rank and a rank x vocab projection."""
    rank = int((draft_cfg or {}).get("markov_rank") or 0)
    return 2 * shape.vocab * rank * shape.dtype_bytes


def group_costs(
    group: EngineGroup,
    target: Shape,
    draft: Shape | None,
    previous: dict[str, Any] | None = None,
    source: str = "",
) -> GroupCosts:
    m = group.method
    cfg = draft_config(m) if draft is not None else None
    shape = step_shape(m, cfg)
    t = ModelCosts.of(target, group.tp)
    d = None
    if draft is not None:
        shared = shape is not None and shape.shares_target_head
        extra = projection_bytes(cfg, draft, group.tp) + markov_bytes(cfg, draft) if shared else 0
        d = ModelCosts.of(draft, group.tp, shares_head=shared, extra_bytes=extra)
    accept, frm, why = accept_length(m, shape, previous, source)
    return GroupCosts(
        backend=m.backend,
        tp=group.tp,
        target=t,
        draft=d,
        spec=m.speculative.algorithm.lower() if m.speculative is not None else None,
        num_steps=shape.draft_steps if shape else 0,
        verify_tokens=shape.verify_tokens if shape else 1,
        draft_tokens=shape.draft_tokens if shape else 0,
        accept_length=accept,
        accept_why=why,
        accept_from=frm,
        step_why=shape.why if shape else "",
        shares_target_head=bool(shape and shape.shares_target_head),
        dummy_weights=m.model.load_format == "dummy",
        server=m.backend == "sglang-server",
        prefill_graphs=not dict(m.engine_args).get("disable_prefill_cuda_graph", False),
    )
