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
    """By hand: each shape's mean log ratio and its standard error (3 degrees of freedom); the
    mean of the two, its standard error sqrt(se1^2 + se2^2) / 2, t at 5 % / k with the sum's
    Welch-Satterthwaite degrees of freedom (se1^2 + se2^2)^2 / (se1^4 / 3 + se2^4 / 3), rounded
    down (3 to 6: here 5)."""
    logs = {c: [math.log(x) for x in r] for c, r in ratios.items()}
    means = [statistics.fmean(v) for v in logs.values()]
    ses = [statistics.stdev(v) / math.sqrt(len(v)) for v in logs.values()]
    m = sum(means) / 2
    se = math.sqrt(sum(s * s for s in ses)) / 2
    df = int(sum(s**2 for s in ses) ** 2 / sum(s**4 / 3 for s in ses))
    assert df == 5
    t = sequential.t_quantile(0.05 / k, df)
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
    assert g["shapes"] == 1 and "a out of the race at 1 shape, not in the figure" in pooled.line(g)


def test_shapes_with_no_bound_on_their_disturbance_are_left_out_and_named() -> None:
    """Measured apart, a disturbed cell shares no load pair by pair (nothing bounds what the load
    did) and a saturated one did not keep up: both shapes stay out, named with why; with every
    shape out there is no figure, and the line names them all."""
    cells = [_cell("b", c, B[c]) for c in B] + [_cell("a", c, _times(B[c], R[c])) for c in B]
    cells[3]["extra_info"]["disturbed"] = "other processes took 40% of the cores"
    (f,) = pooled.figures(_doc(cells))
    assert f["shapes"] == 1 and f["ratio"] == pytest.approx(
        math.exp(statistics.fmean(math.log(x) for x in R[1])), rel=1e-9
    )
    assert f["left_out"] == [
        {"shape": "tp1 c4", "why": "disturbed, measured apart (no pair shares the load)"}
    ]
    assert pooled.line(f).endswith(
        "; left out: disturbed, measured apart (no pair shares the load) at 1 shape (tp1 c4)"
    )
    cells[0]["extra_info"]["saturated"] = True
    (g,) = pooled.figures(_doc(cells))
    assert g["shapes"] == 0 and [x["why"] for x in g["left_out"]] == [
        "saturated",
        "disturbed, measured apart (no pair shares the load)",
    ]
    assert pooled.line(g) == (
        "a vs b: no pooled figure; left out: saturated at 1 shape (tp1 c1); disturbed, measured apart "
        "(no pair shares the load) at 1 shape (tp1 c4)"
    )


SHARE = [0.41, 0.52, 0.47, 0.44]  # others' share of the cores per round, alike in a pair's halves


def _interleaved(method: str, c: int, speeds: list[float], disturbed: bool) -> dict:
    """``method``'s cell at c with its own AR rounds interleaved (AR at B[c]): round i at
    speeds[i] x AR's; under load, others took SHARE of the cores in both halves of every pair."""
    cell = _cell(method, c, _times(B[c], speeds))
    e = cell["extra_info"]
    e["reference"] = {"method": "ar", "round_tokens_per_s": list(B[c])}
    if disturbed:
        e["disturbed"] = "other processes took 46% of the cores"
        e["round_other_cpu_share"] = SHARE
        e["reference"]["round_other_cpu_share"] = SHARE
    return cell


def test_a_shape_under_load_is_pooled_widened_by_the_load_bar() -> None:
    """Two interleaved shapes, c4 under load (its pairs bore the load alike: its verdict is kept,
    "faster" only beyond x0.78..x1.28): both are pooled, the interval by hand widened by
    log(1 / 0.78) / 2 on each side (one band of two shapes, in full: a bias, not noise)."""
    sb = {1: [1.30, 1.31, 1.29, 1.30], 4: [1.20, 1.22, 1.19, 1.21]}
    cells = [_interleaved("b", c, sb[c], c == 4) for c in B]
    cells += [_interleaved("a", c, [x * r for x, r in zip(sb[c], R[c], strict=True)], c == 4) for c in B]
    (f,) = pooled.figures(_doc(cells))
    point, lo, hi = _expected(R, 1)
    band = math.log(1 / 0.78)
    assert f["shapes"] == 2 and f["ratio"] == pytest.approx(point, rel=1e-9)
    assert f["lo"] == pytest.approx(lo * math.exp(-band / 2), rel=1e-6)
    assert f["hi"] == pytest.approx(hi * math.exp(band / 2), rel=1e-6)
    assert f["widened"] == [{"shape": "tp1 c4", "by": "load", "band": pytest.approx(band)}]
    assert (
        "over 2 shapes (per shape x1.11 to x1.21; 1 widened by a bias bound (1 under load x0.78..x1.28))"
        in (pooled.line(f))
    )


def test_a_shape_whose_pairs_bore_the_load_unalike_is_left_out_and_named() -> None:
    """c4 under load, the others' share 40 points apart between a pair's halves: the load bar bounds
    no bias there (such pairs read x0.29 and x0.41 in the busy runs), so the shape stays out of the
    figure, named, rather than entering widened."""
    sb = {1: [1.30, 1.31, 1.29, 1.30], 4: [1.20, 1.22, 1.19, 1.21]}
    cells = [_interleaved("b", c, sb[c], c == 4) for c in B]
    cells += [_interleaved("a", c, [x * r for x, r in zip(sb[c], R[c], strict=True)], c == 4) for c in B]
    for x in cells:
        if x["params"]["concurrency"] == 4:
            x["extra_info"]["reference"]["round_other_cpu_share"] = [0.90, 0.05, 0.90, 0.05]
    (f,) = pooled.figures(_doc(cells))
    assert f["shapes"] == 1 and not f.get("widened")
    assert f["left_out"] == [
        {"shape": "tp1 c4", "why": "disturbed, the load unalike in a pair's halves (no bound on its bias)"}
    ]


def test_a_shape_whose_verdict_a_drift_withholds_is_pooled_widened_by_its_band() -> None:
    """Measured apart inside a family's established drift (band 12 %): c1's x1.11 is not clear of
    it, so its verdict is withheld; it is pooled all the same (leaving it out would keep the large
    effects), widened by the band / 2 on each side, as is c4 (x1.21, clear of it: its verdict
    stands, but its ratio may carry the drift all the same)."""
    from pytest_specbench.report import decide

    band = math.log(1.12)
    cells = [_cell("b", c, B[c]) for c in B] + [_cell("a", c, _times(B[c], R[c])) for c in B]
    for x in cells:
        x["extra_info"]["speedup_drift"] = {"family": "ar-tp1", "drift": -0.10, "band": band}
    assert decide.compare(cells[2], cells[0])["speedup_verdict"].startswith("no verdict: x1.11")
    assert decide.compare(cells[3], cells[1])["speedup_verdict"] == "faster"
    (f,) = pooled.figures(_doc(cells))
    point, lo, hi = _expected(R, 1)
    assert f["shapes"] == 2 and f["ratio"] == pytest.approx(point, rel=1e-9) and f["left_out"] == []
    assert (f["lo"], f["hi"]) == (
        pytest.approx(lo * math.exp(-band), rel=1e-6),
        pytest.approx(hi * math.exp(band), rel=1e-6),
    )
    assert [(w["shape"], w["by"]) for w in f["widened"]] == [
        ("tp1 c1", "drift ar-tp1"),
        ("tp1 c4", "drift ar-tp1"),
    ]
    assert "2 widened by a bias bound (2 inside drift ar-tp1 ±12.0 %)" in pooled.line(f)


def test_the_per_shape_lines_use_the_pooled_setting_and_multiply_out_to_it() -> None:
    """a-d2 is the better setting over both shapes, a-d4 the better at c1 alone: the pooled figure
    takes a-d2, and so does every per-shape compare line (named a-d2), whose ratios' geometric
    mean is the pooled figure; each shape's best would have multiplied out above it."""
    from pytest_specbench.report import screen, versus

    d4 = {1: [x * 1.03 for x in R[1]], 4: [x * 0.90 for x in R[4]]}
    cells = [_cell("b", c, B[c]) for c in B]
    cells += [_cell("a-d2", c, _times(B[c], R[c]), sweep="a") for c in B]
    cells += [_cell("a-d4", c, _times(B[c], d4[c]), sweep="a") for c in B]
    doc = _doc(cells)
    (f,) = pooled.figures(doc)
    got = versus.comparisons(doc)
    assert f["setting"] == "a-d2" and [c["a"] for c in got] == ["a-d2", "a-d2"]
    assert [c["cells"][0]["params"]["method"] for c in got] == ["a-d2", "a-d2"]
    product = math.exp(statistics.fmean(math.log(c["speedup_vs_ar"]) for c in got))
    assert product == pytest.approx(f["ratio"], rel=1e-9)
    assert [ln.split(":")[0] for ln in screen.compare_view(doc)[1:]] == [
        "  a-d2 vs b tp1 c1",
        "  a-d2 vs b tp1 c4",
    ]
    section = versus.section(doc)
    assert section[3] == "- pooled: " + pooled.line(f) and section[4].startswith("- a-d2 vs b tp1 c1: x")


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
    assert f["a"] == "ngram" and f["b"] == "draft" and (f["shapes"], f["left_out"]) == (2, [])
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


def test_engines_started_apart_add_their_start_variance_once_not_per_shape() -> None:
    """Two methods on engines that are instances of their own: one start each serves every shape,
    so the run's start-to-start variance 2 tau² enters the pooled figure once (Satterthwaite with
    tau's pairs), not divided over the shapes."""
    from pytest_specbench.stats.instances import satterthwaite

    cells = [_cell("b", c, B[c]) for c in B] + [_cell("a", c, _times(B[c], R[c])) for c in B]
    doc = _doc(cells)
    doc["specbench"].update(separate_instances=["a", "b"], instances={"tau": 0.03, "df": 4})
    (f,) = pooled.figures(doc)
    logs = {c: [math.log(x) for x in r] for c, r in R.items()}
    ses = [statistics.stdev(v) / math.sqrt(len(v)) for v in logs.values()]
    se2 = sum(s * s for s in ses) / 4
    var, df = satterthwaite([(se2, 5), (2 * 0.03**2, 4)])
    half = sequential.t_quantile(0.05, df) * math.sqrt(var)
    assert f["instance_sd"] == 0.03
    assert math.log(f["hi"] / f["ratio"]) == pytest.approx(half, rel=1e-6)
    # without the start level measured, the rounds' interval alone
    (g,) = pooled.figures(_doc(cells))
    assert "instance_sd" not in g and g["hi"] < f["hi"]
