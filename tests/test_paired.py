"""Paired comparisons: the same requests for every method of a shape, speedups with intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from bench_project import fake_conftest, write_project

from pytest_specbench.matrix import cells, schema
from pytest_specbench.stats import paired
from pytest_specbench.workloads import kinds as workloads

HERE = Path(__file__).parent
ROOT = HERE.parent


# ----------------------------------------------------------------------------- pure statistics


def test_ratio_interval_hand_computed() -> None:
    # log ratios: log 1.1, log 1.2, log 1.0 -> mean m, sd s, t(2) = 4.303
    iv = paired.ratio_interval([110.0, 120.0, 100.0], [100.0, 100.0, 100.0])
    assert iv is not None
    logs = [math.log(1.1), math.log(1.2), 0.0]
    m = sum(logs) / 3
    s = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    assert iv.point == pytest.approx(math.exp(m))
    assert iv.lo == pytest.approx(math.exp(m - 4.303 * s / math.sqrt(3)))
    assert iv.hi == pytest.approx(math.exp(m + 4.303 * s / math.sqrt(3)))
    assert iv.n == 3
    assert iv.verdict() == "not separated"  # lo < 1 < hi
    fast = paired.ratio_interval([150.0, 151.0, 149.0], [100.0, 100.0, 100.0])
    assert fast is not None and fast.verdict() == "faster"
    slow = paired.ratio_interval([50.0, 51.0, 49.0], [100.0, 100.0, 100.0])
    assert slow is not None and slow.verdict() == "slower"
    one = paired.ratio_interval([120.0], [100.0])
    assert one is not None and one.point == pytest.approx(1.2) and one.lo is None
    assert one.verdict() == "one pair: no interval"


def test_t_quantiles() -> None:
    assert paired.t975(1) == 12.706
    assert paired.t975(4) == 2.776
    assert paired.t975(100) == 1.96
    with pytest.raises(ValueError):
        paired.t975(0)


def test_cv() -> None:
    assert paired.cv([90.0, 110.0]) == pytest.approx(math.sqrt(200) / 100)
    assert paired.cv([5.0]) is None


def _result(method: str, rates: list[float], digests: list[str], **params: object) -> dict:
    return {
        "params": {"method": method, "workload": "throughput", "concurrency": 1, **params},
        "round_times": [1.0] * len(rates),
        "metrics": {
            "output_tokens_per_s": sum(rates) / len(rates),
            "round_tokens_per_s": rates,
            "request_digests": digests,
        },
    }


def test_unpaired_cells_get_no_speedup() -> None:
    ar = _result("ar", [100.0, 100.0], ["a", "b"])
    ng = _result("ngram", [150.0, 150.0], ["x", "y"])
    got = paired.compare_all([ar, ng], "ar")
    assert got[1]["speedup_pairing"] == "unpaired"
    assert "speedup_vs_ar" not in got[1]
    ng_paired = _result("ngram", [150.0, 160.0], ["a", "b"])
    got = paired.compare_all([ar, ng_paired], "ar")[1]
    assert got["speedup_pairing"] == "digest"
    assert got["speedup_vs_ar"] == pytest.approx(math.sqrt(1.5 * 1.6))
    assert got["speedup_pairs"] == 2 and len(got["speedup_vs_ar_ci95"]) == 2


def test_only_rounds_with_equal_digests_pair() -> None:
    ar = _result("ar", [100.0, 100.0, 100.0], ["a", "b", "c"])
    ng = _result("ngram", [200.0, 999.0, 200.0], ["a", "X", "c"])
    got = paired.compare_all([ar, ng], "ar")[1]
    assert got["speedup_pairs"] == 2 and got["speedup_vs_ar"] == pytest.approx(2.0)


def test_accept_difference_per_request() -> None:
    def spec(method: str, outs: list[int], steps: list[int]) -> dict:
        r = _result(method, [100.0], ["a"])
        r["metrics"]["accept_length"] = sum(outs) / sum(steps)
        r["metrics"]["per_request"] = {
            "tag": ["t0", "t1", "t2"],
            "output_tokens": outs,
            "verify_steps": steps,
        }
        return r

    a = spec("draft", [64, 64, 64], [16, 32, 16])  # 4, 2, 4
    b = spec("ngram", [64, 64, 64], [32, 32, 32])  # 2, 2, 2
    got = paired.compare_all([_result("ar", [100.0], ["a"]), a, b], "ar")
    d = got[1]["accept_vs"]["ngram"]
    assert d["diff"] == pytest.approx(4 / 3) and d["requests"] == 3
    assert got[2]["accept_vs"]["draft"]["diff"] == pytest.approx(-4 / 3)
    assert "accept_vs" not in got[0]


# ----------------------------------------------------------------------------- request pairing


def _cells(text: str) -> list[cells.Cell]:
    return schema.parse(yaml.safe_load(text), "m.yaml").cells()


PAIR_MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 3}}
tp: [1, 2]
workloads:
  throughput:
    {concurrency: [4], output_tokens: [8], prompt_tokens: 16, request_rate: [4], temperature: [0, 1]}
"""


def test_request_seed_depends_on_the_shape_not_the_method_or_tp() -> None:
    cells = _cells(PAIR_MATRIX)
    by_shape: dict[tuple, set[int]] = {}
    for c in cells:
        by_shape.setdefault(c.request_key, set()).add(workloads.request_seed(c, 1))
    assert len(by_shape) == 2  # two temperatures; four method x TP cells each
    assert all(len(seeds) == 1 for seeds in by_shape.values())
    assert len({next(iter(s)) for s in by_shape.values()}) == 2  # shapes differ


# ----------------------------------------------------------------------------- end to end

CONFTEST = fake_conftest("FakeTimedEngine", 'register_backend("fake-timed", FakeTimedEngine, gpu=False)')


def _twin_matrix() -> dict:
    """The default matrix's workloads (every kind, closed and open loop), on two identical
    engines ``ar`` and ``twin``, small enough to run in seconds, at temperature 0 and 1."""
    doc = yaml.safe_load((ROOT / "benches" / "specbench.yaml").read_text())
    doc["models"] = {"m": "/nonexistent/model"}
    doc["methods"] = {
        "ar": {"backend": "fake-timed", "model": "m"},
        "twin": {"backend": "fake-timed", "model": "m"},
    }
    for name, w in doc["workloads"].items():
        w.pop("methods", None)
        w.pop("slo", None)
        w.update(rounds=3, warmup=0, output_tokens=[12])
        if "context_tokens" in w:
            w["context_tokens"] = [300, 600]
        if "prompt_tokens" in w:
            w["prompt_tokens"] = 40
        if "request_rate" in w:
            w["request_rate"] = [40]  # 8 arrivals in about 0.2 s
        if w.get("kind", name) == "throughput":
            w["temperature"] = [0, 1.0]
        if w.get("kind", name) == "trace":
            w.pop("output_tokens")
            w["trace"] = str(ROOT / "fixtures" / "traces" / "chat-small.jsonl")
            w["max_output_tokens"] = 12
            w["speed"] = [8]  # 24 arrivals in about 0.6 s
        if w.get("kind", name) == "categories":
            w.pop("requests", None)
            w["categories"] = ["chat", "code"]
    return doc


@pytest.mark.slow
def test_two_identical_engines_compare_one_under_every_workload(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = _twin_matrix()
    kinds = {w.get("kind", n) for n, w in doc["workloads"].items()}
    assert kinds == set(cells.WORKLOAD_KINDS)
    write_project(pytester, yaml.safe_dump(doc), CONFTEST)
    log = tmp_path / "requests.log"
    monkeypatch.setenv("FAKE_REQUEST_LOG", str(log))
    # 100 ms requests: the client's own per-round overhead (about 1 ms, slightly different per
    # engine instance) and scheduling delays on a busy machine stay well under the 3% allowed
    monkeypatch.setenv("FAKE_TOKEN_S", "0.008")
    out = tmp_path / "out.json"
    res = pytester.runpytest(
        "benches", "-p", "no:cacheprovider", f"--benchmark-json={out}", "--specbench-summary", "full"
    )
    res.assert_outcomes(passed=len(schema.parse(doc, "m.yaml").cells()))
    results = json.loads(out.read_text())
    twins = [b for b in results["benchmarks"] if b["params"]["method"] == "twin"]
    ars = {
        b["param"].replace("-ar-", "-").removeprefix("ar-"): b
        for b in results["benchmarks"]
        if b["params"]["method"] == "ar"
    }
    assert twins and len(twins) == len(ars)
    open_loop = 0
    for b in twins:
        e = b["extra_info"]
        a = ars[b["param"].replace("-twin-", "-").removeprefix("twin-")]["extra_info"]
        assert e["request_digests"] == a["request_digests"], b["param"]
        assert e["speedup_pairing"] == "digest", b["param"]
        # never told apart: a tie, not separated, or no verdict when a neighbour process took the
        # CPU during one of the two cells (the suite's other workers under -n, a busy machine)
        v = e["speedup_verdict"]
        withheld = ("no verdict: the cell was disturbed (", "no verdict: its baseline was disturbed (")
        assert v in ("not separated", "within ±2%") or v.startswith(withheld), (b["param"], v)
        if not v.startswith("no verdict: "):
            # and no interval wholly outside 1 ± 3 %: on a busy 2-core machine an identical
            # engine's interval was seen at [1.005, 1.011] (inside the ±2% drift margin)
            lo, hi = e["speedup_vs_ar_ci95"]
            assert lo <= 1.03 and hi >= 0.97, (b["param"], lo, hi)
        assert e["rounds_cv"] is not None
        if b["params"].get("request_rate"):
            open_loop += 1
            assert e["speedup_metric"].startswith("latency_s_p50")
            # (a trace's rate in the params is rounded to 4 digits for its labels)
            assert e["nominal_request_rate"] == pytest.approx(b["params"]["request_rate"], rel=1e-3)
            # what the rounds' arrivals offered: the same draw for both (same request digests)
            assert e["offered_request_rate"] == a["offered_request_rate"]
            assert e["saturated"] is False
    assert open_loop == 3  # the poisson workload at T = 0 and T = 1, the trace
    # the input ids of every request, tag by tag, in order: identical for the two methods
    lines = log.read_text().splitlines()
    per_group: dict[str, list[str]] = {}
    for line in lines:
        group, rest = line.split(" ", 1)
        per_group.setdefault(group, []).append(rest)
    assert set(per_group) == {"ar-tp1", "twin-tp1"}
    assert per_group["ar-tp1"] == per_group["twin-tp1"]
    assert len(per_group["ar-tp1"]) > 100
    assert any(" 1 " in r for r in per_group["ar-tp1"]) and any(" 0 " in r for r in per_group["ar-tp1"])
    view = [ln for ln in res.outlines if ln.startswith("  ") and "twin" in ln]
    assert view and not any(" > " in ln for ln in view)  # the decision view ranks neither first
