"""The Pareto view, the crossover summary and the self-contained HTML report (opened in headless
Chromium where one is installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specbench.report import pareto

RESULTS = Path(__file__).parent.parent / "docs" / "results"
STEADY = RESULTS / "h200-steady" / "h200-steady.json"


def _b(method: str, c: int, tok_s: float, tpot_ms: float, tp: int = 1, **kw: object) -> dict:
    params = {"method": method, "tp": tp, "workload": "throughput", "concurrency": c, "output_tokens": 64}
    params.update(kw.pop("params", {}))  # type: ignore[arg-type]
    return {
        "param": f"{method}-tp{tp}-c{c}",
        "params": params,
        "extra_info": {"output_tokens_per_s": tok_s, "tpot_ms_p50": tpot_ms, **kw},
    }


def test_pareto_points_and_frontier_by_hand() -> None:
    doc = {
        "benchmarks": [
            _b("ar", 1, 100.0, 10.0),  # 100 tok/s a user, 100 per GPU
            _b("ar", 8, 640.0, 12.5),  # 80 a user, 640 per GPU
            _b("ngram", 1, 150.0, 6.25),  # 160 a user, 150 per GPU
            _b("ngram", 8, 600.0, 12.5),  # 80 a user, 600 per GPU: beaten by ar c8
            _b("ar", 8, 1280.0, 12.5, tp=2),  # TP2: 640 per GPU, the same point as ar c8 at TP1
            _b("ar", 4, 300.0, 20.0, params={"request_rate": 4}),  # open loop: not a Pareto point
        ]
    }
    (name,) = pareto.points(doc)
    assert name == "throughput out64"
    pts = {q.cell: (round(q.per_user, 6), q.per_gpu) for q in pareto.points(doc)[name]}
    assert pts == {
        "ar-tp1-c1": (100.0, 100.0),
        "ar-tp1-c8": (80.0, 640.0),
        "ngram-tp1-c1": (160.0, 150.0),
        "ngram-tp1-c8": (80.0, 600.0),
        "ar-tp2-c8": (80.0, 640.0),
    }
    # ar c1 is beaten by ngram c1 on both axes, ngram c8 by ar c8; ar c8's tie at TP1 and TP2 is kept once
    assert [q.cell for q in pareto.frontier(pareto.points(doc)[name])] == ["ar-tp1-c8", "ngram-tp1-c1"]
    rows = pareto.csv_rows(pareto.points(doc))
    assert rows[0][-1] == "frontier" and sum(1 for r in rows[1:] if r[-1]) == 2


def test_crossover_by_concurrency() -> None:
    def v(c: int, verdict: str) -> dict:
        return _b("ngram", c, 1.0, 1.0, speedup_baseline="ar", speedup_verdict=verdict)

    doc = {
        "benchmarks": [
            _b("ar", 1, 1.0, 1.0, speedup_baseline="ar", speedup_verdict="baseline"),
            v(1, "faster"),
            v(4, "faster"),
            v(8, "within ±2%"),
            v(16, "not separated"),
            v(32, "slower"),
        ]
    }
    assert pareto.crossover(doc) == [
        "ngram tp1 throughput out64: faster at c1-c4, tied at c8, not separated at c16, slower at c32"
    ]


def test_pareto_colours_are_the_methods_colours_in_every_panel() -> None:
    from matplotlib.colors import to_rgba

    from pytest_specbench.report.figure import method_styles
    from pytest_specbench.report.plots_pareto import draw

    doc = json.loads(STEADY.read_text())
    # one panel without AR: a colour cycle that restarts per panel would shift the others there
    doc["benchmarks"] = [
        b
        for b in doc["benchmarks"]
        if not (b["params"]["method"] == "ar" and b["params"]["workload"] == "onewave")
    ]
    panels = pareto.points(doc)
    assert len(panels) >= 2  # steady and one-wave shapes
    fig = draw(doc, panels)
    styles = method_styles(doc)
    seen: dict[str, set] = {}
    for ax in fig.axes:
        for coll in ax.collections:
            seen.setdefault(coll.get_label(), set()).add(tuple(coll.get_facecolor()[0]))
    assert set(seen) == {"ar", "ngram", "standalone"}
    for method, colours in seen.items():
        assert colours == {to_rgba(styles[method][0])}, method  # one colour across the panels


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_the_html_report_is_one_file_and_renders_with_every_image(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_specbench.report",
            str(STEADY),
            "--html",
            str(out),
            "--plots",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr and f"wrote {tmp_path / 'p' / 'pareto.png'}" in r.stderr
    page = out.read_text()
    n = page.count('src="data:image/png;base64,')
    assert n >= 5 and 'alt="pareto"' in page  # every plot embedded, nothing beside the file
    assert "<table" in page and "Crossover" in page and "NVIDIA H200" in page
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here (apt install chromium): the page was written, not rendered")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [browser, *flags, "--virtual-time-budget=5000", "--dump-dom", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert f'data-images-loaded="{n}/{n}"' in dom, dom[-300:]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1280,2400", out.as_uri()],
        capture_output=True,
        timeout=120,
    )
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.std() > 0.05  # not a blank page
