"""The baseline beside every member on a launched-server backend (plugin/resident.py): AR's
server started beside each member's, its rounds interleaved with the member's, no drift sentinel,
nothing left running; and each engine's memory fraction counting what the other holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_server_backends import CONFTEST, _cells, _project, _sid

from pytest_specbench.planning import plan, residency
from pytest_specbench.planning.records import GPUBudget
from pytest_specbench.plugin import resident

MATRIX = """
models: {t: {path: "embedded:tiny"}}
methods:
  ar: {backend: sglang-server, model: t}
  twin: {backend: sglang-server, model: t}
  sd: {backend: sglang-server, model: t, speculative: {algorithm: standalone, draft_model: t, num_steps: 3}}
workloads:
  throughput:
    concurrency: [1, 2]
    output_tokens: [8]
    prompt_tokens: 8
    rounds: 3
    warmup: 0
"""


def _resident_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted server launched per group, registered as sglang-server is (resident)."""
    monkeypatch.setenv("FAKE_TTFT_MS", "2")
    monkeypatch.setenv("FAKE_ITL_MS", "1")
    _project(pytester, MATRIX)
    pytester.makeconftest(CONFTEST.replace("gpu=False)", "gpu=False, sentinel=True, resident=True)"))


def test_a_launched_baseline_runs_beside_each_member_and_their_rounds_interleave(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resident_project(pytester, monkeypatch)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "--specbench-log-dir", "logs")
    res.assert_outcomes(passed=6)
    doc = json.loads((pytester.path / "out.json").read_text())
    spec = doc["specbench"]
    starts = [e["group"] for e in spec["engine_groups"] if e.get("ok")]
    assert starts == ["ar-tp1", "twin-tp1", "sd-tp1"]  # no drift sentinel: nothing measured apart
    refs = spec["reference_engines"]
    assert [(r["group"], r["for"]) for r in refs] == [("ar-tp1", "twin-tp1")]  # kept resident for sd
    cells = _cells(doc)
    for cid in ("twin-tp1-c1-out8", "twin-tp1-c2-out8", "sd-tp1-c1-out8", "sd-tp1-c2-out8"):
        e = cells[cid]["extra_info"]
        assert e["speedup_pairing"] == "interleaved", (cid, e.get("speedup_pairing"))
    # nothing of any server survives the run, the baseline's beside the members included
    pids = [e["info"]["pid"] for e in spec["engine_groups"] if e.get("ok")]
    left = [p.pid for p in psutil.process_iter() if p.pid != os.getpid() and _sid(p.pid) in pids]
    assert left == []


def test_under_no_interleave_a_launched_baseline_is_measured_apart_with_its_sentinel(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resident_project(pytester, monkeypatch)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "--specbench-no-interleave")
    res.assert_outcomes(passed=7)  # and the drift sentinel's item
    spec = json.loads((pytester.path / "out.json").read_text())["specbench"]
    assert spec["reference_engines"] == []
    assert [e["group"] for e in spec["engine_groups"] if e.get("ok")] == [
        "ar-tp1",
        "twin-tp1",
        "sd-tp1",
        "ar-tp1",
    ]


def test_each_engine_beside_another_gets_what_is_held_plus_its_own_share() -> None:
    # alone SGLang would take 0.85 of the GPU: beside another engine each gets half, at most 0.42
    assert resident.share_of(0.85) == 0.42
    assert resident.share_of(0.6) == 0.3
    assert resident.share_of(0.85, given=0.35) == 0.175  # the matrix's own fraction, halved
    # the first engine on an empty H200 (143,771 MiB, 530 used by the driver): 0.0037 + 0.42
    assert resident.fraction_beside({0: 530}, {0: 143771}, 0.42) == pytest.approx(0.4237, abs=1e-4)
    # the second beside it, which holds 0.377 of the GPU once started (weights, KV, graphs)
    assert resident.fraction_beside({0: 54202}, {0: 143771}, 0.42) == pytest.approx(0.797, abs=1e-3)
    # TP2: the fuller GPU decides
    assert resident.fraction_beside({0: 1000, 1: 60000}, {0: 100000, 1: 100000}, 0.3) == 0.9
    import yaml

    from pytest_specbench.matrix.schema import parse

    g = parse(yaml.safe_load(MATRIX), "m.yaml").cells()[0].group
    sized = resident.with_fraction(g, 0.4237)
    assert sized.id == g.id and dict(sized.method.engine_args)["mem_fraction_static"] == 0.4237


# ----------------------------------------------------------------------------- both engines sized

ROOT = Path(__file__).parent.parent
H200 = GPUBudget(143771 * 2**20, 4.8e12, "NVIDIA H200")
PRO6000 = GPUBudget(96 * 10**9, 1.79e12, "RTX PRO 6000")
SGLANG = frozenset({"sglang", "sglang-server"})


def _qwen3_1p7b(tmp_path: Path) -> str:
    """A Qwen3-1.7B config.json (scripts/make_dummy_model.py's preset), its directory."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk", ROOT / "scripts" / "make_dummy_model.py")
    assert spec is not None and spec.loader is not None
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text(json.dumps(mk.target_config("qwen3-1.7b", 40960)))
    return str(tmp_path / "q")


def _members(path: str, methods: dict, workload: dict, gpu: GPUBudget, tp: list[int] | None = None) -> dict:
    from pytest_specbench.matrix.schema import parse

    doc = {
        "models": {"q": {"path": path, "load_format": "dummy"}},
        "methods": {n: {"backend": "sglang-server", "model": "q", **m} for n, m in methods.items()},
        "workloads": workload,
        **({"tp": tp} if tp else {}),
    }
    m = parse(doc, "m.yaml")
    return residency.resident_members(m.cells(), m.baselines(), {"sglang-server"}, gpu, SGLANG)


def test_the_plan_sizes_both_engines_at_their_shares_and_says_which_fit(tmp_path: Path) -> None:
    q = _qwen3_1p7b(tmp_path)
    eagle = {"speculative": {"algorithm": "standalone", "draft_model": "q", "num_steps": 3}}
    fits = _members(
        q,
        {"ar": {}, "twin": {}, "sd": eagle},
        {"throughput": {"concurrency": [1, 16], "prompt_tokens": 512, "output_tokens": [64]}},
        H200,
    )
    assert sorted(fits) == ["sd-tp1", "twin-tp1"]
    twin = fits["twin-tp1"]
    # 1.7B on an H200: each at 0.42 of 140.4 GiB, weights 3.8 GiB, 112 KiB of KV a token
    assert (twin.fits, twin.member_share, twin.baseline_share) == (True, 0.42, 0.42)
    kv = 28 * 8 * 128 * 2 * 2  # layers x KV heads x head_dim x (K, V) x bf16
    weights = plan._size_group(twin_group := _group(q, "ar"), H200, SGLANG).weight_bytes_per_gpu
    assert twin_group.id == "ar-tp1"
    assert twin.kv_tokens["ar-tp1"] == (int(H200.memory_bytes * 0.42) - weights) // kv == 522078
    assert twin.note() == (
        "baseline resident beside it: ar-tp1 on the same GPUs (shares 0.42/0.42 of each GPU), rounds "
        "interleaved"
    )
    # a shape whose KV cache one engine alone would hold (c32 x 24k: 786,432 tokens), but not at its share
    long = _members(
        q,
        {"ar": {}, "twin": {}},
        {"long_context": {"concurrency": [32], "context_tokens": [24000], "output_tokens": [576]}},
        H200,
    )["twin-tp1"]
    assert not long.fits
    assert long.why == (
        "twin-tp1's KV cache at share 0.42 of 140.4 GiB holds 522078 tokens (55.8 GiB per GPU), "
        "long_context-twin-tp1-c32-ctx24k-out576 needs 32 x 24576 = 786432"
    )
    # a 27B-class hybrid at TP1 on a 96 GB RTX PRO 6000: the MTP member's weights alone exceed its share
    hybrid = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-hybrid")
    mtp = {"speculative": {"algorithm": "eagle", "draft_model": "q", "num_steps": 3, "topk": 1,
                           "num_draft_tokens": 4}}  # fmt: skip
    big = _members(
        hybrid,
        {"ar": {}, "mtp": mtp},
        {"long_context": {"concurrency": [1, 8], "context_tokens": [3000], "output_tokens": [256]}},
        PRO6000,
        tp=[1, 4],
    )
    assert not big["mtp-tp1"].fits
    assert big["mtp-tp1"].why == (
        "mtp-tp1 at share 0.42: needs 55.5 GiB per GPU for weights at TP=1, 37.6 GiB available "
        "(89.4 GiB x mem_fraction_static 0.42)"
    )
    assert big["mtp-tp1"].note().startswith("does not fit beside the baseline ar-tp1: bracketed (mtp-tp1 at")
    assert big["mtp-tp4"].fits  # a quarter of the weights per GPU


def _group(path: str, name: str) -> Any:
    from pytest_specbench.matrix.schema import parse

    doc = {
        "models": {"q": {"path": path, "load_format": "dummy"}},
        "methods": {name: {"backend": "sglang-server", "model": "q"}},
        "workloads": {"throughput": {"concurrency": [1]}},
    }
    g = parse(doc, "m.yaml").cells()[0].group
    return residency.with_fraction(g, 0.42)


def test_a_member_its_baseline_does_not_fit_beside_is_bracketed_by_the_same_rule(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's rule says sd does not fit beside AR (here: forced, the fake server has no GPU
    memory): the plan says so, AR is resident beside the twin only, sd runs apart between two
    brackets of AR (its own cell, then a restart after sd), and its comparisons carry them."""
    real = residency.residency

    def sized(member: Any, baseline: Any, cells: Any, gpu: Any, gpu_backends: Any) -> Any:
        r = real(member, baseline, cells, gpu, gpu_backends)
        if member.id == "sd-tp1":
            r.fits, r.why = False, "sd-tp1's KV cache at share 0.42 holds too little (forced by the test)"
        return r

    monkeypatch.setattr(residency, "residency", sized)
    _resident_project(pytester, monkeypatch)
    plan = pytester.runpytest("benches", "--specbench-plan")
    assert (
        "    note: does not fit beside the baseline ar-tp1: bracketed (sd-tp1's KV cache at share 0.42 holds "
        "too little (forced by the test)); its baseline runs one round of its first shape before and after "
        "it on the same GPUs, and its intervals are widened by the drift the two bound"
    ) in plan.outlines
    assert any(ln.startswith("    note: baseline resident beside it: ar-tp1") for ln in plan.outlines)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=7)  # 6 cells and sd's bracket
    spec = json.loads((pytester.path / "out.json").read_text())["specbench"]
    # AR's family (AR, sd, AR's bracket after sd) together, then the twin with AR resident beside it
    assert [e["group"] for e in spec["engine_groups"] if e.get("ok")] == [
        "ar-tp1", "sd-tp1", "ar-tp1", "twin-tp1"
    ]  # fmt: skip
    assert [(r["group"], r["for"]) for r in spec["reference_engines"]] == [("ar-tp1", "twin-tp1")]
    assert [(s["cell_id"], s["bracket_after"], s["bracket_before"]) for s in spec["sentinels"]] == [
        ("ar-tp1-c1-out8-after-sd-tp1-sentinel", "sd-tp1", None)
    ]
    cells = _cells(json.loads((pytester.path / "out.json").read_text()))
    assert cells["twin-tp1-c1-out8"]["extra_info"]["speedup_pairing"] == "interleaved"
    sd = cells["sd-tp1-c2-out8"]["extra_info"]
    assert sd["speedup_pairing"] != "interleaved"
    assert sd["speedup_brackets"]["before"] == "ar-tp1-c1-out8"
