"""Time model: how long an engine start and a cell's rounds take, before anything runs.

A closed-loop round of a cell on a GPU backend is waves of requests in flight at once (the
concurrency, or fewer where the KV cache or SGLang's running-request cap binds). A wave:
1. prefill: every prompt of the wave, one after the other (SGLang runs prefill before decode
   and chunks long prompts; prefill is compute bound, so batching prompts saves little), each
   ``2 x matmul params x n`` FLOPs plus causal attention ``2 x full layers x heads x head_dim x
   n^2``, at achieved fractions of the GPU's peak FLOP/s;
2. decode: ``output - 1`` steps (``/ accept length`` with speculation), each reading the
   weights (all but the embedding table) at an achieved fraction of the HBM bandwidth, the
   batch's KV cache and linear-attention state at a rate that grows with the batch (a single
   request's decode attention is bound by the kernel's parallelism, not by bandwidth), plus a
   fixed overhead per step and two all-reduces per layer at TP > 1.
A speculative step is one target verify step plus ``num_steps`` draft steps. A cell runs
``warmup`` untimed and ``rounds`` timed rounds. An engine start is a fixed part, CUDA-graph
capture per layer (again for the verify graphs and the draft's layers), weight loading and a
warm-up request; the first start of a process adds the import and cold kernel caches.

The constants below are calibrated on one NVIDIA H200 (sglang 0.5.17, triton attention,
dummy weights) from the results committed under docs/results/ and the seed-class run of
benches/examples/seed-27b-hybrid.yaml at TP1 (the Qwen3.5-27B-shaped hybrid), and for the hf
backend on the default CPU job (docs/results/cpu-default, 2 cores). Each says where it comes
from. On other GPUs the fractions are a guess; ``--specbench-plan-from`` a results JSON of
the same matrix replaces the model by measured times. No pytest and no heavy imports here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..matrix.algorithms import algorithm
from ..matrix.cells import Cell
from ..matrix.workload_kinds import kind_of
from .gpu_specs import SPECS
from .interconnect import Link, allreduce_s
from .shapes import Shape

# ------------------------------------------------------------------------------ hardware

# bandwidth (bytes/s) and dense BF16 FLOP/s by GPU name fragment: gpu_specs.SPECS, with sources
HBM_BANDWIDTH = tuple((g.fragment, g.bandwidth) for g in SPECS)
PEAK_FLOPS_BY_GPU = tuple((g.fragment, g.bf16_flops) for g in SPECS)
PEAK_FLOPS = 989e12  # a GPU not in the table with no --specbench-gpu-flops: assumed, and the plan says so


def bandwidth_for(name: str) -> float | None:
    """HBM bandwidth of a GPU by its name (HBM_BANDWIDTH), None for a GPU not in the table."""
    for frag, bw in HBM_BANDWIDTH:
        if frag.lower() in name.lower():
            return bw
    return None


def known_peak_flops(name: str) -> float | None:
    """Dense BF16 FLOP/s of a GPU by its name, None for a GPU not in the table."""
    for frag, f in PEAK_FLOPS_BY_GPU:
        if frag.lower() in name.lower():
            return f
    return None


def peak_flops_for(name: str) -> float:
    return known_peak_flops(name) or PEAK_FLOPS


# ------------------------------------------------------------------------------ calibration
# Shapes named below: "27B" = the Qwen3.5-27B-shaped hybrid (64 layers: 16 full attention with
# 4 KV heads of head_dim 256, 48 Gated DeltaNet; 53.8 GB of weights), "1.7B" = the
# Qwen3-1.7B-shaped dense model (28 layers, 8 KV heads of head_dim 128, 3.4 GB). "27B run" =
# benches/examples/seed-27b-hybrid.yaml at TP1 on one H200, -k '(ar and c1) or (ar and c8 and
# ctx30k) or (mtp and c1)'; "27B Engine" = sglang's Engine on the 27B alone (its own startup log,
# batch 1 and 32 with 128-token prompts, one H200, cold host); other names are docs/results/ dirs.

# decode, per step
# c1 decode steps with a short context: 27B 14.31 ms (27B run ar c1 ctx3k, 15.14 ms at 3k minus
# its context term), 1.7B 1.89 ms (h200-paired ar-tp1-c1: 0.52 s for 256 tokens): step =
# overhead + weights read / (bandwidth x fraction), solved for both
DECODE_WEIGHT_FRACTION = 0.82
STEP_OVERHEAD_S = 1.0e-3
# KV read by ONE request's decode attention, as a fraction of the HBM bandwidth, by head_dim:
# step time vs context at c1 rises 0.277 us per token for the 27B (65536 B/token: 236 GB/s;
# 27B run ar c1 ctx3k/30k/100k: 15.1 / 22.7 / 41.9 ms) and 0.345 us per token for the 1.7B
# (114688 B/token: 332 GB/s; h200-workloads long_context c1 ctx3k/30k/100k: 3.0 / 12.4 / 36.3 ms)
KV_READ_FRACTION_PER_REQUEST = ((128, 0.069), (256, 0.049))
# a batch's KV and linear-attention state (read and written) together reach at most this
# fraction: 27B c8 ctx30k (27B run: 41.4 s a round = 8 prefills of 4.37 s + 255 steps of
# ~25 ms), 27B b32 (27B Engine: 22.9 ms a step, 9.85 GB of state), 1.7B c32 / c64
# (h200-paired, h200-workloads sweep: 2.5-3.2 ms a step); 0.23-0.40 across them
KV_READ_FRACTION = 0.32
# all-reduce, 2 per layer at TP > 1: h200-tp2 / h200-tp2-and-two-workers ar-tp2 c1, 2.08 ms a step vs
# 1.88 ms at TP1 with half the weights per GPU: 0.72 ms over 56 all-reduces (13 us each on NVLink);
# by link, TP and message size: interconnect.py
ALLREDUCE_S = 13e-6

# prefill, per request: TTFT = overhead + matmul FLOPs / (peak x f) + attention FLOPs / (peak x f);
# least squares over TTFT p50 of 27B c1 ctx3k/30k/100k (0.27 / 4.37 / 30.6 s, 27B run) and 1.7B
# c1 512/3k/30k/100k (0.040 / 0.050 / 0.885 / 9.08 s, h200-workloads): within 10% of each
PREFILL_MATMUL_FRACTION = 0.70
PREFILL_ATTN_FRACTION = ((128, 0.14), (256, 0.083))  # by head_dim (triton extend attention)
PREFILL_OVERHEAD_S = 0.035

# speculative decoding. A verify step is a decode step of the target over the draft tokens whose
# attention runs SGLang's extend kernel, plus a fixed cost per layer; the draft's first step is an
# extend over the accepted tokens, its other steps are decode steps.
# per layer: 1.7B ngram-d4 / d12 c1 (h200-paired: 3.5 / 3.1 ms a verify step vs 1.9 ms AR) and
# standalone c1 (8.9 ms = 4 AR steps + 1.45 ms), 28 layers
SPEC_VERIFY_S_PER_LAYER = 52e-6
# one request's extend attention reads the KV cache ~5x slower than decode attention: 1.7B
# standalone c1 ctx3k/30k/100k (h200-workloads: 21 / 138 / 437 ms a verify step, target and
# draft each reading 114688 B/token: 64 GB/s at every context); 27B mtp c1 ctx3k (27B run:
# 24.1 ms a verify step vs 15.1 ms AR: 46 GB/s at head_dim 256)
EXTEND_READ_FRACTION_PER_REQUEST = ((128, 0.0133), (256, 0.0096))
# NGRAM matches every request's suffix on the CPU each step (overlapped with the GPU step):
# 1.7B c32 verify steps of 9-37 ms (h200-paired d4 / d8 / d12, h200-run1, h200-x2-two-waves,
# h200-x2-one-wave: 0.16-0.25 ms per request at 4 draft tokens, 0.3-1.0 ms at 12) vs ~4 ms on the GPU
NGRAM_CPU_S_PER_DRAFT_TOKEN = 50e-6
# tokens a verify step yields when nothing better is known (structure.accept_length): random-weight
# drafts (every committed GPU run) accept nothing (EAGLE3 / DFLASH / MTP: 1.004 = 256 / 255); real
# drafts accept more, so the plan is an upper bound for them
ASSUMED_ACCEPT_LENGTH = 1.0

# engine starts (sglang): fixed part + CUDA-graph capture per layer (decode and prefill graphs;
# again for the verify graphs of a speculative engine, plus the draft's layers) + a hybrid's
# state-pool and GDN kernels + weights + the warm-up request. Non-first starts on a warm host:
# 1.7B ar 24-29 s (h200-gpu-ci-2, h200-tp2-and-two-workers), ngram 24-49 s (median 33), standalone 26-50 s
# (median 37), eagle3 28-40 s; small hybrid ar 32-39 s; 27B ar 55.5 s (h200-seed27-interrupt
# resumed), mtp 82.9 s (27B run). The 27B's start on a cold host was 79 s of graph capture of
# 102.6 s (27B Engine: prefill graphs 65.8 s, decode graphs 9.4 s, weights 0.42 s)
ENGINE_BASE_S = 18.0
GRAPH_CAPTURE_S_PER_LAYER = 0.3
GRAPH_CAPTURE_S_PER_LINEAR_LAYER = 0.3
HYBRID_START_S = 10.0
# a draft's own graphs: standalone (a 28-layer draft) starts ~3 s after ngram (no draft) on the
# 1.7B (h200-paired 29 vs 25 s, h200-x2-one-wave 45 vs 43 s)
DRAFT_GRAPH_CAPTURE_S_PER_LAYER = 0.1
# prefill graphs, where captured (SGLang's default; disable_prefill_cuda_graph turns them off): the
# 27B hybrid's MTP engine started in 82.9 s with them and in 42-51 s without (h200-breakeven-hybrid,
# 4 starts); its cold start spent 65.8 s on prefill graphs against 9.4 s on decode graphs
PREFILL_GRAPH_S_PER_LAYER = 0.3
WARMUP_REQUEST_S = 1.0  # the plugin's untimed warm-up request after a start: 0.2-2.2 s
# per doubling of TP: ngram-tp2 36-41 s, standalone-tp2 44-47 s (h200-tp2, h200-tp2-and-two-workers)
TP_START_S = 5.0
DUMMY_WEIGHT_INIT_BYTES_PER_S = 128e9  # load_format dummy: 53.79 GB in 0.42 s (27B Engine)
WEIGHT_LOAD_BYTES_PER_S = 3e9  # real checkpoints: assumed (no start with real weights measured here)
# the first start of a process: sglang's import (import_s 19-33 s over 14 first starts, median
# 23), cold kernel caches (the first start's engine_start_s minus a later one's: 1.7B median
# 57 vs 26 s, 27B 82-101 vs 55 s) and a slower first warm-up request (6-10 s vs 0.2-2 s)
SGLANG_IMPORT_S = 23.0
COLD_KERNELS_S = 30.0
FIRST_WARMUP_S = 8.0
# a start the model does not size (no readable config, a backend it does not know): a flat
# guess by backend (an http endpoint is not started by the plugin)
ENGINE_START_S = {"sglang": 60.0, "sglang-server": 80.0, "hf": 2.0, "http": 0.0}

# every cell: building prompts, flushing the cache between rounds, metrics (cpu-default: 125 s
# of wall for 95 s of rounds and 4 s of starts over 43 cells, session start included)
CELL_OVERHEAD_S = 0.5
# every round of a cell on an in-process SGLang engine, outside its clock (workloads/rounds.py:
# the prefix-cache flush and a garbage collection of what the last round made, the rest frozen):
# h200-race (1.7B AR and EAGLE3 forced 1-4, c1/c8/c32, 2 warm-up + 6 timed rounds a cell) spent
# 0.50-0.89 s a cell outside its rounds (its JUnit call time less stats.data, the warm-up rounds at
# warmup_tokens_per_s and engine_warm.s), 0.062-0.111 s a round, mean 0.079. (Before the
# collection froze its survivors, h200-eta-spec spent 0.41-0.50 s a round there.) Other backends:
# in CELL_OVERHEAD_S (cpu-default).
ROUND_OVERHEAD_S = {"sglang": 0.08}

# the hf backend on a CPU (docs/results/cpu-default, 2 cores, the embedded 4-layer tiny model):
# decode step 3.3 ms at c1 (throughput ar c1: 0.11 s a request of 32 tokens) = fixed + per layer;
# KV read per step from long_context ctx3k / ctx10k (9.1 / 14.8 ms a step); prefill by least
# squares over TTFT p50 at 64 / 256 / 3k / 10k tokens (8 / 23 / 354 / 3268 ms); threads of
# concurrent requests share the cores: throughput ar c4 takes 1.43 x 4 requests at c1
CPU_STEP_S = 1.0e-3
CPU_STEP_S_PER_LAYER = 0.55e-3
CPU_KV_BYTES_PER_S = 2.7e9
CPU_MATMUL_FLOPS = 1.06e11
CPU_ATTN_FLOPS = 8.6e10
CPU_PREFILL_OVERHEAD_S = 4.3e-3
CPU_CONCURRENCY_PENALTY = 1.43
CPU_ENGINE_START_S = 0.1  # hf engine starts after the first: 0.0-0.1 s
CPU_IMPORT_S = 4.0  # the first hf start of a process (torch, transformers, the model): 4.1 s

AGENTIC_TURNS = 5  # a scenario the planner cannot read
CHARS_PER_TOKEN = 4  # scenario and question text, for their prompt lengths


def _by_head_dim(table: tuple[tuple[int, float], ...], head_dim: int) -> float:
    """A fraction measured at a few head_dims: log-linear between them, the nearest outside."""
    (d0, f0), (d1, f1) = table[0], table[-1]
    if head_dim <= d0:
        return f0
    if head_dim >= d1:
        return f1
    t = math.log(head_dim / d0) / math.log(d1 / d0)
    return f0 + t * (f1 - f0)


# ------------------------------------------------------------------------------ costs


@dataclass(frozen=True)
class ModelCosts:
    """One model (target or draft) on one GPU at a TP size: what its steps move and compute."""

    step_read_bytes: int  # weights a decode step reads (all but the embedding table)
    weight_bytes: int  # weights held (loaded at start)
    matmul_flops_per_token: float  # a prompt token through every matmul (no LM head)
    attn_flops_per_token2: float  # causal attention: x n^2 for an n-token prompt
    kv_bytes_per_token: int
    state_bytes_per_request: int  # linear-attention state (read and written every step)
    layers: int
    linear_layers: int
    head_dim: int
    hidden: int = 0  # activations all-reduced per token: hidden x dtype bytes
    dtype_bytes: int = 2

    @classmethod
    def of(cls, s: Shape, tp: int, shares_head: bool = False, extra_bytes: int = 0) -> ModelCosts:
        """``shares_head``: a draft that uses the target's embedding and LM head (DFLASH, DSPARK,
        DDTREE) holds neither but reads the LM head every step; ``extra_bytes``: weights the
        shape does not count (a DFLASH draft's projection of the target's hidden states)."""
        w = s.weight_bytes_per_gpu(tp)
        emb = s.embedding_bytes_per_gpu(tp)
        lm_head = emb  # tied or not, the LM head is read every step
        layers = max(w - emb - (0 if s.tied else lm_head), 0)
        held = layers + extra_bytes if shares_head else w + extra_bytes
        read = layers + lm_head + extra_bytes if shares_head else w - (0 if s.tied else emb) + extra_bytes
        return cls(
            step_read_bytes=read,
            weight_bytes=held,
            matmul_flops_per_token=2 * (layers + extra_bytes) / s.dtype_bytes,
            attn_flops_per_token2=2 * s.full_attn_layers * max(1, s.heads // tp) * s.head_dim,
            kv_bytes_per_token=s.kv_bytes_per_token(tp),
            state_bytes_per_request=s.state_bytes_per_request(tp),
            layers=s.layers,
            linear_layers=s.linear_layers,
            head_dim=s.head_dim,
            hidden=s.hidden,
            dtype_bytes=s.dtype_bytes,
        )


@dataclass(frozen=True)
class GroupCosts:
    """What the time model needs of an engine group: its models per GPU and how it decodes."""

    backend: str
    tp: int
    target: ModelCosts
    draft: ModelCosts | None = None  # a draft model (EAGLE, MTP, STANDALONE, hf draft)
    spec: str | None = None  # the speculative algorithm, lower case (None: autoregressive)
    num_steps: int = 0  # draft steps per verify step
    verify_tokens: int = 1  # tokens per request a verify step runs through the target
    draft_tokens: int = 0  # tokens per request in the draft's first forward (0: verify_tokens)
    accept_length: float = 1.0  # tokens per verify step the ETA assumes
    accept_why: str = ""
    accept_from: str = ""  # forced | expected | measured | oracle | upper bound
    step_why: str = ""  # how the verify width was found (structure.StepShape.why)
    shares_target_head: bool = False  # the draft uses the target's embedding and LM head
    dummy_weights: bool = False
    server: bool = False  # one server process per start (sglang-server): the import every start
    prefill_graphs: bool = True  # SGLang captures prefill CUDA graphs (unless disable_prefill_cuda_graph)


# ------------------------------------------------------------------------------ GPU terms


def prefill_s(m: ModelCosts, n: int, peak_flops: float) -> float:
    """Compute time of one n-token prompt: matmuls linear in n, causal attention quadratic."""
    attn = _by_head_dim(PREFILL_ATTN_FRACTION, m.head_dim)
    matmul = m.matmul_flops_per_token * n / (peak_flops * PREFILL_MATMUL_FRACTION)
    return matmul + m.attn_flops_per_token2 * n * n / (peak_flops * attn)


def decode_step_s(
    m: ModelCosts,
    batch: int,
    context: float,
    gpu: tuple[float, float],
    tp: int,
    overhead: float = STEP_OVERHEAD_S,
    tokens: int = 1,
    extend: bool = False,
    link: Link | None = None,
) -> float:
    """One forward step of ``batch`` requests holding ``context`` tokens each (mean), ``tokens``
    new tokens each: the weights (or the matmuls, when a big batch makes them compute bound),
    the KV cache at a rate that grows with the batch (decode or extend attention; with many new
    tokens, as a verify tree has, their attention's FLOPs when those take longer), the new
    tokens' KV written, the linear-attention state read and written (and, verifying several
    tokens, one intermediate state per token), two all-reduces per layer over ``link`` at TP > 1."""
    bandwidth, peak = gpu
    weights = m.step_read_bytes / (bandwidth * DECODE_WEIGHT_FRACTION)
    compute = batch * tokens * m.matmul_flops_per_token / (peak * PREFILL_MATMUL_FRACTION)
    table = EXTEND_READ_FRACTION_PER_REQUEST if extend else KV_READ_FRACTION_PER_REQUEST
    rate = bandwidth * min(KV_READ_FRACTION, batch * _by_head_dim(table, m.head_dim))
    kv = batch * context * m.kv_bytes_per_token / rate
    if tokens > 1:  # every new token attends to the whole context (prefill's kernel rate)
        attn = 2 * m.attn_flops_per_token2 * tokens * context * batch
        kv = max(kv, attn / (peak * _by_head_dim(PREFILL_ATTN_FRACTION, m.head_dim)))
        kv += batch * tokens * m.kv_bytes_per_token / (bandwidth * DECODE_WEIGHT_FRACTION)
    state = 2 * batch * m.state_bytes_per_request / (bandwidth * KV_READ_FRACTION)
    if tokens > 1 and extend:  # SGLang keeps one state per verified token (intermediate_ssm)
        state += batch * tokens * m.state_bytes_per_request / (bandwidth * DECODE_WEIGHT_FRACTION)
    ar = allreduce_s(link, tp, batch * tokens * m.hidden * m.dtype_bytes) if link is not None else ALLREDUCE_S
    allreduce = 2 * m.layers * ar if tp > 1 else 0.0
    return overhead + max(weights, compute) + kv + state + allreduce


def verify_step_s(
    g: GroupCosts, batch: int, context: float, gpu: tuple[float, float], link: Link | None = None
) -> float:
    """A speculative step: the target's verify step and the draft's steps (AR: a decode step).
    A block drafter (DFLASH, DSPARK, DDTREE) runs one forward over its block."""
    t = g.target
    if g.spec is None:
        return decode_step_s(t, batch, context, gpu, g.tp, link=link)
    step = decode_step_s(t, batch, context, gpu, g.tp, tokens=g.verify_tokens, extend=True, link=link)
    step += t.layers * SPEC_VERIFY_S_PER_LAYER
    decl = algorithm(g.spec)
    if decl is not None and decl.cpu_drafts:  # NGRAM's suffix match on the CPU
        step = max(step, batch * g.verify_tokens * NGRAM_CPU_S_PER_DRAFT_TOKEN)
    if g.draft is not None and g.num_steps:
        # a draft step's launch overhead scales with its layers (a 1-layer EAGLE/MTP draft runs
        # its steps in one graph; a full-size draft pays a whole step each)
        d = g.draft
        over = STEP_OVERHEAD_S * min(1.0, d.layers / max(t.layers, 1))
        first = g.draft_tokens or g.verify_tokens
        step += decode_step_s(d, batch, context, gpu, g.tp, over, tokens=first, extend=True, link=link)
        step += (g.num_steps - 1) * decode_step_s(d, batch, context, gpu, g.tp, over, link=link)
    return step


@dataclass(frozen=True)
class RoundEstimate:
    round_s: float
    ttft_s: float  # median time to first token of a wave
    prefill_s: float  # of one request (compute + overhead)
    step_s: float  # one decode (verify) step at the wave's batch
    waves: int
    in_flight: int


def _shape_of_round(cell: Cell) -> tuple[int, int, int, float]:
    """(requests per round, turns per request, prompt tokens per turn, mean context while decoding)."""
    w = cell.workload
    n = w.requests_per_round(cell.concurrency)
    prompts = kind_of(w.kind).prompts  # where the kind's prompts come from (its declaration)
    if prompts == "scenario":
        turns, system, user = _scenario_size(dict(cell.extra).get("scenario"))
        # each turn prefills its new user message (the history is in the prefix cache) and
        # decodes with the whole history: system + earlier turns and replies
        mean_ctx = system + (turns + 1) / 2 * (user + cell.output_tokens)
        return cell.concurrency, turns, user, mean_ctx
    if prompts == "questions":
        n, prompt = _category_size(cell)
        return n, 1, prompt, prompt + cell.output_tokens / 2
    return n, 1, cell.context_tokens, cell.context_tokens + cell.output_tokens / 2


def _scenario_size(name: Any) -> tuple[int, int, int]:
    """(turns, system tokens, user tokens per turn) of an agentic scenario."""
    try:
        from ..inputs import prompts

        sc = prompts.load_scenario(str(name))
        users = [len(t.user) for t in sc.turns]
        return (
            len(sc.turns),
            len(sc.system) // CHARS_PER_TOKEN + 16,
            sum(users) // len(users) // CHARS_PER_TOKEN + 8,
        )
    except Exception:
        return AGENTIC_TURNS, 128, 128


def _category_size(cell: Cell) -> tuple[int, int]:
    """(requests per round, prompt tokens) of a categories cell: its questions, at least C."""
    w = cell.workload
    try:
        from ..inputs import prompts

        cat = dict(cell.extra).get("category")
        qs = [q for q in prompts.load_questions(w.questions) if q.category == cat]
        n = w.requests or max(len(qs), cell.concurrency)
        prompt = sum(len(q.turns[0]) for q in qs) // max(len(qs), 1) // CHARS_PER_TOKEN + 16
        return n, prompt
    except Exception:
        return w.requests_per_round(cell.concurrency), w.prompt_tokens


def gpu_round(
    cell: Cell, g: GroupCosts, bandwidth: float, peak_flops: float, in_flight: int, link: Link | None = None
) -> RoundEstimate:
    """A round on a GPU backend: waves of ``in_flight`` requests; each wave prefills its prompts
    one after the other, then decodes them together."""
    n, turns, prompt, ctx = _shape_of_round(cell)
    c = max(1, min(in_flight, n))
    waves = math.ceil(n / c)
    one = PREFILL_OVERHEAD_S + prefill_s(g.target, prompt, peak_flops)
    if g.draft is not None:  # the draft prefills the prompt too
        one += prefill_s(g.draft, prompt, peak_flops)
    steps = max(cell.output_tokens - 1, 0) / g.accept_length
    gpu = (bandwidth, peak_flops)
    step = verify_step_s(g, c, ctx, gpu, link)
    # SGLang prefills queued prompts before decoding: the k-th of a wave's prompts gets its first
    # token after k prefills, and the wave decodes once they are all in. Every prompt of the
    # round is prefilled once, whatever the waves; each wave decodes at the batch in flight.
    compute = one - PREFILL_OVERHEAD_S
    round_s = turns * (n * compute + waves * (PREFILL_OVERHEAD_S + steps * step))
    ttft = PREFILL_OVERHEAD_S + compute * (c + 1) / 2
    if cell.request_rate:  # open loop: the arrivals span (n - 1) / rate, then the last one's service
        single = turns * (one + steps * verify_step_s(g, 1, ctx, gpu, link))
        round_s = max(round_s, (n - 1) / cell.request_rate + single)
    return RoundEstimate(round_s, ttft, one, step, waves, c)


def warm_rounds(warmup: int) -> int:
    """Warm-up rounds a cell runs at least: ``warmup``, plus one to compare with when any are
    configured (workloads: warm until two in a row agree; up to WARM_EXTRA_MAX more)."""
    return warmup + 1 if warmup else 0


def round_overhead_s(backend: str) -> float:
    """What a backend's round costs outside its clock (ROUND_OVERHEAD_S; 0: in CELL_OVERHEAD_S)."""
    return ROUND_OVERHEAD_S.get(backend, 0.0)


def cell_eta_s(cell: Cell, round_s: float) -> float:
    """Every cell runs its warm-up rounds (``warm_rounds``), then ``rounds`` timed ones, each with
    its backend's work between rounds (``round_overhead_s``)."""
    w = cell.workload
    rounds = warm_rounds(w.warmup) + w.rounds
    return rounds * (round_s + round_overhead_s(cell.method.backend)) + CELL_OVERHEAD_S


# ------------------------------------------------------------------------------ CPU (hf)


def cpu_round(cell: Cell, g: GroupCosts) -> RoundEstimate:
    """A round on the hf backend: one thread per in-flight request on the CPU's cores, no
    batching; concurrent requests share the cores (CPU_CONCURRENCY_PENALTY)."""
    n, turns, prompt, ctx = _shape_of_round(cell)
    if kind_of(cell.workload.kind).prompts == "scenario":  # no prefix cache: each turn prefills it all
        prompt = int(ctx)

    def prefill(m: ModelCosts) -> float:
        matmul = m.matmul_flops_per_token * prompt / CPU_MATMUL_FLOPS
        return matmul + m.attn_flops_per_token2 * prompt**2 / CPU_ATTN_FLOPS

    def step(m: ModelCosts) -> float:
        return CPU_STEP_S + CPU_STEP_S_PER_LAYER * m.layers + ctx * m.kv_bytes_per_token / CPU_KV_BYTES_PER_S

    one = CPU_PREFILL_OVERHEAD_S + prefill(g.target) + (prefill(g.draft) if g.draft is not None else 0.0)
    per_step = step(g.target) + (g.num_steps * step(g.draft) if g.draft is not None else 0.0)
    request = turns * (one + max(cell.output_tokens - 1, 0) / g.accept_length * per_step)
    c = max(1, min(cell.concurrency, n))
    round_s = n * request * (CPU_CONCURRENCY_PENALTY if c > 1 else 1.0)
    if cell.request_rate:
        round_s = max(round_s, (n - 1) / cell.request_rate + request)
    return RoundEstimate(round_s, one, one, per_step, math.ceil(n / c), c)


# ------------------------------------------------------------------------------ starts


@dataclass(frozen=True)
class StartEstimate:
    start_s: float  # a start that is not the first of its process
    first_extra_s: float  # what the first start of a process adds
    parts: tuple[tuple[str, float], ...]  # named terms of start_s, for the plan's note


def engine_start(g: GroupCosts) -> StartEstimate:
    if g.backend == "hf":
        return StartEstimate(CPU_ENGINE_START_S, CPU_IMPORT_S, (("start", CPU_ENGINE_START_S),))
    t = g.target
    full = t.layers - t.linear_layers
    graphs = GRAPH_CAPTURE_S_PER_LAYER * full + GRAPH_CAPTURE_S_PER_LINEAR_LAYER * t.linear_layers
    if g.spec is not None:
        graphs *= 2  # the target's verify graphs
        if g.draft is not None:
            graphs += DRAFT_GRAPH_CAPTURE_S_PER_LAYER * g.draft.layers
    weights = t.weight_bytes + (g.draft.weight_bytes if g.draft is not None else 0)
    load = weights / (DUMMY_WEIGHT_INIT_BYTES_PER_S if g.dummy_weights else WEIGHT_LOAD_BYTES_PER_S)
    parts = [
        ("fixed", ENGINE_BASE_S),
        ("CUDA graphs", graphs),
        ("weights", load),
        ("warm-up", WARMUP_REQUEST_S),
    ]
    if g.prefill_graphs:
        parts.append(("prefill CUDA graphs", PREFILL_GRAPH_S_PER_LAYER * t.layers))
    if t.linear_layers:
        parts.append(("hybrid state", HYBRID_START_S))
    if g.tp > 1:
        parts.append((f"TP{g.tp}", TP_START_S * math.log2(g.tp)))
    first = COLD_KERNELS_S + FIRST_WARMUP_S - WARMUP_REQUEST_S
    if g.server:  # the server process imports sglang at every start
        parts.append(("import", SGLANG_IMPORT_S))
    else:
        first += SGLANG_IMPORT_S
    return StartEstimate(sum(v for _, v in parts), first, tuple(parts))
