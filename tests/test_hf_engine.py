"""The embedded default for real: tiny model build, exact acceptance, lossless speculation."""

from __future__ import annotations

import dataclasses
import filecmp
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_specbench.engines.base import Request, run_requests
from pytest_specbench.engines.hf import HFEngine, ngram_propose
from pytest_specbench.inputs import prompts, tinymodel
from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.schema import parse

K = 3
DOC = {
    "models": {"tiny": "embedded:tiny", "tiny-draft": "embedded:tiny-draft"},
    "methods": {
        "ar": {"backend": "hf", "model": "tiny"},
        "ngram": {
            "backend": "hf",
            "model": "tiny",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": 4},
        },
        "draft": {
            "backend": "hf",
            "model": "tiny",
            "speculative": {"algorithm": "draft", "draft_model": "tiny-draft", "num_draft_tokens": K},
        },
        "draft-oracle": {
            "backend": "hf",
            "model": "tiny",
            "speculative": {"algorithm": "draft", "draft_model": "tiny", "num_draft_tokens": K},
        },
    },
    "workloads": {"throughput": {}},
}
MATRIX = parse(DOC, "test")


@pytest.fixture(scope="module")
def outputs() -> dict[str, list]:
    """Greedy outputs (48 tokens = 12 x (K+1)) of every method for the same 3 prompts."""
    res: dict[str, list] = {}
    for m in MATRIX.methods:
        eng = HFEngine(EngineGroup(m, 1))
        ps = prompts.make_prompts(eng.tokenizer(), 40, 3, seed=7)
        res[m.name] = run_requests(eng, [Request(p, 48) for p in ps], concurrency=2)
        eng.close()
    return res


def test_oracle_accepts_every_draft(outputs) -> None:
    for r in outputs["draft-oracle"]:
        assert r.output_tokens == 48
        assert r.output_tokens / r.verify_steps == K + 1  # exactly, not approximately
        assert r.accept_histogram[K] == r.verify_steps - 1  # the last step proposes fewer: cap


@pytest.mark.parametrize("method", ["ngram", "draft", "draft-oracle"])
def test_speculation_is_lossless(outputs, method) -> None:
    assert [r.output_ids for r in outputs[method]] == [r.output_ids for r in outputs["ar"]]
    assert all(len(r.output_ids) == 48 for r in outputs[method])


def test_acceptance_is_real(outputs) -> None:
    from pytest_specbench.stats.metrics import accept_length

    assert accept_length(outputs["ar"]) is None
    assert 1.0 < accept_length(outputs["draft"]) < K + 1  # a one-layer draft: right often, not always
    # the tiny model repeats itself: prompt lookup finds some of it
    assert 1.0 < accept_length(outputs["ngram"]) < K + 2


def test_streamed_chunks_carry_verified_tokens(outputs) -> None:
    r = outputs["draft-oracle"][0]
    sizes = [b - a for (_, a), (_, b) in zip(((0, 0),) + r.chunks, r.chunks, strict=False)]
    assert sizes[0] == 1 and sizes[1:-1] == [K + 1] * (len(sizes) - 2)


def test_ngram_propose() -> None:
    assert ngram_propose([1, 2, 3, 4, 1, 2], 2, 3) == [3, 4]
    assert ngram_propose([5, 6, 7], 2, 3) == []
    assert ngram_propose([1, 2, 9, 1, 2, 7, 1, 2], 1, 2) == [7]  # latest occurrence wins


def test_tiny_model_build_is_deterministic(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    tinymodel.build(a)
    tinymodel.build(b)
    for sub in ("tiny", "tiny-draft"):
        files = sorted(p.name for p in (a / sub).iterdir())
        assert "model.safetensors" in files and "tokenizer.json" in files
        match, mismatch, errors = filecmp.cmpfiles(a / sub, b / sub, files, shallow=False)
        assert mismatch == [] and errors == []


def test_prompts_are_exact_and_distinct() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tinymodel.resolve("embedded:tiny"))
    ps = prompts.make_prompts(tok, 300, 6, seed=1)
    assert all(len(p) == 300 for p in ps)
    assert len({p[:32] for p in ps}) == 6


def test_oracle_check_for_draft_equal_target() -> None:
    from pytest_specbench.stats.metrics import oracle_check

    assert oracle_check(MATRIX.method("ar"), None) == {}
    assert oracle_check(MATRIX.method("draft"), 2.5) == {}  # another draft model: no oracle
    assert oracle_check(MATRIX.method("draft-oracle"), 4.0) == {
        "oracle_accept_expected": 4,
        "oracle_exact": True,
    }
    sa = parse(
        {
            "models": {"t": "embedded:tiny"},
            "methods": {
                "sa": {
                    "backend": "sglang",
                    "model": "t",
                    "speculative": {"algorithm": "standalone", "draft_model": "t", "num_steps": 3},
                }
            },
            "workloads": {"throughput": {}},
        },
        "m.yaml",
    ).method("sa")
    assert oracle_check(sa, 4.0) == {"oracle_accept_expected": 4, "oracle_exact": True}
    # the H200's standalone at c32 with 2 waves: 3.998048 is not exact
    assert oracle_check(sa, 3.9980478282088825)["oracle_exact"] is False
    assert oracle_check(sa, None)["oracle_exact"] is False
    # the last verify step is capped: 256 tokens at 5 steps take 1 + 43 steps (H200: 5.953488)
    sa5 = dataclasses.replace(sa, speculative=dataclasses.replace(sa.speculative, num_steps=5))
    assert oracle_check(sa5, 256 / 43, 256) == {"oracle_accept_expected": 256 / 43, "oracle_exact": True}
    assert oracle_check(sa5, 6.0, 256)["oracle_exact"] is False
    assert oracle_check(sa, 4.0, 256)["oracle_accept_expected"] == 4.0


def test_xdist_workers_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pytest_specbench.engines.hf import _share_cores

    class FakeTorch:
        threads: list[int] = []

        def set_num_threads(self, n: int) -> None:
            self.threads.append(n)

    t = FakeTorch()
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    _share_cores(t)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # the user's choice stands
    _share_cores(t)
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")  # one process: torch's default
    _share_cores(t)
    assert t.threads == [4]


class FakeQueuedPool(ThreadPoolExecutor):
    """One worker that starts each request 1 s after it was handed over: a request that waits
    in the engine before its prefill."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        def later():  # type: ignore[no-untyped-def]
            time.sleep(1.0)
            return fn(*args, **kwargs)

        return super().submit(later)


def test_hf_ttft_counts_from_submission_not_from_the_prefill() -> None:
    """A request that waited 1 s inside the engine before its prefill began has a TTFT and a
    latency of at least 1 s: both count from the submission. Timed from the prefill, a tiny
    model's TTFT reads a few ms. Only lower bounds: a busy machine can only make it later."""
    eng = HFEngine(EngineGroup(MATRIX.methods[0], 1))
    try:
        eng._pool.shutdown()
        eng._pool = FakeQueuedPool(max_workers=1)
        (p,) = prompts.make_prompts(eng.tokenizer(), 40, 1, seed=7)
        (rec,) = run_requests(eng, [Request(p, 4)], concurrency=1)
    finally:
        eng.close()
    assert rec.error is None and rec.output_tokens == 4
    assert rec.ttft_s is not None and rec.ttft_s >= 1.0, rec.ttft_s
    assert rec.latency_s >= 1.0 and rec.chunks[0][0] == rec.ttft_s
