"""The baseline beside every member on a launched-server backend (plugin/resident.py): AR's
server started beside each member's, its rounds interleaved with the member's, no drift sentinel,
nothing left running; and each engine's memory fraction counting what the other holds."""

from __future__ import annotations

import json
import os

import psutil
import pytest
from test_server_backends import CONFTEST, _cells, _project, _sid

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
