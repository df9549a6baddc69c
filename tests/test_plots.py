"""Plots from a results JSON: the CSV beside each PNG holds the JSON's numbers, every PNG opens and
is not blank, and failed cells are marked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from pytest_specbench.report import plots
from pytest_specbench.report import summary as report

HERE = Path(__file__).parent


def _cell(method: str, c: int, tps: float, **extra: object) -> dict:
    params = {
        "method": method,
        "tp": 1,
        "workload": "throughput",
        "concurrency": c,
        "context_tokens": 128,
        "output_tokens": 64,
    }
    e = {"output_tokens_per_s": tps, "speedup_baseline": "ar", **extra}
    return {"param": f"{method}-tp1-c{c}-out64", "params": params, "extra_info": e, "stats": {"data": [1.0]}}


DOC = {
    "machine_info": {"specbench": {"gpus": [{"name": "NVIDIA H200"}], "versions": {"sglang": "0.5.17"}}},
    "specbench": {
        "matrix": "benches/h200.yaml",
        "failed_cells": [
            {
                "cell": "ngram-tp1-c32-out64",
                "phase": "call",
                "error": "boom",
                "params": {
                    "method": "ngram",
                    "tp": 1,
                    "workload": "throughput",
                    "concurrency": 32,
                    "context_tokens": 128,
                    "output_tokens": 64,
                },
            }
        ],
    },
    "benchmarks": [
        _cell("ar", 1, 500.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
        _cell("ar", 32, 12000.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
        _cell(
            "ngram",
            1,
            1000.0,
            speedup_vs_ar=2.0,
            speedup_vs_ar_ci95=[1.9, 2.1],
            accept_length=3.5,
            accept_rate_by_position=[0.9, 0.8, 0.5],
            per_request={"ttft_s": [0.01, 0.02, 0.04], "itl_ms_p50": [2.0, 2.5, 3.0]},
        ),
    ],
}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_csv_beside_each_png_holds_the_json_numbers_and_failed_cells_are_marked(tmp_path: Path) -> None:
    pngs = plots.plot_run(DOC, tmp_path)
    names = {p.stem for p in pngs}
    assert {"tok_s_vs_concurrency", "accept_rate_by_position", "ttft_cdf", "itl_cdf"} <= names
    rows = _rows(tmp_path / "tok_s_vs_concurrency.csv")
    got = {(r["series"], r["x"], r["status"]): r["y"] for r in rows}
    assert got[("ar", "1", "ok")] == "500.0" and got[("ar", "32", "ok")] == "12000.0"
    assert got[("ngram", "1", "ok")] == "1000.0"
    assert got[("ngram", "32", "failed")] == ""  # the failed cell is in the data, marked
    pos = _rows(tmp_path / "accept_rate_by_position.csv")
    assert [(r["x"], r["y"]) for r in pos] == [("1", "0.9"), ("2", "0.8"), ("3", "0.5")]
    cdf = _rows(tmp_path / "ttft_cdf.csv")
    assert [(r["x"], r["y"]) for r in cdf] == [("10.0", str(1 / 3)), ("20.0", str(2 / 3)), ("40.0", "1.0")]


def test_every_png_opens_and_is_not_blank(tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    pngs = plots.plot_run(DOC, tmp_path)
    assert pngs
    for p in pngs:
        img = mpimg.imread(p)
        assert img.shape[0] > 200 and img.shape[1] > 200, p
        assert float(img[..., :3].std()) > 0.01, f"{p} is blank"


def test_report_cli_writes_an_index_and_the_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(DOC))
    assert report.main([str(run), "--plots", str(tmp_path / "p")]) == 0
    index = (tmp_path / "p" / "index.md").read_text()
    assert "![tok_s_vs_concurrency](tok_s_vs_concurrency.png)" in index and "| cell |" in index
    new = json.loads(json.dumps(DOC))
    new["benchmarks"][2]["extra_info"]["output_tokens_per_s"] = 800.0
    (tmp_path / "new.json").write_text(json.dumps(new))
    rc = report.main(
        [str(run), str(tmp_path / "new.json"), "--plots", str(tmp_path / "c"), "--max-tok-s-drop", "0.1"]
    )
    assert rc == 3  # ngram c1 fell to 0.8, but one round a run is not gated on a point: inconclusive
    rows = _rows(tmp_path / "c" / "compare_tok_s.csv")
    assert {r["x"]: r["y"] for r in rows}["ngram-tp1-c1-out64"] == "0.8"


def test_a_method_keeps_its_colour_and_marker_in_every_panel_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line a method draws, in every panel of every plot of the run, has the colour and
    marker method_styles gives it (methods in name order: ar C0, ngram C1), and a second run of the
    same methods gives them the same."""
    from matplotlib.axes import Axes

    drawn: list[tuple[str, str, str]] = []
    plot = Axes.plot

    def record(self, *args, **kw):  # type: ignore[no-untyped-def]
        drawn.append((kw.get("label"), kw.get("color"), kw.get("marker")))
        return plot(self, *args, **kw)

    monkeypatch.setattr(Axes, "plot", record)
    doc = json.loads(json.dumps(DOC))
    doc["benchmarks"].append(_cell("ngram", 32, 20000.0, speedup_vs_ar=1.6, speedup_vs_ar_ci95=[1.5, 1.7]))
    doc["benchmarks"].append(_cell("zeta", 1, 400.0, speedup_vs_ar=0.8, speedup_vs_ar_ci95=[0.7, 0.9]))
    doc["benchmarks"].append(_cell("zeta", 32, 9000.0, speedup_vs_ar=0.7, speedup_vs_ar_ci95=[0.6, 0.8]))
    plots.plot_run(doc, tmp_path)
    styles = plots.method_styles(doc)
    assert styles == {"ar": ("C0", "o"), "ngram": ("C1", "s"), "zeta": ("C2", "^")}
    lines = [d for d in drawn if d[0] in styles and d[2] is not None]
    assert {d[0] for d in lines} >= {"ngram", "zeta"}
    assert all((c, m) == styles[name] for name, c, m in lines), lines
    only_two = json.loads(json.dumps(doc))
    only_two["benchmarks"] = [b for b in only_two["benchmarks"] if b["params"]["method"] != "zeta"]
    assert plots.method_styles(only_two)["ngram"] == styles["ngram"]
