"""Steady state: a closed-loop cell is measured while all C slots are busy, not timed by its
slowest request. FakeAcceptEngine's speculative method draws each request's accept length from
1-4 (2.5 on average), and a request takes out / a steps of STEP_S: latency varies with
acceptance, as it does under speculation."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import pytest

from pytest_specbench.engines.base import Request, RequestRecord, guard
from pytest_specbench.matrix.schema import parse
from pytest_specbench.stats import paired
from pytest_specbench.stats.metrics import cell_metrics
from pytest_specbench.workloads import kinds as workloads

STEP_S = 0.004  # one decode step; 32 tokens at AR: 128 ms a request
ACCEPT = (1, 2, 3, 4)


def accept_of(tag: str) -> int:
    return ACCEPT[zlib.crc32(tag.encode()) % len(ACCEPT)]


class FakeAcceptEngine:
    """No batching: each request runs on its own clock, so C slots give C times one slot's rate."""

    backend = "fake"
    deadline: float | None = None

    def __init__(self, speculative: bool):
        self.spec = speculative
        self._loop = asyncio.new_event_loop()

    async def agenerate(self, request: Request) -> RequestRecord:
        a = accept_of(request.tag) if self.spec else 1
        steps = -(-request.max_new_tokens // a)
        await asyncio.sleep(steps * STEP_S)
        return RequestRecord(1, request.max_new_tokens, steps * STEP_S, verify_steps=steps, tag=request.tag)

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(guard(coro, None))

    def tokenizer(self) -> Any:
        from fake_engine import FakeTokenizer

        return FakeTokenizer()

    def flush_cache(self) -> None:
        pass


def _matrix(extra: dict[str, Any]) -> Any:
    w = {"concurrency": [8], "output_tokens": [32], "prompt_tokens": 8, "rounds": 3, "warmup": 0, **extra}
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": {"backend": "hf", "model": "m"}, "spec": {"backend": "hf", "model": "m"}},
        "workloads": {"throughput": w},
    }
    return {c.method.name: c for c in parse(doc, "m.yaml").cells()}


def _measure(extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], float, float]:
    """Both methods on the same requests; the spec cell's metrics, its comparison with AR, the
    steady-state expectation from the requests' own accept lengths, and the same from their
    durations as they ran."""
    cells = _matrix(extra)
    out = {}
    mean_ran = {}
    for name, cell in cells.items():
        eng = FakeAcceptEngine(speculative=name == "spec")
        run = workloads.run(eng, cell)
        eng._loop.close()
        mean_ran[name] = _ran(run.records)
        n = cell.workload.requests_per_round(cell.concurrency)
        out[name] = {"params": cell.params(), "round_times": run.round_times}
        out[name]["metrics"] = cell_metrics(
            run.records,
            run.round_times,
            run.round_output_tokens,
            request_digests=run.round_digests,
            round_windows=run.round_windows,
            one_wave=n <= cell.concurrency,
        )
    # C slots each completing requests back to back: tokens/s = C x out / mean latency, so the
    # expected speedup is AR's mean latency over spec's (steps: out for AR, out / a for spec).
    # ``ran``: the same from the requests' durations as they ran, which a loaded machine
    # stretches (each sleep wakes late by about as much for a short request as for a long one,
    # which pulls the ratio toward 1: 1.695 read against 1.910 scripted at load 5-16)
    ran = mean_ran["ar"] / mean_ran["spec"]
    tags = out["spec"]["metrics"]["per_request"]["tag"]
    out_t = 32
    ar_steps = out_t
    spec_steps = [-(-out_t // accept_of(t)) for t in tags]
    expected = ar_steps / (sum(spec_steps) / len(spec_steps))
    return out["spec"]["metrics"], paired.compare(out["spec"], out["ar"]), expected, ran


def _ran(records: list[RequestRecord]) -> float:
    """The requests' mean duration as they ran (end - start on the workload's clock)."""
    durations = [r.end_s - r.start_s for r in records if r.start_s is not None and r.end_s is not None]
    assert len(durations) == len(records)
    return sum(durations) / len(durations)


def test_the_default_shape_reports_the_steady_state_speedup() -> None:
    """Default requests per round (4 waves of C = 8): the speedup is within 10 % of the steady
    state's, AR's mean request duration over spec's as the requests ran (on an idle machine the
    script's: 32 steps over 32 / a); the one-wave cell of the same shape is timed by its slowest
    request and says so."""
    m, cmp, expected, ran = _measure({})
    assert m["tok_s_estimator"] == "steady window" and m["requests"] == 3 * 32
    assert cmp["speedup_vs_ar"] == pytest.approx(ran, rel=0.10), (cmp["speedup_vs_ar"], ran, expected)
    assert expected > 1.6  # 1 / mean(1/a) over the drawn accept lengths
    one, one_cmp, one_expected, _ = _measure({"waves": 1})
    assert one["tok_s_estimator"] == "one wave" and "steady_windows" not in one
    # lockstep: 8 requests a round, nearly always one with a = 1, so the round takes AR's time
    assert one_cmp["speedup_vs_ar"] < 0.8 * one_expected
