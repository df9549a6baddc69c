"""Real traffic: trace replay with shared prefixes, prefix-cache hits, SPEED-Bench question files,
chat templates with thinking on and off."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.engines import base
from pytest_specbench.engines.base import Request, RequestRecord
from pytest_specbench.engines.prefix_cache import PrefixCache, common_prefix
from pytest_specbench.inputs import prompts, traces
from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.stats import metrics
from pytest_specbench.workloads import kinds as workloads

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SMALL = str(FIX / "traces" / "chat-small.jsonl")
# Mooncake's own example line (FAST25-release/README.md), as published
MOONCAKE_LINE = (
    '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": '
    "[46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}"
)


def _trace_doc(path: str, **w: Any) -> dict[str, Any]:
    return {
        "models": {"t": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "t"},
            "ngram": {
                "backend": "hf",
                "model": "t",
                "speculative": {"algorithm": "ngram", "num_draft_tokens": 4},
            },
        },
        "workloads": {"replay": {"kind": "trace", "trace": path, "block_tokens": 32, **w}},
    }


def test_mooncake_lines_load_as_published_sorted_and_cut(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(
        "\n".join(
            [
                MOONCAKE_LINE,
                '{"timestamp": 27000, "input_length": 10, "output_length": 5}',
                '{"timestamp": 29482, "input_length": 600, "output_length": 7, "hash_ids": [46, 9]}',
            ]
        )
    )
    tr = traces.load_trace(str(p))
    assert [r.offset_s for r in tr.requests] == [0.0, 0.482, 2.482]  # ms from the first arrival
    assert tr.requests[1].hash_ids[-2:] == (2353, 2354) and tr.requests[1].input_length == 6955
    assert tr.rate() == pytest.approx(2 / 2.482)  # arrivals after the first over the span
    assert len(traces.load_trace(str(p), requests=2).requests) == 2
    assert len(traces.load_trace(str(p), seconds=1.0).requests) == 2
    # block 46 of the third request is the second's first block: 512 tokens reusable of 7565
    assert tr.prefix_reuse(512) == pytest.approx(512 / (10 + 6955 + 600))
    # a block cut short by its request's length is only partly there for the next one to reuse
    p.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 9, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
    )
    traces.load_trace.cache_clear()
    assert traces.load_trace(str(p)).prefix_reuse(512) == pytest.approx(600 / 1700)


def test_trace_errors_name_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 5, "input_length": 10}\n'
    )
    with pytest.raises(ValueError, match=r"bad.jsonl:2: missing output_length"):
        traces.load_trace(str(p))
    doc = _trace_doc(str(p))
    with pytest.raises(MatrixError, match=r"workloads.replay.trace: .*bad.jsonl:2: missing output_length"):
        parse(doc, str(tmp_path / "m.yaml"))
    doc = _trace_doc(SMALL, output_tokens=[32])
    with pytest.raises(
        MatrixError, match=r"workloads.replay.output_tokens: not for workload kind trace: .*max_output_tokens"
    ):
        parse(doc, str(tmp_path / "m.yaml"))
    doc = _trace_doc(SMALL, request_rate=[2])
    with pytest.raises(MatrixError, match=r"workloads.replay.request_rate: .*speed: \[0.5, 1, 2\]"):
        parse(doc, str(tmp_path / "m.yaml"))
    doc = _trace_doc(SMALL)
    del doc["workloads"]["replay"]["trace"]
    with pytest.raises(MatrixError, match=r"workloads.replay.trace: kind trace needs the trace file"):
        parse(doc, str(tmp_path / "m.yaml"))


def test_trace_prompts_share_the_tokens_of_shared_blocks_and_are_exact() -> None:
    tok = _tiny_tokenizer()
    tr = traces.load_trace(SMALL)
    blocks: dict[tuple[int, int], tuple[int, ...]] = {}
    ids = [traces.prompt_ids(tok, tr, i, 32, blocks) for i in range(len(tr.requests))]
    assert [len(x) for x in ids] == [r.input_length for r in tr.requests]
    for i, a in enumerate(tr.requests):
        for j in range(i):
            b = tr.requests[j]
            shared = common_prefix(a.hash_ids, b.hash_ids)
            want = min(shared * 32, a.input_length, b.input_length)
            assert ids[i][:want] == ids[j][:want]
            if shared < min(len(a.hash_ids), len(b.hash_ids)):  # a different block: different tokens
                assert common_prefix(ids[i], ids[j]) < (shared + 1) * 32


@functools.cache
def _tiny_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from pytest_specbench.inputs import tinymodel

    return AutoTokenizer.from_pretrained(tinymodel.resolve("embedded:tiny"))


class FakeTimedEngine:
    """Records each request as the engine got it: when it arrived (round clock) and its ids."""

    backend = "fake"
    deadline = None

    def __init__(self) -> None:
        import asyncio

        self._tok = _tiny_tokenizer()
        self.info: dict[str, Any] = {}
        self._loop = asyncio.new_event_loop()
        self.got: list[Request] = []

    def tokenizer(self) -> Any:
        return self._tok

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    async def agenerate(self, request: Request) -> RequestRecord:
        self.got.append(request)
        return RequestRecord(
            len(request.input_ids),
            request.max_new_tokens,
            0.001,
            ttft_s=0.0005,
            engine_prompt_tokens=len(request.input_ids),
            tag=request.tag,
        )

    def flush_cache(self) -> None:
        pass

    def close(self) -> None:
        self._loop.close()


def test_a_trace_replays_at_its_times_and_every_method_gets_the_same_requests(tmp_path: Path) -> None:
    m = parse(
        _trace_doc(SMALL, speed=[4, 8], rounds=1, warmup=0, max_output_tokens=8), str(tmp_path / "m.yaml")
    )
    cells = {c.id: c for c in m.cells("trace")}
    assert sorted(cells) == [
        "replay-ar-tp1-c256-speed4x",
        "replay-ar-tp1-c256-speed8x",
        "replay-ngram-tp1-c256-speed4x",
        "replay-ngram-tp1-c256-speed8x",
    ]
    tr = traces.load_trace(SMALL)
    assert cells["replay-ar-tp1-c256-speed4x"].request_rate == pytest.approx(4 * 23 / tr.duration_s)
    runs, got = {}, {}
    for cid, cell in cells.items():
        eng = FakeTimedEngine()
        try:
            runs[cid] = workloads.run(eng, cell)
        finally:
            eng.close()
        got[cid] = eng.got
    for speed in (4, 8):
        run = runs[f"replay-ar-tp1-c256-speed{speed}x"]
        want = [r.offset_s / speed for r in tr.requests]
        assert run.extra["arrival_offsets_s"] == [round(x, 6) for x in want]
        starts = {r.tag: r.start_s for r in run.records}
        for i, at in enumerate(want):  # never sent before its time, in the trace's order
            assert starts[f"round0/req{i}"] >= at - 1e-9
        assert [r.max_new_tokens for r in got[f"replay-ar-tp1-c256-speed{speed}x"]][:3] == [
            min(8, r.output_length) for r in tr.requests[:3]
        ]
        assert run.extra["prompt_tokens_exact"] is True
        ar, ng = run, runs[f"replay-ngram-tp1-c256-speed{speed}x"]
        assert ar.round_digests == ng.round_digests  # same ids, outputs, seeds, arrival offsets
        assert sorted(got[f"replay-ar-tp1-c256-speed{speed}x"], key=lambda r: r.tag) == sorted(
            got[f"replay-ngram-tp1-c256-speed{speed}x"], key=lambda r: r.tag
        )
    assert (
        runs["replay-ar-tp1-c256-speed4x"].round_digests != runs["replay-ar-tp1-c256-speed8x"].round_digests
    )


def test_the_embedded_engine_serves_shared_prefixes_from_its_cache(tmp_path: Path) -> None:
    """One request at a time: each prompt's cached tokens are at least what its shared blocks
    hold with an earlier request (and its sequence); the hit rate is what the records sum to."""
    from pytest_specbench.engines.hf import HFEngine

    m = parse(
        _trace_doc(SMALL, concurrency=[1], rounds=1, warmup=0, max_output_tokens=4, speed=[100]),
        str(tmp_path / "m.yaml"),
    )
    cell = next(c for c in m.cells("trace") if c.method.name == "ar")
    eng = HFEngine(cell.group)
    try:
        run = workloads.run(eng, cell)
    finally:
        eng.close()
    tr = traces.load_trace(SMALL)
    recs = sorted(run.records, key=lambda r: int(r.tag.split("req")[1]))
    assert recs[0].cached_tokens == 0
    for i, r in enumerate(recs):
        # an earlier prompt holds its shared blocks up to its own length (its reply is the model's)
        expect = max(
            (
                min(
                    32 * common_prefix(tr.requests[i].hash_ids, tr.requests[j].hash_ids),
                    tr.requests[j].input_length,
                )
                for j in range(i)
            ),
            default=0,
        )
        expect = min(expect, r.prompt_tokens - 1)
        assert r.cached_tokens >= (expect if expect >= 16 else 0), (i, r.cached_tokens, expect)
    m_ = metrics.prefix_cache(recs)
    assert m_["cached_tokens"] == sum(r.cached_tokens for r in recs) > 0
    assert m_["prefix_cache_hit_rate"] == pytest.approx(
        m_["cached_tokens"] / sum(r.prompt_tokens for r in recs)
    )
    assert m_["prefix_cache_reported"] == f"{len(recs)} of {len(recs)} requests"
    assert run.extra["trace_prefix_reuse"] == pytest.approx(tr.prefix_reuse(32), abs=1e-6)


class FakeKV:
    def __init__(self, n: int) -> None:
        self.n = n

    def crop(self, n: int) -> None:
        self.n = n


def test_prefix_cache_takes_the_longest_shared_prefix_and_keeps_one_token_to_compute() -> None:
    pc = PrefixCache(max_tokens=100, min_tokens=4)
    crop = FakeKV.crop
    pc.store(list(range(10)), FakeKV(10))
    pc.store([0, 1, 2, 3, 4, 50, 51, 52], FakeKV(8))
    n, kv = pc.lookup([0, 1, 2, 3, 4, 50, 51, 99], crop)
    assert (n, kv.n) == (7, 7)
    n, kv = pc.lookup(list(range(10)), crop)  # the whole prompt cached: its last token is computed
    assert (n, kv.n) == (9, 9)
    assert pc.lookup([0, 1, 2, 9], crop) == (0, None)  # 3 shared < min_tokens
    pc.store(list(range(12)), FakeKV(12))  # replaces its own prefix range(10)
    pc.store(list(range(200, 290)), FakeKV(90))  # over max_tokens with the others: oldest go first
    assert pc.lookup(list(range(12)) + [5], crop)[0] == 0
    assert pc.lookup(list(range(200, 290)), crop)[0] == 89
    pc.clear()
    assert pc.lookup(list(range(200, 290)), crop) == (0, None)


def test_cached_tokens_reported_or_said_not_to_be() -> None:
    assert base.cached_tokens({"cached_tokens": 7}) == 7
    assert base.cached_tokens({}, {"prompt_tokens_details": {"cached_tokens": 64}}) == 64
    assert base.cached_tokens({}, {"prompt_tokens_details": None}) is None
    assert base.cached_tokens({}) is None
    recs = [RequestRecord(100, 8, 0.1), RequestRecord(50, 8, 0.1)]
    assert metrics.prefix_cache(recs) == {
        "cached_tokens": 0,
        "prefix_cache_hit_rate": None,
        "prefix_cache_reported": "no request's engine reported it",
    }
    recs = [RequestRecord(100, 8, 0.1, cached_tokens=60), RequestRecord(50, 8, 0.1)]
    assert metrics.prefix_cache(recs)["prefix_cache_hit_rate"] == pytest.approx(0.6)


def test_speed_bench_rows_load_by_category(tmp_path: Path) -> None:
    path = str(FIX / "prompts" / "speed-bench-sample.jsonl")
    qs = prompts.load_questions(path)
    assert sorted({q.category for q in qs}) == ["coding", "high_entropy", "low_entropy", "math", "writing"]
    assert {q.sub_category for q in qs if q.category == "low_entropy"} == {"sorting", "code"}
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "t"}},
        "workloads": {"categories": {"questions": path, "categories": ["low_entropy", "math"]}},
    }
    ids = [c.id for c in parse(doc, str(tmp_path / "m.yaml")).cells()]
    assert ids == ["categories-ar-tp1-c1-out64-low_entropy", "categories-ar-tp1-c1-out64-math"]
    doc["workloads"]["categories"]["categories"] = ["mixed"]
    with pytest.raises(
        MatrixError, match=r"'mixed' is not a category of .*it has: coding, math, writing, low_entropy"
    ):
        parse(doc, str(tmp_path / "m.yaml"))
    bad = tmp_path / "sb.jsonl"
    row = {
        "question_id": "q1",
        "category": "rag",
        "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"],
    }
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"sb.jsonl:1: question 'q1' holds SPEED-Bench's placeholder"):
        prompts.load_questions(str(bad))
    with pytest.raises(ValueError, match=r"a Parquet file; give its rows as JSON lines"):
        prompts.load_questions(str(tmp_path / "throughput_1k.parquet"))


THINK = {
    "models": {"t": "embedded:tiny"},
    "methods": {"ar": {"backend": "hf", "model": "t"}},
    "workloads": {
        "think": {
            "kind": "throughput",
            "chat_template": True,
            "enable_thinking": [True, False],
            "concurrency": [2],
            "output_tokens": [4],
            "prompt_tokens": 64,
            "requests": 2,
            "rounds": 1,
            "warmup": 0,
        }
    },
}


def test_thinking_on_and_off_are_two_cells_with_different_exact_prompts(tmp_path: Path) -> None:
    from pytest_specbench.engines.hf import HFEngine

    cells = {c.id: c for c in parse(THINK, str(tmp_path / "m.yaml")).cells()}
    assert sorted(cells) == ["ar-tp1-c2-out4-nothink", "ar-tp1-c2-out4-think"]
    eng = HFEngine(cells["ar-tp1-c2-out4-think"].group)
    try:
        runs = {cid: workloads.run(eng, c) for cid, c in cells.items()}
    finally:
        eng.close()
    for run in runs.values():
        assert run.extra["prompt_tokens_exact"] is True
        assert {r.engine_prompt_tokens for r in run.records} == {64}
    assert runs["ar-tp1-c2-out4-think"].round_digests != runs["ar-tp1-c2-out4-nothink"].round_digests
    for cid, cell in cells.items():  # what was sent: the template's frame, thinking off or on
        fake = FakeTimedEngine()
        try:
            workloads.run(fake, cell)
        finally:
            fake.close()
        texts = [fake.tokenizer().decode(list(r.input_ids)) for r in fake.got]
        assert [len(r.input_ids) for r in fake.got] == [64, 64]
        assert all(t.startswith("<|im_start|>user\n") for t in texts)
        assert all(t.endswith("<think>\n\n</think>\n\n") == cid.endswith("nothink") for t in texts)
    tok = eng.tokenizer()
    on = prompts.make_chat_prompts(tok, 64, 1, 5, True)[0]
    off = prompts.make_chat_prompts(tok, 64, 1, 5, False)[0]
    assert len(on) == len(off) == 64 and on != off
    assert "<think>\n\n</think>" in tok.decode(list(off)) and "<think>" not in tok.decode(list(on))


def test_thinking_needs_a_template_that_takes_it(tmp_path: Path) -> None:
    class FakeChatTokenizer:
        chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

        def apply_chat_template(
            self, messages: Any, tokenize: bool, add_generation_prompt: bool, **kw: Any
        ) -> str:
            return "user: " + messages[0]["content"] + "\nassistant: "

        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return list(text.encode())

    with pytest.raises(
        ValueError,
        match=r"cell c: enable_thinking is an axis, but the target's chat template renders the same",
    ):
        prompts.check_thinking(FakeChatTokenizer(), "cell c")
    doc = json.loads(json.dumps(THINK))
    doc["workloads"]["think"]["chat_template"] = False
    with pytest.raises(
        MatrixError,
        match=r"workloads.think.enable_thinking: is passed to the chat template: set chat_template: true",
    ):
        parse(doc, str(tmp_path / "m.yaml"))
    doc["workloads"] = {"c": {"kind": "categories", "chat_template": True}}
    with pytest.raises(
        MatrixError, match=r"workloads.c.chat_template: .*always renders its prompts through the template"
    ):
        parse(doc, str(tmp_path / "m.yaml"))


def test_the_summary_names_the_cells_the_prefix_cache_served() -> None:
    from pytest_specbench.report import decide

    doc = {
        "benchmarks": [
            {
                "param": "replay-ar",
                "extra_info": {
                    "prefix_cache_hit_rate": 0.644,
                    "prompt_tokens": 1189072,
                    "trace_prefix_reuse": 0.701,
                },
            },
            {"param": "turns-ar", "extra_info": {"prefix_cache_hit_rate": 0.5, "prompt_tokens": 400}},
            {"param": "plain-ar", "extra_info": {"prefix_cache_hit_rate": 0.0, "prompt_tokens": 400}},
            {"param": "http-ar", "extra_info": {"prefix_cache_hit_rate": None, "prompt_tokens": 400}},
            {
                "param": "replay-none",
                "extra_info": {"prefix_cache_hit_rate": 0.0, "prompt_tokens": 90, "trace_prefix_reuse": 0.3},
            },
            {
                "param": "replay-http",
                "extra_info": {"prefix_cache_hit_rate": None, "prompt_tokens": 90, "trace_prefix_reuse": 0.3},
            },
        ]
    }
    assert decide.prefix_hits(doc) == [
        "replay-ar: 64.4% of 1,189,072 prompt tokens from the cache (the trace's own reuse 70.1%)",
        "turns-ar: 50.0% of 400 prompt tokens from the cache",
        "replay-none: 0.0% of 90 prompt tokens from the cache (the trace's own reuse 30.0%)",
        "replay-http: no engine reported hits for its 90 prompt tokens from the cache "
        "(the trace's own reuse 30.0%)",
    ]


def test_a_trace_without_a_span_or_with_odd_fields_is_refused(tmp_path: Path) -> None:
    burst = tmp_path / "burst.jsonl"
    burst.write_text("".join('{"timestamp": 5, "input_length": 20, "output_length": 4}\n' for _ in range(3)))
    with pytest.raises(
        MatrixError, match=r"workloads.replay.trace: 3 request\(s\) arriving at one time: .*kind throughput"
    ):
        parse(_trace_doc(str(burst)), str(tmp_path / "m.yaml"))
    with pytest.raises(MatrixError, match=r"workloads.replay.cut: give requests: N .*and/or seconds: T"):
        parse(_trace_doc(SMALL, cut={}), str(tmp_path / "m.yaml"))
    with pytest.raises(
        MatrixError, match=r"workloads.replay.cut: 1 request\(s\) arriving at one time after the cut"
    ):
        parse(_trace_doc(SMALL, cut={"requests": 1}), str(tmp_path / "m.yaml"))
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": 0}\n')
    with pytest.raises(ValueError, match=r"odd.jsonl:1: hash_ids must be a list of integers; got 0"):
        traces.load_trace(str(odd))
    odd.write_text('{"timestamp": 0, "input_length": Infinity, "output_length": 4}\n')
    with pytest.raises(ValueError, match=r"odd.jsonl:1: 'input_length' must be a finite number; got inf"):
        traces.load_trace(str(odd))
    odd.write_text('{"timestamp": 0, "input_length": 0, "output_length": 4}\n')
    with pytest.raises(ValueError, match=r"odd.jsonl:1: 'input_length' must be a whole number >= 1; got 0"):
        traces.load_trace(str(odd))


def test_the_offered_rate_of_a_trace_counts_from_its_first_arrival(tmp_path: Path) -> None:
    m = parse(_trace_doc(SMALL, speed=[4], rounds=1, warmup=0, max_output_tokens=2), str(tmp_path / "m.yaml"))
    cell = next(c for c in m.cells("trace") if c.method.name == "ar")
    eng = FakeTimedEngine()
    try:
        run = workloads.run(eng, cell)
    finally:
        eng.close()
    tr = traces.load_trace(SMALL)
    assert run.extra["offered_request_rates"] == [round(23 / (tr.duration_s / 4), 4)]
    assert cell.request_rate == pytest.approx(23 / (tr.duration_s / 4))


def test_the_hf_prefix_cache_can_be_turned_off(tmp_path: Path) -> None:
    from pytest_specbench.engines.hf import HFEngine

    doc = _trace_doc(
        SMALL, concurrency=[1], rounds=1, warmup=0, max_output_tokens=2, speed=[100], cut={"requests": 6}
    )
    doc["methods"]["ar"]["engine_args"] = {"disable_radix_cache": True}
    cell = next(c for c in parse(doc, str(tmp_path / "m.yaml")).cells("trace") if c.method.name == "ar")
    eng = HFEngine(cell.group)
    try:
        run = workloads.run(eng, cell)
    finally:
        eng.close()
    assert eng.info["prefix_cache"] is False
    assert [r.cached_tokens for r in run.records] == [0] * 6
    assert traces.load_trace(SMALL, requests=6).prefix_reuse(32) > 0  # there was reuse to find


def _entries_hold_their_own_kv(eng: Any) -> None:
    """Every entry, looked up by its own key, gives exactly the KV a fresh prefill of that key
    computes (the model's outputs alone could hide a corrupted entry: a tiny model with seeded
    weights repeats itself)."""
    import torch
    from transformers import DynamicCache

    from pytest_specbench.engines.hf import _crop, _prefill

    keys = list(eng._prefixes._entries)
    assert len(keys) >= 3
    for key in keys:
        n, got = eng._prefixes.lookup(key, _crop)
        assert n == len(key) - 1 and got.get_seq_length() == n
        fresh = DynamicCache()
        with torch.inference_mode():
            _prefill(eng.target, list(key[:n]), fresh)
        for a, b in zip(got.layers, fresh.layers, strict=True):
            assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)


@pytest.mark.slow
def test_outputs_from_the_prefix_cache_equal_outputs_without_it(tmp_path: Path) -> None:
    """Entries share their tensors with the requests that made and reused them: a request that
    extends a cached prefix, decodes and is cropped must leave the entry as it was."""
    from pytest_specbench.engines.hf import HFEngine

    doc = _trace_doc(SMALL)
    doc["methods"] = {
        "ar": {"backend": "hf", "model": "t"},
        "nocache": {"backend": "hf", "model": "t", "engine_args": {"disable_radix_cache": True}},
        "ngram": {
            "backend": "hf",
            "model": "t",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": 4},
        },
    }
    groups = {g.method.name: g for g in parse(doc, str(tmp_path / "m.yaml")).groups()}
    tok = _tiny_tokenizer()
    p = list(prompts.exact_prompt(tok, 120, 1))
    x, y = list(prompts.exact_prompt(tok, 30, 2)), list(prompts.exact_prompt(tok, 30, 3))
    asks = [p, p + x, p, p + y, p + x]
    outs: dict[str, list[tuple[int, ...]]] = {}
    hits: dict[str, list[int | None]] = {}
    for name in ("ar", "nocache", "ngram"):
        eng = HFEngine(groups[name])
        try:
            recs = [eng.generate(Request(tuple(a), 12)) for a in asks]
            if name != "nocache":
                _entries_hold_their_own_kv(eng)
        finally:
            eng.close()
        outs[name] = [r.output_ids for r in recs]
        hits[name] = [r.cached_tokens for r in recs]
    assert outs["ar"] == outs["nocache"] == outs["ngram"]  # greedy: the same tokens every way
    assert hits["nocache"] == [0] * 5
    assert hits["ar"][0] == 0 and hits["ar"][1] >= 120 and hits["ar"][2] == 119  # p's last token computed
    assert hits["ar"][4] == 149  # p + x, from the second request's whole sequence (its last token computed)


def test_a_trace_with_an_absurd_length_or_bytes_that_are_not_utf8_is_refused_at_load(tmp_path: Path) -> None:
    """An input or output length beyond any context is refused while the matrix loads (before an
    engine starts, which would build the prompt), naming the file, line, field and range; so is a
    line that is not UTF-8."""
    huge = tmp_path / "huge.jsonl"
    huge.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
        '{"timestamp": 5, "input_length": 1e12, "output_length": 5}\n'
    )
    with pytest.raises(
        MatrixError,
        match=r"workloads.replay.trace: .*huge.jsonl:2: 'input_length' must be a whole number of tokens "
        r"from 1 to 10,000,000; got 1000000000000.0$",
    ):
        parse(_trace_doc(str(huge)), str(tmp_path / "m.yaml"))
    huge.write_text('{"timestamp": 0, "input_length": 10, "output_length": 10000001}\n')
    with pytest.raises(
        ValueError, match=r"huge.jsonl:1: 'output_length' must be a whole number of tokens from 1"
    ):
        traces.load_trace(str(huge))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        b'{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
        b'{"timestamp": 5, "input_length": 10, "output_length": 5, "note": "caf\xe9"}\n'
    )
    with pytest.raises(
        MatrixError,
        match=r"workloads.replay.trace: .*latin.jsonl:2: not UTF-8 text \(byte 0xe9 at column 70\)",
    ):
        parse(_trace_doc(str(latin)), str(tmp_path / "m.yaml"))


def test_duplicate_question_ids_are_refused(tmp_path: Path) -> None:
    """Two questions with one id would count twice in a category comparison: refused, naming the
    file, both lines and the id; a question file that is not UTF-8 names its line."""
    path = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["A poem."]},
        {"question_id": 82, "category": "math", "turns": ["2 + 2?"]},
        {"question_id": 81, "category": "writing", "turns": ["Another poem."]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        ValueError, match=r"q.jsonl:3: question_id '81' is also on line 1; every question needs"
    ):
        prompts.load_questions(str(path))
    path.write_bytes(json.dumps(rows[0]).encode() + b'\n{"question_id": 9, "\xff')
    with pytest.raises(ValueError, match=r"q.jsonl:2: not UTF-8 text \(byte 0xff at column 21\)"):
        prompts.load_questions(str(path))


@pytest.mark.parametrize(
    "args, says",
    [
        (["--rate", "inf"], "--rate must be a number of arrivals per second in (0, 1e+06]; got inf"),
        (["--rate", "nan"], "--rate must be a number of arrivals per second in (0, 1e+06]; got nan"),
        (["--requests", "1"], "--requests must be >= 2: a replay needs arrivals at two times at least"),
        (["--rate", "1e6", "--requests", "50"], "not written: all 50 arrivals fall in one millisecond"),
        (["--rate", "1e-7", "--requests", "50"], "more than the year a trace may span: raise --rate"),
        (
            ["--block", "1000000"],
            "a request could reach 13,000,000 tokens; a trace allows at most 10,000,000",
        ),
    ],
)
def test_make_trace_refuses_what_the_plugin_would_refuse(tmp_path: Path, args: list[str], says: str) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(root / "scripts" / "make_trace.py"), str(out)]
    res = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, no scratch file left
    # the smallest trace it writes is one the plugin replays
    res = subprocess.run([*cmd, "--requests", "2", "--rate", "50"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    m = parse(_trace_doc(str(out)), str(tmp_path / "m.yaml"))
    assert m.workloads[0].trace_requests == 2
