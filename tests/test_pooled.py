"""The sentence (report/pooled.py): a compare pair pooled over its shapes, its interval from the
shapes' own, and a swept side's setting chosen honestly (corrected for the best of K, or chosen
on tuning shapes the pooled figure does not reuse)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from bench_project import fake_conftest, write_project

from pytest_specbench.plugin import disturbance  # imported before pytester's sys.modules snapshot
from pytest_specbench.report import pooled, screen
from pytest_specbench.stats import sequential

HERE = Path(__file__).parent


def _cell(method: str, c: int, rates: list[float], sweep: str | None = None) -> dict:
    e = {
        "output_tokens_per_s": statistics.fmean(rates),
        "round_tokens_per_s": rates,
        "request_digests": [f"c{c}-r{i}" for i in range(len(rates))],
        "speedup_baseline": "ar",
    }
    if sweep:
        e["sweep"] = sweep
    return {
        "param": f"{method}-tp1-c{c}",
        "params": {"method": method, "tp": 1, "concurrency": c},
        "extra_info": e,
    }


def _times(base: list[float], ratios: list[float]) -> list[float]:
    return [x * r for x, r in zip(base, ratios, strict=True)]


def _doc(cells: list[dict], tuning: dict | None = None) -> dict:
    spec: dict = {"compare": [["a", "b"]]}
    if tuning:
        spec["race"] = {"tuning": {"a": tuning}, "dropped_cells": [], "tuned_out": []}
    return {"benchmarks": cells, "specbench": spec}


B = {1: [100.0, 102.0, 98.0, 101.0], 4: [300.0, 290.0, 310.0, 305.0]}
R = {1: [1.10, 1.14, 1.08, 1.12], 4: [1.20, 1.26, 1.18, 1.22]}  # a over b, per round


def _expected(ratios: dict[int, list[float]], k: int) -> tuple[float, float, float]:
    """By hand: each shape's mean log ratio and its standard error; the mean of the two, its
    standard error sqrt(se1^2 + se2^2) / 2, t at 5 % / k with 3 degrees of freedom."""
    logs = {c: [math.log(x) for x in r] for c, r in ratios.items()}
    means = [statistics.fmean(v) for v in logs.values()]
    ses = [statistics.stdev(v) / math.sqrt(len(v)) for v in logs.values()]
    m = sum(means) / 2
    se = math.sqrt(sum(s * s for s in ses)) / 2
    t = sequential.t_quantile(0.05 / k, 3)
    return math.exp(m), math.exp(m - t * se), math.exp(m + t * se)


def test_one_pooled_line_over_two_shapes_with_its_interval() -> None:
    cells = [_cell("b", c, B[c]) for c in B] + [_cell("a", c, _times(B[c], R[c])) for c in B]
    (f,) = pooled.figures(_doc(cells))
    point, lo, hi = _expected(R, 1)
    assert f["shapes"] == 2 and f["setting"] is None
    assert f["ratio"] == pytest.approx(point, rel=1e-9)
    assert (f["lo"], f["hi"]) == (pytest.approx(lo, rel=1e-6), pytest.approx(hi, rel=1e-6))
    line = pooled.line(f)
    assert line.startswith(
        f"a vs b: {(point - 1) * 100:+.1f} % [{(lo - 1) * 100:+.1f} %, {(hi - 1) * 100:+.1f} %]"
    )
    assert "over 2 shapes (per shape x1.11 to x1.21)" in line
    assert screen.lines(_doc(cells))[0] == line  # first on the screen (short: one line)


def test_a_swept_side_is_the_best_of_k_with_its_interval_corrected_for_the_choice() -> None:
    worse = {c: [x * 0.95 for x in R[c]] for c in R}
    cells = [_cell("b", c, B[c]) for c in B]
    cells += [_cell("a-d2", c, [x * r for x, r in zip(B[c], R[c], strict=True)], sweep="a") for c in B]
    cells += [_cell("a-d4", c, [x * r for x, r in zip(B[c], worse[c], strict=True)], sweep="a") for c in B]
    (f,) = pooled.figures(_doc(cells))
    point, lo, hi = _expected(R, 2)
    assert f["setting"] == "a-d2" and f["ratio"] == pytest.approx(point, rel=1e-9)
    assert (f["lo"], f["hi"]) == (pytest.approx(lo, rel=1e-6), pytest.approx(hi, rel=1e-6))
    assert (
        "a-d2: the best of 2 settings, its interval corrected for the choice (each at 5 %/2)"
        in pooled.line(f)
    )


def test_a_tuned_side_is_pooled_over_the_shapes_it_was_not_chosen_on() -> None:
    cells = [_cell("b", c, B[c]) for c in B]
    cells += [_cell("a-d2", c, [x * r for x, r in zip(B[c], R[c], strict=True)], sweep="a") for c in B]
    cells += [_cell("a-d4", 1, [x * 1.5 for x in B[1]], sweep="a")]  # tuned out after c1
    (f,) = pooled.figures(
        _doc(cells, {"at": "concurrency=1", "kept": ["a-d2"], "cells": ["a-d2-tp1-c1", "a-d4-tp1-c1"]})
    )
    assert f["setting"] == "a-d2" and f["shapes"] == 1  # c4 only: c1 chose the setting
    assert f["ratio"] == pytest.approx(math.exp(statistics.fmean(math.log(x) for x in R[4])), rel=1e-9)
    assert "a-d2: chosen at concurrency=1 (tuning shapes not reused)" in pooled.line(f)


def test_k_counts_the_settings_out_of_the_race_and_their_shapes_are_said() -> None:
    """A third setting dropped at both shapes still was a choice the best could have fallen on:
    K = 3; a pair whose A was out of the race at a shape says so (not in the figure)."""
    cells = [_cell("b", c, B[c]) for c in B]
    cells += [_cell("a-d2", c, _times(B[c], R[c]), sweep="a") for c in B]
    cells += [_cell("a-d4", c, _times(B[c], [x * 0.95 for x in R[c]]), sweep="a") for c in B]
    doc = _doc(cells)
    doc["specbench"]["race"] = {
        "dropped_cells": [
            {"cell_id": f"a-d8-tp1-c{c}", "params": {"method": "a-d8", "tp": 1, "concurrency": c}} for c in B
        ],
        "tuned_out": [],
    }
    (f,) = pooled.figures(doc)
    _, lo, hi = _expected(R, 3)
    assert (f["lo"], f["hi"]) == (pytest.approx(lo, rel=1e-6), pytest.approx(hi, rel=1e-6))
    assert "the best of 3 settings" in pooled.line(f)
    solo = _doc([_cell("b", c, B[c]) for c in B] + [_cell("a", 1, _times(B[1], R[1]))])
    solo["specbench"]["race"] = {
        "dropped_cells": [{"cell_id": "a-tp1-c4", "params": {"method": "a", "tp": 1, "concurrency": 4}}],
        "tuned_out": [],
    }
    (g,) = pooled.figures(solo)
    assert g["shapes"] == 1 and "a out of the race at 1 shape(s), not in the figure" in pooled.line(g)


def test_a_shape_without_a_verdict_is_left_out_and_counted() -> None:
    cells = [_cell("b", c, B[c]) for c in B] + [_cell("a", c, _times(B[c], R[c])) for c in B]
    cells[3]["extra_info"]["disturbed"] = "other processes took 40% of the cores"
    (f,) = pooled.figures(_doc(cells))
    assert f["shapes"] == 1 and f["withheld"] == 1
    assert "1 shape(s) without a verdict left out" in pooled.line(f)


# the embedded model's backend as the plugin sees it (a CPU backend whose baseline runs
# interleaved rounds beside each method), on an engine that streams a token every 2 ms whatever
# the method: the pooled figure and its line are the plugin's, not the engine's
CONFTEST = fake_conftest(
    "FakeTimedEngine",
    'register_backend("fake-timed", FakeTimedEngine, max_tp=1, gpu=False, interleave=True)',
)
MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake-timed, model: m}
  ngram:
    backend: fake-timed
    model: m
    speculative: {algorithm: ngram, num_draft_tokens: [2, 4], max_ngram: 3}
  draft:
    backend: fake-timed
    model: m
    speculative: {algorithm: draft, draft_model: m, num_draft_tokens: 3}
compare: [[ngram, draft]]
workloads:
  throughput: {concurrency: [1, 2], output_tokens: [16], prompt_tokens: 32, rounds: 3, warmup: 0}
"""


@pytest.mark.slow
def test_a_run_prints_the_pooled_line_first_and_the_json_has_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A swept ngram (d2, d4) against draft at two shapes: the JSON's compare_pooled holds one
    figure over both shapes, the best of the 2 settings, its interval around its ratio, and its
    line is the first of the summary. The disturbance meter is off (its own tests cover it): no
    shape is withheld because the suite's other worker took the CPU, so every figure is checked."""
    monkeypatch.setattr(disturbance.DisturbanceMeter, "start", lambda self: None)
    monkeypatch.setattr(disturbance.DisturbanceMeter, "stop", lambda self: {})
    write_project(pytester, MATRIX, CONFTEST)
    res = pytester.runpytest("benches", "-p", "no:cacheprovider", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=8)
    doc = json.loads((pytester.path / "out.json").read_text())
    (f,) = doc["specbench"]["compare_pooled"]
    assert f["a"] == "ngram" and f["b"] == "draft" and (f["shapes"], f["withheld"]) == (2, 0)
    assert f["setting"] in ("ngram-d2", "ngram-d4") and "the best of 2 settings" in f["how"]
    assert f["lo"] < f["ratio"] < f["hi"]
    out = res.stdout.str().splitlines()
    first = out.index(next(ln for ln in out if "specbench summary" in ln)) + 1
    import textwrap

    wrapped = textwrap.wrap(pooled.line(f), screen.WIDTH, subsequent_indent="    ")
    assert out[first : first + len(wrapped)] == wrapped


def test_merged_shards_pool_over_every_shards_shapes() -> None:
    from test_shards import _doc as shard_doc

    from pytest_specbench.report import merge

    docs = []
    for i, c in enumerate(B):
        d = shard_doc(i, count=2, cells=())
        d["benchmarks"] = [_cell("b", c, B[c]), _cell("a", c, _times(B[c], R[c]))]
        d["specbench"]["compare"] = [["a", "b"]]
        d["specbench"]["compare_pooled"] = pooled.figures(d)  # each shard's own: one shape
        docs.append((f"s{i}.json", d))
    doc, _ = merge.merge(docs)
    (f,) = doc["specbench"]["compare_pooled"]
    assert f["shapes"] == 2 and f["ratio"] == pytest.approx(_expected(R, 1)[0], rel=1e-9)
