"""Workloads: exact prompts, streaming accounting, open loop, agentic history, categories."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from pytest_specbench.engines import base
from pytest_specbench.engines.base import Request, RequestRecord
from pytest_specbench.inputs import prompts
from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.stats import metrics
from pytest_specbench.workloads import kinds as workloads


class FakeClock:
    """perf_counter that returns scripted times, one per call."""

    def __init__(self, times: list[float]):
        self.times = list(times)

    def perf_counter(self) -> float:
        return self.times.pop(0)


class FakeChunkStream:
    """SGLang-style cumulative chunks: several tokens per chunk, one chunk adding none."""

    def __init__(self, counts: list[int]):
        self.counts = counts

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for n in self.counts:
            yield {"meta_info": {"completion_tokens": n, "spec_verify_ct": 4}, "text": "x" * n}


def test_itl_accounting_with_multi_token_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = [1, 4, 4, 8, 9]
    # t0, one time per chunk, the end
    clock = FakeClock([10.0, 10.10, 10.16, 10.17, 10.25, 10.27, 10.30])
    monkeypatch.setattr(base, "time", clock)

    async def submit():
        return FakeChunkStream(counts)

    def parse(chunk):
        return chunk["meta_info"]["completion_tokens"], chunk["meta_info"]

    rec = asyncio.run(base.timed_stream(submit, 7, "t", parse))
    assert rec.output_tokens == 9
    assert rec.ttft_s == pytest.approx(0.10)
    assert rec.latency_s == pytest.approx(0.30)
    assert [n for _, n in rec.chunks] == [1, 4, 8, 9]  # the chunk adding nothing is not timed
    gaps = metrics.itl_gaps(rec.chunks)
    # 3 tokens in 60 ms, 4 tokens in 90 ms, 1 token in 20 ms: one gap per token, not per chunk
    assert gaps == pytest.approx([0.02] * 3 + [0.0225] * 4 + [0.02])
    assert len(gaps) == rec.output_tokens - 1
    assert metrics.tpot(rec) == pytest.approx((0.30 - 0.10) / 8)
    m = metrics.summarize([rec], 1.0)
    assert m["itl_ms_p50"] == pytest.approx(21.25)  # 4 gaps of 20 ms, 4 of 22.5 ms
    assert m["itl_ms_p99"] == pytest.approx(22.5)
    assert m["accept_length"] == pytest.approx(9 / 4)


def _tiny_tokenizer():
    from transformers import AutoTokenizer

    from pytest_specbench.inputs import tinymodel

    return AutoTokenizer.from_pretrained(tinymodel.resolve("embedded:tiny"))


@pytest.mark.parametrize("n", [3000, 30000, 100000])
def test_long_context_prompts_are_exact_and_distinct(n: int) -> None:
    """The tokenizer of the embedded model (also the GPU dummy models' tokenizer)."""
    tok = _tiny_tokenizer()
    ps = prompts.make_prompts(tok, n, 3, seed=11)
    for p in ps:
        assert len(p) == n
        assert len(tok.encode(tok.decode(list(p)), add_special_tokens=False)) == n  # re-encoding
    for a, b in ((0, 1), (0, 2), (1, 2)):
        shared = len(os.path.commonprefix([list(ps[a][:256]), list(ps[b][:256])]))
        assert shared < 16, f"requests {a} and {b} share a {shared}-token prefix"


def test_prompt_cache_is_not_fooled_by_a_reused_object_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once failed: a collected byte-level tokenizer's id came back for the tiny tokenizer,
    and its cached encodings were returned (30000 ids that decoded to mojibake)."""
    from fake_engine import FakeTokenizer

    tok = _tiny_tokenizer()
    stale = FakeTokenizer()
    monkeypatch.setitem(prompts._ENCODED, id(tok), (stale, [[104, 101, 32]] * 8))
    (p,) = prompts.make_prompts(tok, 500, 1, seed=3)
    assert len(tok.encode(tok.decode(list(p)), add_special_tokens=False)) == 500
    assert prompts._ENCODED[id(tok)][0] is tok


def test_open_loop_counts_client_queue_time() -> None:
    class SlowEngine:
        async def agenerate(self, req: Request) -> RequestRecord:
            await asyncio.sleep(0.05)
            return RequestRecord(len(req.input_ids), req.max_new_tokens, 0.05, ttft_s=0.01, tag=req.tag)

    reqs = [Request((1, 2, 3), 4, tag=f"r{i}") for i in range(3)]
    recs = asyncio.run(base.open_loop(SlowEngine(), reqs, [0.0, 0.0, 0.0], max_in_flight=1))
    assert [r.tag for r in recs] == ["r0", "r1", "r2"]
    assert recs[0].queue_s < recs[1].queue_s < recs[2].queue_s
    for r in recs:  # queue time is in E2E and TTFT, and reported on its own
        assert r.latency_s == pytest.approx(0.05 + r.queue_s)
        assert r.ttft_s == pytest.approx(0.01 + r.queue_s)
    assert base.poisson_arrivals(4.0, 5, 1) == base.poisson_arrivals(4.0, 5, 1)
    arrivals = base.poisson_arrivals(4.0, 5, 1)
    assert all(b > a for a, b in zip(arrivals, arrivals[1:], strict=False))


AGENTIC = {
    "models": {"t": "embedded:tiny"},
    "methods": {
        "oracle": {
            "backend": "hf",
            "model": "t",
            "speculative": {"algorithm": "draft", "draft_model": "t", "num_draft_tokens": 3},
        }
    },
    "workloads": {"agentic": {"scenarios": ["calculator"], "output_tokens": [8], "rounds": 1, "warmup": 0}},
}


def test_agentic_history_grows_by_the_model_replies() -> None:
    from pytest_specbench.engines.hf import HFEngine

    m = parse(AGENTIC, "a.yaml")
    cell = m.cells("agentic")[0]
    assert cell.id == "agentic-oracle-tp1-c1-out8-calculator"
    eng = HFEngine(cell.group)
    try:
        run = workloads.run(eng, cell)
    finally:
        eng.close()
    turns = run.extra["turns"]
    assert [t["name"] for t in turns] == ["design", "implement", "review", "fix", "test"]
    sc = prompts.load_scenario("calculator")
    tok = eng.tokenizer()
    end = len(tok.encode("<|im_end|>\n", add_special_tokens=False))
    for prev, cur, turn in zip(turns, turns[1:], sc.turns[1:], strict=False):
        user = len(prompts.chat_ids(tok, [{"role": "user", "content": turn.user}], True))
        # next prompt = previous prompt + the model's 8 reply tokens + end of turn + next user turn
        assert cur["prompt_tokens_mean"] == prev["prompt_tokens_mean"] + 8 + end + user
    assert all(t["accept_length"] == 4.0 for t in turns)  # draft == target, K=3


def test_etl_scenario_embeds_the_script() -> None:
    sc = prompts.load_scenario("etl")
    script = (prompts.fixtures_dir() / "agentic" / "etl_pipeline.py").read_text()
    assert script in sc.turns[0].user
    assert 180 <= len(script.splitlines()) <= 230
    assert len(sc.turns) == 5


def test_categories_and_question_files(tmp_path: Path) -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "t"}},
        "workloads": {"categories": {"categories": ["code", "math"]}},
    }
    ids = [c.id for c in parse(doc, str(tmp_path / "m.yaml")).cells()]
    assert ids == ["categories-ar-tp1-c1-out64-code", "categories-ar-tp1-c1-out64-math"]
    cats = {q.category for q in prompts.load_questions()}
    assert cats == {"chat", "code", "math", "translation", "summarization", "qa", "rag"}
    doc["workloads"]["categories"]["categories"] = ["poetry"]
    with pytest.raises(
        MatrixError,
        match=r"m.yaml: workloads.categories.categories\[0\]: 'poetry' is not a "
        r"category of the built-in prompt set; it has: chat, code",
    ):
        parse(doc, str(tmp_path / "m.yaml"))
    # a Spec-Bench / MT-Bench question.jsonl from a path relative to the matrix
    (tmp_path / "q.jsonl").write_text(
        '{"question_id": 81, "category": "writing", "turns": ["a", "b"]}\n'
        '{"question_id": 82, "category": "roleplay", "turns": ["c"]}\n'
    )
    doc["workloads"]["categories"] = {"questions": "q.jsonl"}
    cells = parse(doc, str(tmp_path / "m.yaml")).cells()
    assert [c.params()["category"] for c in cells] == ["writing", "roleplay"]
    (tmp_path / "bad.jsonl").write_text('{"question_id": 1, "category": "x", "turns": ["a"]}\nnot json\n')
    doc["workloads"]["categories"] = {"questions": "bad.jsonl"}
    with pytest.raises(MatrixError, match=r"workloads.categories.questions: .*bad.jsonl:2: not valid JSON"):
        parse(doc, str(tmp_path / "m.yaml"))


def test_workload_axes_errors_name_the_key(tmp_path: Path) -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "t"}},
        "workloads": {"agentic": {"scenarios": ["nope"]}},
    }
    with pytest.raises(
        MatrixError,
        match=r"workloads.agentic.scenarios\[0\]: .*nope.yaml: no such scenario "
        r"file; built-in scenarios: calculator, etl",
    ):
        parse(doc, "m.yaml")
    doc["workloads"] = {"throughput": {"request_rate": [0]}}
    with pytest.raises(
        MatrixError,
        match=r"workloads.throughput.request_rate\[0\]: expected requests per "
        "second > 0",
    ):
        parse(doc, "m.yaml")
    doc["workloads"] = {"ttft": {"scenarios": ["etl"]}}
    with pytest.raises(MatrixError, match="workloads.ttft.scenarios: only for workload kind agentic"):
        parse(doc, "m.yaml")
    doc["workloads"] = {"poisson": {"kind": "throughput", "request_rate": [2.5], "concurrency": [8]}}
    assert [c.id for c in parse(doc, "m.yaml").cells()] == ["ar-tp1-c8-out64-rate2.5"]


EVERY_KIND = {
    "models": {"t": "embedded:tiny", "d": "embedded:tiny-draft"},
    "methods": {
        "draft": {
            "backend": "hf",
            "model": "t",
            "speculative": {"algorithm": "draft", "draft_model": "d", "num_draft_tokens": 3},
        }
    },
    "workloads": {
        "throughput": {
            "concurrency": [2],
            "output_tokens": [8],
            "prompt_tokens": 32,
            "rounds": 1,
            "warmup": 0,
        },
        "poisson": {
            "kind": "throughput",
            "request_rate": [50],
            "concurrency": [2],
            "output_tokens": [8],
            "prompt_tokens": 32,
            "requests": 3,
            "rounds": 1,
            "warmup": 0,
        },
        "ttft": {"concurrency": [2], "output_tokens": [8], "prompt_tokens": 32, "rounds": 1, "warmup": 0},
        "long_context": {"context_tokens": [512], "output_tokens": [8], "rounds": 1, "warmup": 0},
        "categories": {
            "categories": ["math"],
            "concurrency": [3],
            "output_tokens": [8],
            "rounds": 1,
            "warmup": 0,
        },
    },
}


def test_every_workload_kind_on_the_hf_engine() -> None:
    from pytest_specbench.engines.hf import HFEngine

    m = parse(EVERY_KIND, "k.yaml")
    cells = {c.workload.name: c for c in m.cells()}
    assert set(cells) == {"throughput", "poisson", "ttft", "long_context", "categories"}
    eng = HFEngine(next(iter(cells.values())).group)
    try:
        runs = {name: workloads.run(eng, c) for name, c in cells.items()}
    finally:
        eng.close()
    assert len(runs["throughput"].records) == 8  # default: 4 waves of concurrency 2
    assert runs["throughput"].round_windows[0] is not None  # refilled slots: a steady window
    assert len(runs["poisson"].records) == 3 and runs["poisson"].extra["request_rate"] == 50
    assert runs["long_context"].extra["prompt_tokens_exact"] is True
    assert {r.prompt_tokens for r in runs["long_context"].records} == {512}
    assert len(runs["categories"].records) == 3 and runs["categories"].extra["category"] == "math"
    for name, run in runs.items():
        for r in run.records:
            assert r.error is None and r.output_tokens == 8, name
            assert len(metrics.itl_gaps(r.chunks)) == 7, name  # one gap per token after the first
            assert r.verify_steps is not None and r.verify_steps >= 2, name
