"""Pictures of a run, from its results JSON alone: the run's figures (throughput, latency, speedup,
acceptance, ... as panelled series, panels.py), two runs compared cell by cell, and an index page
(Markdown) that embeds them under the summary table and the decision view. Each PNG has its data
as CSV beside it. Failed and skipped cells are drawn as such (a red x at the bottom of the panel,
and listed under the figure), never silently left out. No pytest here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import panels
from .breakeven import plot_rows as forced_plot_rows
from .figure import _new_figure, method_styles, run_title
from .panels import Row, _num, cells_with_status, failed_ids, panel_label, series_rows, write_csv


def _closed(p: dict[str, Any], e: dict[str, Any]) -> bool:
    return not p.get("request_rate")


def _spread(values: Sequence[float]) -> bool:
    vals = [v for v in values if v and v > 0]
    return bool(vals) and max(vals) / min(vals) >= 30  # a log axis where the data spans decades


NotMade = list[tuple[str, str]]  # (plot, why it was not drawn)


def plot_run(doc: dict[str, Any], out_dir: Path, not_made: NotMade | None = None) -> list[Path]:
    """Every plot the run's data supports; returns the PNGs written (each with its CSV). Each plot
    it did not draw goes to ``not_made`` with the reason (no cell has its data, or each shape has
    one value of its x axis, which a line cannot be drawn through)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    title = run_title(doc)
    failed = failed_ids(doc)
    written: list[Path] = []
    styles = method_styles(doc)
    skipped = not_made if not_made is not None else []

    def emit(
        name: str,
        rows: list[Row],
        what: str,
        xlabel: str,
        ylabel: str,
        absent: str = "",
        axis: str = "",
        **kw: Any,
    ) -> None:
        if not rows:
            skipped.append((name, absent or "no cell of the run has its data"))
            return
        if kw.get("kind", "line") in ("line", "cdf"):  # a line needs two points: panels with one x go
            xs: dict[str, set[Any]] = {}
            for r in rows:
                xs.setdefault(r["panel"], set()).add(r["x"])
            one = sorted({x for v in xs.values() if len(v) == 1 for x in v}, key=lambda x: (_num(x), str(x)))
            rows = [r for r in rows if len(xs[r["panel"]]) > 1]
            if not rows:
                at = ", ".join(str(x) for x in one[:4]) + (", ..." if len(one) > 4 else "")
                skipped.append(
                    (
                        name,
                        f"each shape ran at one {axis or xlabel.split(' (')[0]} ({at}): a line needs two; "
                        "the report's tables give each cell's figure",
                    )
                )
                return
        if not [r for r in rows if r["status"] == "ok"]:
            skipped.append((name, "every cell with its data failed"))
            return
        if kw.pop("auto_logy", False):
            kw["logy"] = _spread([r["y"] for r in rows if r["y"]])
        png = out_dir / f"{name}.png"
        write_csv(png.with_suffix(".csv"), rows)
        panels.draw(rows, f"{what}\n{title}", xlabel, ylabel, png, failed, styles=styles, **kw)
        written.append(png)

    tps = series_rows(
        doc,
        "concurrency",
        lambda e: e.get("output_tokens_per_s"),
        ("workload", "tp", "context_tokens", "output_tokens"),
        only=_closed,
    )
    emit(
        "tok_s_vs_concurrency",
        tps,
        "Output tok/s vs concurrency (closed loop)",
        "concurrency (requests in flight)",
        "output tokens / s",
        absent="no closed-loop cell with output tok/s",
        logx=True,
        auto_logy=True,
    )

    def ci(e: dict[str, Any]) -> Any:
        return e.get("speedup_vs_ar_ci95")

    def sp(e: dict[str, Any]) -> Any:
        return None if e.get("speedup_verdict") == "baseline" else e.get("speedup_vs_ar")

    for x_key, name, label, axis in (
        ("concurrency", "speedup_vs_concurrency", "concurrency (requests in flight)", "concurrency"),
        ("context_tokens", "speedup_vs_context", "prompt tokens", "prompt length"),
    ):
        keys = [k for k in ("workload", "tp", "concurrency", "context_tokens", "output_tokens") if k != x_key]
        rows = series_rows(doc, x_key, sp, keys, err=ci)
        rows = [r for r in rows if r["series"] not in _baselines(doc)]
        emit(
            name,
            rows,
            "Speedup vs the AR baseline (95% CI over paired rounds; open loop: p50 latency ratio)",
            label,
            "speedup (x)",
            absent="no cell with a speedup over its baseline",
            axis=axis,
            logx=True,
            hline=1.0,
        )

    acc = series_rows(
        doc,
        "context_tokens",
        lambda e: e.get("accept_length"),
        ("workload", "tp", "concurrency"),
        only=lambda p, e: p.get("workload") == "long_context" or "long" in str(p.get("workload")),
    )
    emit(
        "accept_vs_context",
        acc,
        "Acceptance length vs prompt length",
        "prompt tokens",
        "accept length (tokens per verify step)",
        absent="no long-context cell with an acceptance length",
        axis="prompt length",
        logx=True,
    )

    for key, name, what, ylabel in (
        ("accept_length", "accept_vs_turn", "Acceptance length vs agentic turn", "accept length"),
        ("prefix_cache_hit_rate", "prefix_hits_vs_turn", "Prefix-cache hits vs agentic turn", "hit rate"),
    ):
        turns = [
            {
                "panel": panel_label(p, ("workload", "tp", "concurrency")),
                "series": p["method"],
                "x": t["turn"],
                "y": t[key],
                "status": status,
            }
            for p, e, status in cells_with_status(doc)
            for t in e.get("turns") or []
            if t.get(key) is not None
        ]
        emit(name, turns, what, "turn", ylabel, absent="no agentic cell recorded its turns' " + ylabel)

    cats = series_rows(doc, "category", lambda e: e.get("accept_length"), ("workload", "tp", "concurrency"))
    emit(
        "accept_by_category",
        cats,
        "Acceptance length per prompt category",
        "category",
        "accept length",
        absent="no categories cell with an acceptance length",
        kind="bar",
    )

    pos = []
    for p, e, status in cells_with_status(doc):
        for i, rate in enumerate(e.get("accept_rate_by_position") or [], start=1):
            if rate is not None:
                pos.append(
                    {
                        "panel": panel_label(
                            p, ("workload", "tp", "concurrency", "context_tokens", "output_tokens")
                        ),
                        "series": p["method"],
                        "x": i,
                        "y": rate,
                        "status": status,
                    }
                )
    emit(
        "accept_rate_by_position",
        pos,
        "Accept rate by draft position (given every earlier one was accepted)",
        "draft position",
        "conditional accept rate",
        absent="no cell recorded accept rates by draft position (speculative cells of the embedded model)",
    )

    for key, name, label in (
        ("ttft_s", "ttft_cdf", "TTFT (ms)"),
        ("itl_ms_p50", "itl_cdf", "per-request median ITL (ms)"),
    ):
        rows = []
        for p, e, _status in cells_with_status(doc):
            vals = sorted(v for v in ((e.get("per_request") or {}).get(key) or []) if v is not None)
            scale = 1e3 if key == "ttft_s" else 1.0
            for i, v in enumerate(vals):
                rows.append(
                    {
                        "panel": panel_label(p, ("workload", "tp", "concurrency", "context_tokens")),
                        "series": p["method"],
                        "x": round(v * scale, 4),
                        "y": (i + 1) / len(vals),
                        "status": "ok",
                    }
                )
        emit(
            name,
            rows,
            f"{label.split(' (')[0]} distribution (streamed cells)",
            label,
            "fraction of requests",
            absent="no streamed cell recorded per-request " + label.split(" (")[0],
            kind="cdf",
        )

    tp = [
        r
        for r in series_rows(
            doc,
            "tp",
            lambda e: e.get("output_tokens_per_s"),
            ("workload", "concurrency", "context_tokens", "output_tokens"),
            only=_closed,
        )
    ]
    for r in tp:
        if r["y"] is not None:
            r["y"] = r["y"] / int(r["x"])
    emit(
        "tok_s_per_gpu_by_tp",
        tp,
        "Output tok/s per GPU by TP size",
        "TP size",
        "output tokens / s / GPU",
        absent="no closed-loop cell with output tok/s",
    )

    energy = series_rows(
        doc,
        "concurrency",
        lambda e: e.get("joules_per_output_token"),
        ("workload", "tp", "context_tokens", "output_tokens"),
    )
    emit(
        "energy_per_token",
        energy,
        "GPU energy per output token (NVML counters)",
        "concurrency",
        "joules / output token",
        absent="no cell read GPU energy counters (NVML; none on a CPU run)",
        logx=True,
        auto_logy=True,
    )
    emit(
        "speedup_vs_forced_accept",
        forced_plot_rows(doc),
        "Speedup over AR at a forced accept length (a verify step's cost; where the line crosses 1: "
        "break-even)",
        "forced accept length (tokens per verify step)",
        "speedup vs AR",
        absent="no cell ran at a forced accept length",
        hline=1.0,
    )
    return written


def _baselines(doc: dict[str, Any]) -> set[str]:
    return {b["extra_info"].get("speedup_baseline") for b in doc.get("benchmarks", [])} - {None}


def plot_compare(
    old: dict[str, Any],
    new: dict[str, Any],
    out_dir: Path,
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
) -> list[Path]:
    """Two runs cell by cell: new/old tok/s and acceptance, the gate's thresholds drawn in."""
    out_dir.mkdir(parents=True, exist_ok=True)
    a = {b["param"]: b["extra_info"] for b in old.get("benchmarks", [])}
    b = {x["param"]: x["extra_info"] for x in new.get("benchmarks", [])}
    failed = failed_ids(new)
    written = []
    for key, name, label, limit in (
        ("output_tokens_per_s", "compare_tok_s", "tok/s", max_tok_s_drop),
        ("accept_length", "compare_accept", "accept length", max_accept_drop),
    ):
        rows = []
        for cell in sorted(a):
            va, vb = a[cell].get(key), (b.get(cell) or {}).get(key)
            if cell in failed:
                rows.append({"panel": "", "series": "new/old", "x": cell, "y": None, "status": "failed"})
            elif va and vb is not None:
                rows.append({"panel": "", "series": "new/old", "x": cell, "y": vb / va, "status": "ok"})
        if not [r for r in rows if r["status"] == "ok"]:
            continue
        png = out_dir / f"{name}.png"
        write_csv(png.with_suffix(".csv"), rows)
        _bars(
            rows,
            f"New / old {label} per cell\n{run_title(new)}",
            png,
            1 - limit if limit is not None else None,
            failed,
        )
        written.append(png)
    return written


def _bars(rows: list[Row], title: str, path: Path, threshold: float | None, failed: list[str]) -> None:
    fig = _new_figure((max(6, 0.45 * len(rows) + 2), 4.8))
    ax = fig.subplots()
    xs = list(range(len(rows)))
    ok = [(i, r) for i, r in zip(xs, rows, strict=True) if r["status"] == "ok"]
    colors = ["tab:red" if threshold is not None and r["y"] < threshold else "tab:blue" for _, r in ok]
    ax.bar([i for i, _ in ok], [r["y"] for _, r in ok], color=colors, label="new / old")
    bad = [i for i, r in zip(xs, rows, strict=True) if r["status"] != "ok"]
    if bad:
        ax.scatter(bad, [0] * len(bad), marker="x", color="red", s=60, label="failed in the new run")
    ax.axhline(1.0, color="grey", linewidth=1)
    if threshold is not None:
        ax.axhline(threshold, color="red", linestyle="--", linewidth=1, label=f"gate: {threshold:.2f}")
    ax.set_xticks(xs, [r["x"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("new / old")
    import textwrap

    ax.set_title("\n".join(textwrap.fill(t, 70) for t in title.splitlines()), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def not_made_lines(not_made: Sequence[tuple[str, str]]) -> list[str]:
    """The plots not drawn, one line each with the reason ("speedup_vs_concurrency: each shape ran
    at one concurrency (4): a line needs two")."""
    return [f"{name}: {why}" for name, why in not_made]


def index_page(
    doc: dict[str, Any],
    pngs: list[Path],
    out_dir: Path,
    summary: list[str],
    not_made: Sequence[tuple[str, str]] = (),
) -> Path:
    """index.md: the summary table and the decision view (``summary``), then every picture, then
    the plots not drawn and why."""
    lines = [f"# {run_title(doc)}", "", *summary, ""]
    for p in pngs:
        lines += [
            f"## {p.stem.replace('_', ' ')}",
            "",
            f"![{p.stem}]({p.name})",
            f"data: [{p.with_suffix('.csv').name}]({p.with_suffix('.csv').name})",
            "",
        ]
    if not_made:
        lines += ["## Plots not made", "", *(f"- {ln}" for ln in not_made_lines(not_made)), ""]
    path = out_dir / "index.md"
    path.write_text("\n".join(lines))
    return path
