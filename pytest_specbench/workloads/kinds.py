"""Workloads: how a cell drives an engine, one runner per workload kind (``WORKLOADS``, added to
with :func:`register_runner`; the kind itself is declared in matrix/workload_kinds.py). Each
returns a :class:`CellRun`, its rounds timed through a :class:`Timing`.

Every workload runs ``warmup`` untimed rounds, then ``rounds`` timed ones; the prefix cache
is flushed before every round and prompts never repeat across requests, so no round gets
free prefill. Greedy unless the workload lists ``temperature`` values (an axis), exactly
``output_tokens`` tokens per request (EOS ignored).

- ``throughput``: N prompts of exactly ``prompt_tokens`` (or ``context_tokens``) ids at
  closed-loop concurrency C; with ``request_rate`` an open loop instead (Poisson arrivals,
  C caps what is in flight, client queue time reported and counted). Not streamed unless
  ``options: {stream: true}`` (streaming adds per-chunk work in the server).
- ``ttft``: the same, always streamed: TTFT, TPOT and per-token ITL from one request.
- ``long_context``: exact ``context_tokens`` prompts (3k/30k/100k), streamed; the cell
  checks that the engine saw exactly N prompt tokens per request.
- ``agentic``: C concurrent sessions of a multi-turn scenario (fixtures/agentic); each
  turn's prompt is the whole history (system, earlier turns, the model's own replies as
  token ids) plus the next user message; per-turn records in ``extra["turns"]``.
- ``categories``: the prompts of one category of a question file (the project's own set
  or a Spec-Bench / MT-Bench ``question.jsonl``), through the chat template, streamed.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engines.base import (
    Engine,
    Request,
    RequestRecord,
    open_loop,
    poisson_arrivals,
    run_requests,
    safe_generate,
)
from ..inputs import prompts
from ..matrix.cells import Cell
from ..matrix.workload_kinds import kind_of
from ..stats import metrics
from .rounds import CellRun, Meter, Meters, Reference, RoundPlan, Rule, meters, request_digest, timed

__all__ = [
    "CellRun",
    "Meter",
    "Meters",
    "Reference",
    "RoundPlan",
    "Runner",
    "Timing",
    "meters",
    "register_runner",
    "request_digest",
    "run",
]


@dataclass(frozen=True)
class Timing:
    """What times a cell's rounds besides the cell: the meters read around them, the baseline's
    engine whose rounds interleave with them, and the rule that stops them once decided
    (rounds.timed). A runner hands its round plans to :meth:`rounds`."""

    meter: Meter | None = None
    reference: Reference | None = None
    rule: Rule | None = None

    def rounds(
        self,
        engine: Engine,
        cell: Cell,
        plans: list[Any],
        round_fn: Callable[[Engine, Any], list[RequestRecord]],
    ) -> CellRun:
        """rounds.timed of the plans: warm-up, then the timed rounds (and the reference's)."""
        return timed(engine, cell, plans, round_fn, self.meter, self.reference, self.rule)


NOT_TIMED = Timing()
# a workload kind's runner: the cell's rounds on the engine (workloads/kinds.py register_runner)
Runner = Callable[[Engine, Cell, Timing], CellRun]


def request_seed(cell: Cell, round_idx: int) -> int:
    """The seed of a round's prompts and arrival times: from the cell's shape (Cell.request_key)
    and the round, never from its method or TP, so every method of a shape gets the same
    requests; stable across runs, processes and backends."""
    return (zlib.crc32(repr(cell.request_key).encode()) % 100_000) * 1000 + round_idx


def _request(cell: Cell, ids: Any, tag: str, stream: bool) -> Request:
    """One request of a cell: its output length and sampling temperature; the sampling seed
    comes from the shape and the tag, so every method of a shape draws from the same seeds."""
    return Request(
        tuple(ids),
        cell.output_tokens,
        tag=tag,
        stream=stream,
        temperature=cell.temperature,
        seed=zlib.crc32(f"{request_seed(cell, 0)}/{tag}".encode()),
    )


def _plan(cell: Cell, reqs: list[Request], round_idx: int) -> RoundPlan:
    rate = cell.request_rate
    arrivals = poisson_arrivals(rate, len(reqs), request_seed(cell, round_idx)) if rate else None
    return RoundPlan(reqs, arrivals)


def _submit(engine: Engine, cell: Cell, plan: RoundPlan) -> list[RequestRecord]:
    processes = dict(cell.workload.options).get("client_processes")
    return _send(engine, plan.requests, plan.arrivals, cell.concurrency, processes)


def _send(
    engine: Engine,
    requests: list[Request],
    arrivals: list[float] | None,
    concurrency: int,
    processes: int | None = None,
) -> list[RequestRecord]:
    """A round's requests in order: through the engine's own ``submit_round`` where it has one
    (the server backends: from several client processes, engines/clientpool.py), else on its
    event loop (a closed loop, or an open one at ``arrivals``)."""
    submit = getattr(engine, "submit_round", None)
    if submit is not None:
        return submit(requests, arrivals, concurrency, processes)
    if arrivals is not None:
        return engine.run(open_loop(engine, requests, arrivals, concurrency))
    return run_requests(engine, requests, concurrency)


def _thinking(cell: Cell, tok: Any) -> bool | None:
    """The cell's enable_thinking (None: not an axis); a template that ignores it is refused."""
    thinking = dict(cell.extra).get("thinking")
    if thinking is not None:
        prompts.check_thinking(tok, f"cell {cell.id}")
    return thinking


def _count_prompts(run: CellRun, want: Callable[[RequestRecord], int]) -> None:
    """``prompt_tokens_exact``: whether every successful request's prompt was ``want(record)``
    tokens as the engine counted them (what it saw, not what was sent); None when the engine
    reports no prompt length."""
    counted = [r for r in run.records if not r.error]
    if counted and all(r.engine_prompt_tokens is not None for r in counted):
        run.extra["prompt_tokens_exact"] = all(r.engine_prompt_tokens == want(r) for r in counted)
        run.extra["prompt_tokens_counted_by"] = "engine"
    else:
        run.extra["prompt_tokens_exact"] = None
        run.extra["prompt_tokens_counted_by"] = "nobody: the engine reports no prompt length"


def _exact_rounds(engine: Engine, cell: Cell, stream: bool, t: Timing) -> CellRun:
    tok = engine.tokenizer()
    n = cell.workload.requests_per_round(cell.concurrency)

    thinking = _thinking(cell, tok)

    def build(r: int) -> RoundPlan:
        if cell.workload.chat_template:
            try:
                ps = prompts.make_chat_prompts(tok, cell.context_tokens, n, request_seed(cell, r), thinking)
            except ValueError as e:
                key = "context_tokens" if cell.workload.context_tokens else "prompt_tokens"
                raise ValueError(f"cell {cell.id}: workloads.{cell.workload.name}.{key}: {e}") from None
        else:
            ps = prompts.make_prompts(tok, cell.context_tokens, n, request_seed(cell, r))
        return _plan(cell, [_request(cell, p, f"round{r}/req{i}", stream) for i, p in enumerate(ps)], r)

    plans = [build(r) for r in range(cell.workload.warmup + cell.workload.round_cap)]
    run = t.rounds(engine, cell, plans, lambda e, p: _submit(e, cell, p))
    _count_prompts(run, lambda r: cell.context_tokens)
    if cell.request_rate:
        run.extra["request_rate"] = cell.request_rate
    return run


def throughput(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    return _exact_rounds(engine, cell, cell.workload.streamed, t)


def ttft(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    return _exact_rounds(engine, cell, True, t)


def long_context(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    run = _exact_rounds(engine, cell, True, t)
    if run.extra["prompt_tokens_exact"] is False:
        seen = sorted({r.engine_prompt_tokens for r in run.records if r.engine_prompt_tokens is not None})
        raise AssertionError(
            f"cell {cell.id}: prompts must be exactly {cell.context_tokens} tokens; the engine saw {seen}"
        )
    return run


def categories(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    """The category's questions through the chat template; at least ``concurrency`` requests a
    round (the questions cycle), or ``requests`` when given."""
    w = cell.workload
    tok = engine.tokenizer()
    cat = dict(cell.extra)["category"]
    qs = [q for q in prompts.load_questions(w.questions) if q.category == cat]
    n = w.requests or max(len(qs), cell.concurrency)
    thinking = _thinking(cell, tok)
    ids = [
        prompts.chat_ids(tok, [{"role": "user", "content": qs[i % len(qs)].turns[0]}], True, thinking)
        for i in range(n)
    ]
    stream = w.streamed

    def build(r: int) -> RoundPlan:
        tags = [
            f"round{r}/{qs[i % len(qs)].id}" + (f"#{i // len(qs)}" if i >= len(qs) else "") for i in range(n)
        ]
        return _plan(cell, [_request(cell, p, t, stream) for t, p in zip(tags, ids, strict=True)], r)

    plans = [build(r) for r in range(w.warmup + w.round_cap)]
    run = t.rounds(engine, cell, plans, lambda e, p: _submit(e, cell, p))
    run.extra.update(category=cat, questions=w.questions or "builtin", prompts=len(qs))
    return run


def agentic(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    """C sessions at once, each going through the scenario's turns in order. A round's digest
    covers each session's first request (system prompt and first user message); later turns
    carry the model's own replies, identical across methods only where their outputs are."""
    sc = prompts.load_scenario(dict(cell.extra)["scenario"])
    tok = engine.tokenizer()
    template = getattr(tok, "chat_template", None) or ""
    end_ids = list(
        tok.encode("<|im_end|>\n" if "<|im_end|>" in template else "\n\n", add_special_tokens=False)
    )
    thinking = _thinking(cell, tok)
    user_ids = [
        prompts.chat_ids(tok, [{"role": "user", "content": t.user}], True, thinking) for t in sc.turns
    ]

    def build(r: int) -> list[list[int]]:
        # a per-session line keeps sessions apart after the shared system prompt
        return [
            prompts.chat_ids(
                tok, [{"role": "system", "content": f"{sc.system}\n(session {request_seed(cell, r)}-{s})"}]
            )
            for s in range(cell.concurrency)
        ]

    async def session(eng: Engine, r: int, s: int, history: list[int]) -> list[RequestRecord]:
        recs = []
        for t in range(len(sc.turns)):
            ids = history + user_ids[t]
            rec = await safe_generate(eng, _request(cell, ids, f"round{r}/s{s}/t{t}", True))
            recs.append(rec)
            if rec.error:
                break
            reply = list(rec.output_ids) or list(tok.encode(rec.output_text, add_special_tokens=False))
            history = ids + reply + end_ids
        return recs

    async def all_sessions(eng: Engine, r: int, systems: list[list[int]]) -> list[RequestRecord]:
        out = await asyncio.gather(*(session(eng, r, s, h) for s, h in enumerate(systems)))
        return [rec for sess in out for rec in sess]

    w = cell.workload
    plans = [(r, build(r)) for r in range(w.warmup + w.round_cap)]
    run = t.rounds(engine, cell, plans, lambda e, p: e.run(all_sessions(e, *p)))
    run.round_digests = [
        request_digest([_request(cell, h + user_ids[0], f"round{r}/s{s}/t0", True) for s, h in enumerate(hs)])
        for r, hs in plans[w.warmup :]
    ]
    run.extra["request_digest_scope"] = "first turn of each session"
    run.extra["scenario"] = sc.name
    run.extra["turns"] = per_turn(run.records, [t.name for t in sc.turns])
    return run


def trace(engine: Engine, cell: Cell, t: Timing = NOT_TIMED) -> CellRun:
    """A round replays the (cut) trace at its timestamps over the cell's speed, at most
    ``concurrency`` requests in flight (later arrivals wait in the client, counted as queue
    time); each request's prompt shares its blocks' tokens with every request that lists the
    same block ids (inputs/traces.py). Every round sends the same requests (the cache is
    flushed between rounds); every method of a shape sends them at the same offsets."""
    from ..inputs import traces

    w = cell.workload
    assert w.trace is not None
    tr = traces.load_trace(w.trace, w.cut_requests, w.cut_s)
    tok = engine.tokenizer()
    speed = float(dict(cell.extra).get("speed", 1.0))
    blocks: dict[tuple[int, int], tuple[int, ...]] = {}
    ids = [traces.prompt_ids(tok, tr, i, w.block_tokens, blocks) for i in range(len(tr.requests))]
    outs = tr.output_lengths(w.max_output_tokens)
    arrivals = [r.offset_s / speed for r in tr.requests]

    def build(r: int) -> RoundPlan:
        reqs = [
            Request(
                p,
                o,
                tag=f"round{r}/req{i}",
                stream=True,
                temperature=cell.temperature,
                seed=zlib.crc32(f"{request_seed(cell, 0)}/req{i}".encode()),
            )
            for i, (p, o) in enumerate(zip(ids, outs, strict=True))
        ]
        return RoundPlan(reqs, arrivals)

    plans = [build(r) for r in range(w.warmup + w.round_cap)]
    run = t.rounds(engine, cell, plans, lambda e, p: _submit(e, cell, p))
    want = {f"req{i}": len(p) for i, p in enumerate(ids)}
    _count_prompts(run, lambda r: want[r.tag.split("/")[-1]])
    run.extra.update(
        trace=w.trace,
        trace_requests=len(tr.requests),
        trace_duration_s=round(tr.duration_s / speed, 6),
        trace_speed=speed,
        request_rate=cell.request_rate,
        trace_block_tokens=w.block_tokens,
        # what a prefix cache that never evicts could serve (the trace's own reuse)
        trace_prefix_reuse=round(tr.prefix_reuse(w.block_tokens), 6),
        arrival_offsets_s=[round(a, 6) for a in arrivals],
    )
    return run


def per_turn(records: list[RequestRecord], names: list[str]) -> list[dict[str, Any]]:
    """One row per turn index over every session and timed round (acceptance vs turn)."""
    rows = []
    for t, name in enumerate(names):
        recs = [r for r in records if r.tag.endswith(f"/t{t}") and not r.error]
        if not recs:
            continue
        ttfts = [r.ttft_s for r in recs if r.ttft_s is not None]
        p50_ttft = metrics.percentile(ttfts, 50)
        rows.append(
            {
                "turn": t,
                "name": name,
                "requests": len(recs),
                "prompt_tokens_mean": sum(r.prompt_tokens for r in recs) / len(recs),
                **{k: v for k, v in metrics.prefix_cache(recs).items() if k != "prefix_cache_reported"},
                "output_tokens": sum(r.output_tokens for r in recs),
                "accept_length": metrics.accept_length(recs),
                "ttft_ms_p50": None if p50_ttft is None else p50_ttft * 1e3,
                "latency_s_p50": metrics.percentile([r.latency_s for r in recs], 50),
            }
        )
    return rows


WARM_MAX_SHAPES = 8
WARM_OUTPUT_TOKENS = 8
WARM_MAX_PROMPT = (
    16384  # longer prompts warm at this length (a 100k-token prefill per start is minutes on a CPU)
)


def warm_shapes(cells: list[Cell]) -> list[tuple[int, int, bool]]:
    """The (concurrency, prompt tokens, streamed) shapes a group's cells of exact prompts will
    use, smallest first, at most WARM_MAX_SHAPES, prompts capped at WARM_MAX_PROMPT tokens."""
    shapes = {
        (c.concurrency, min(c.context_tokens, WARM_MAX_PROMPT), c.workload.streamed)
        for c in cells
        if kind_of(c.workload.kind).exact
    }
    return sorted(shapes, key=lambda s: (s[1], s[0], s[2]))[:WARM_MAX_SHAPES]


def warm_engine(engine: Engine, cells: list[Cell]) -> dict[str, Any]:
    """After an engine starts: one round of C requests (WARM_OUTPUT_TOKENS each) at every shape
    its cells will use, so that no cell's first round pays for first-time allocations, kernel
    selection or thread pools at a new batch size or prompt length. Prompts are seeded apart
    from every cell's. What ran, how long it took and any error go into the engine event."""
    shapes = warm_shapes(cells)
    out: dict[str, Any] = {"shapes": [], "s": 0.0}
    if not shapes:
        return out
    tok = engine.tokenizer()
    return _warm_waves(engine, tok, shapes, lambda key: None, 7_777_777, "warm", out)


def _warm_waves(
    engine: Engine,
    tok: Any,
    shapes: Any,
    n_out: Any,
    seed: int,
    tag: str,
    out: dict[str, Any],
) -> dict[str, Any]:
    """One untimed wave a shape (concurrency, prompt tokens, streamed), each request ``n_out(shape)``
    tokens long (None: WARM_OUTPUT_TOKENS, not recorded), prompts seeded at ``seed`` + the prompt
    length; each shape's time and first error into ``out["shapes"]``, the whole into ``out["s"]``;
    stops at the first shape that failed."""
    t_all = time.perf_counter()
    for c, n_prompt, stream in shapes:
        want = n_out((c, n_prompt, stream))
        ps = prompts.make_prompts(tok, n_prompt, c, seed + n_prompt)
        reqs = [
            Request(tuple(p), want or WARM_OUTPUT_TOKENS, tag=f"{tag}/req{i}", stream=stream)
            for i, p in enumerate(ps)
        ]
        t0 = time.perf_counter()
        recs = _send(engine, reqs, None, c)
        err = next((r.error for r in recs if r.error), None)
        rec: dict[str, Any] = {"concurrency": c, "prompt_tokens": n_prompt}
        if want is not None:
            rec["output_tokens"] = want
        out["shapes"].append({**rec, "s": round(time.perf_counter() - t0, 4), "error": err})
        if err:
            break
    out["s"] = round(time.perf_counter() - t_all, 4)
    return out


def warm_machine(engine: Engine, cells: list[Cell]) -> dict[str, Any]:
    """The first engine on a fresh GPU set (or, GPUs unleased, a process's first GPU engine):
    before any timed round counts, one untimed wave at every shape its cells use (as
    ``warm_engine``'s), each request as long as the longest output its cells ask at that shape,
    so that what compiles or tunes on first use (kernels at each batch size and sequence length,
    the speculative step's) does so here and not inside a measured round. Prompts are seeded
    apart from every cell's and from ``warm_engine``'s. What ran and how long it took go into the
    cell's ``engine_warm`` record (``machine``)."""
    longest: dict[tuple[int, int, bool], int] = {}
    for c in cells:
        if kind_of(c.workload.kind).exact:
            key = (c.concurrency, min(c.context_tokens, WARM_MAX_PROMPT), c.workload.streamed)
            longest[key] = max(longest.get(key, 0), c.output_tokens)
    out: dict[str, Any] = {"shapes": [], "s": 0.0}
    if not longest:
        return out
    tok = engine.tokenizer()
    return _warm_waves(
        engine,
        tok,
        warm_shapes(cells),
        lambda key: longest.get(key, WARM_OUTPUT_TOKENS),
        8_888_888,
        "warm-machine",
        out,
    )


# workload kind -> its runner; what the kind is (its keys, axes, prompts) is its declaration in
# matrix/workload_kinds.py (register_kind)
WORKLOADS: dict[str, Runner] = {}


def register_runner(kind: str, fn: Runner) -> Runner:
    """How a cell of workload kind ``kind`` drives an engine: ``fn(engine, cell, timing)`` returns
    its CellRun, its rounds run through ``timing.rounds`` (warm-up, timed rounds, an interleaved
    baseline). With the kind's declaration (register_kind), the one place a new kind is added."""
    WORKLOADS[kind] = fn
    return fn


for _kind, _fn in (
    ("throughput", throughput),
    ("ttft", ttft),
    ("long_context", long_context),
    ("agentic", agentic),
    ("categories", categories),
    ("trace", trace),
):
    register_runner(_kind, _fn)


def run(
    engine: Engine,
    cell: Cell,
    meter: Meter | None = None,
    reference: Reference | None = None,
    rule: Rule | None = None,
) -> CellRun:
    """The cell's workload on ``engine``; with ``reference`` (its baseline's engine in this
    process) the baseline's rounds interleaved with the cell's (rounds.timed)."""
    try:
        fn = WORKLOADS[cell.workload.kind]
    except KeyError:
        raise NotImplementedError(
            f"workload kind {cell.workload.kind!r} is not implemented; implemented: {', '.join(WORKLOADS)}"
        ) from None
    return fn(engine, cell, Timing(meter, reference, rule))
