"""Pictures of a run, from its results JSON alone: PNGs (matplotlib, non-interactive, imported only
here), the data of each as CSV beside it, and an index page (Markdown) that embeds them under the
summary table and the decision view. Failed and skipped cells are drawn as such (a red x at the
bottom of the panel, and listed under the figure), never silently left out. No pytest here.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .breakeven import plot_rows as forced_plot_rows
from .figure import _new_figure, method_styles

Row = dict[str, Any]  # one plotted point: panel, series, x, y, lo, hi, status


def _title(doc: dict[str, Any]) -> str:
    spec = (doc.get("machine_info") or {}).get("specbench") or {}
    matrix = Path(str((doc.get("specbench") or {}).get("matrix") or "?")).name
    gpus = [g.get("name", "?") for g in spec.get("gpus") or []]
    where = (
        f"{len(gpus)} x {gpus[0]}"
        if gpus
        else f"CPU ({(doc.get('machine_info') or {}).get('cpu', {}).get('count', '?')} cores)"
    )
    v = spec.get("versions") or {}
    libs = ", ".join(f"{k} {v[k]}" for k in ("sglang", "torch", "transformers") if v.get(k))
    return f"{matrix} on {where} ({libs})" if libs else f"{matrix} on {where}"


def _cells(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(params, extra_info, status) of every cell: measured ones, then failed ones (their params
    when the JSON has them) as status "failed"."""
    out = [(dict(b["params"]), b["extra_info"], "ok") for b in doc.get("benchmarks", [])]
    for f in (doc.get("specbench") or {}).get("failed_cells") or []:
        if isinstance(f, dict) and isinstance(f.get("params"), dict):
            out.append((dict(f["params"]), {}, "interrupted" if f.get("interrupted") else "failed"))
    return out


def _failed_ids(doc: dict[str, Any]) -> list[str]:
    fails = (doc.get("specbench") or {}).get("failed_cells") or []
    return [f["cell"] for f in fails if isinstance(f, dict) and f.get("cell")]


def _panel(p: dict[str, Any], keys: Sequence[str]) -> str:
    fmt = {"tp": "tp{}", "concurrency": "c{}", "context_tokens": "in{}", "output_tokens": "out{}"}
    parts = [fmt.get(k, "{}").format(p[k]) for k in keys if k in p]
    extra = [f"{k}={p[k]}" for k in ("request_rate", "temperature", "scenario", "category") if k in p]
    return " ".join(parts + extra)


def _series_rows(
    doc: dict[str, Any],
    x_key: str,
    y: Callable[[dict[str, Any]], Any],
    panel_keys: Sequence[str],
    err: Callable[[dict[str, Any]], Any] | None = None,
    only: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
) -> list[Row]:
    rows = []
    for p, e, status in _cells(doc):
        if x_key not in p or (only is not None and not only(p, e)):
            continue
        val = y(e) if status == "ok" else None
        if status == "ok" and val is None:
            continue
        ci = err(e) if (err is not None and status == "ok") else None
        rows.append(
            {
                "panel": _panel({k: v for k, v in p.items() if k != x_key}, panel_keys),
                "series": p["method"],
                "x": p[x_key],
                "y": val,
                "lo": ci[0] if ci else None,
                "hi": ci[1] if ci else None,
                "status": status,
            }
        )
    return rows


def _write_csv(path: Path, rows: list[Row]) -> None:
    cols = ["panel", "series", "x", "y", "lo", "hi", "status"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in cols})


def _figure(
    rows: list[Row],
    title: str,
    xlabel: str,
    ylabel: str,
    path: Path,
    failed: list[str],
    *,
    kind: str = "line",
    logx: bool = False,
    logy: bool = False,
    hline: float | None = None,
    styles: dict[str, tuple[str, str]] | None = None,
) -> None:
    panels = sorted({r["panel"] for r in rows}, key=_natural)
    n = len(panels)
    cols = min(n, 3)
    nrows = math.ceil(n / cols)
    import textwrap

    fig = _new_figure((max(5.2 * cols, 8.0), 3.8 * nrows + 1.1))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        pr = [r for r in rows if r["panel"] == panel]
        series = sorted({r["series"] for r in pr}, key=lambda x: _natural(str(x)))
        xs_all = sorted({r["x"] for r in pr}, key=lambda x: (_num(x), str(x)))  # names: by name
        for i, s in enumerate(series):
            ok = sorted(
                (r for r in pr if r["series"] == s and r["status"] == "ok"), key=lambda r: _num(r["x"])
            )
            color, marker = (styles or {}).get(s, (f"C{i % 10}", "o"))
            if kind == "bar":
                pos = [xs_all.index(r["x"]) + (i - (len(series) - 1) / 2) * 0.8 / len(series) for r in ok]
                ax.bar(pos, [r["y"] for r in ok], width=0.8 / len(series), label=s, color=color)
            else:
                xs = [_num(r["x"]) for r in ok]
                ys = [r["y"] for r in ok]
                if kind == "cdf":
                    ax.plot(xs, ys, drawstyle="steps-post", label=s, color=color)
                else:
                    ax.plot(xs, ys, marker=marker, label=s, color=color)
                lo = [r for r in ok if r.get("lo") is not None]
                if lo:
                    ax.errorbar(
                        [_num(r["x"]) for r in lo],
                        [r["y"] for r in lo],
                        yerr=[[r["y"] - r["lo"] for r in lo], [r["hi"] - r["y"] for r in lo]],
                        fmt="none",
                        capsize=3,
                        color=ax.lines[-1].get_color(),
                    )
            bad = [r for r in pr if r["series"] == s and r["status"] != "ok"]
            if bad:
                where = [xs_all.index(r["x"]) for r in bad] if kind == "bar" else [_num(r["x"]) for r in bad]
                ax.scatter(
                    where, [0] * len(bad), marker="x", color="red", s=60, zorder=5, label=f"{s} (failed)"
                )
        if kind == "bar":
            ax.set_xticks(range(len(xs_all)), [str(x) for x in xs_all], rotation=30, ha="right")
        if logx and kind != "bar":
            ax.set_xscale("log", base=2 if kind != "cdf" else 10)
            if len(xs_all) <= 8 and kind != "cdf":  # the measured points as ticks (c1, c4, c32)
                ax.set_xticks([_num(x) for x in xs_all], [str(x) for x in xs_all])
            else:
                from matplotlib.ticker import NullFormatter

                ax.xaxis.set_minor_formatter(NullFormatter())
        elif kind == "line" and all(float(_num(x)).is_integer() for x in xs_all):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if logy:
            ax.set_yscale("log")
        if hline is not None:
            ax.axhline(hline, color="grey", linestyle="--", linewidth=1)
        ax.set_title(panel or "all cells", fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("\n".join(textwrap.fill(t, 95) for t in title.splitlines()), fontsize=10)
    foot = (
        f"failed or interrupted cells (red x where their shape is known): {', '.join(failed)}"
        if failed
        else ""
    )
    if foot:
        fig.text(0.01, 0.005, foot[:300], fontsize=7, color="red", va="bottom")
    fig.tight_layout(rect=(0, 0.03 if foot else 0, 1, 0.95))
    fig.savefig(path, dpi=90)


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def _natural(s: str) -> tuple[Any, ...]:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def _closed(p: dict[str, Any], e: dict[str, Any]) -> bool:
    return not p.get("request_rate")


def _spread(values: Sequence[float]) -> bool:
    vals = [v for v in values if v and v > 0]
    return bool(vals) and max(vals) / min(vals) >= 30  # a log axis where the data spans decades


def plot_run(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every plot the run's data supports; returns the PNGs written (each with its CSV)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    title = _title(doc)
    failed = _failed_ids(doc)
    written: list[Path] = []
    styles = method_styles(doc)

    def emit(name: str, rows: list[Row], what: str, xlabel: str, ylabel: str, **kw: Any) -> None:
        if kw.get("kind", "line") in ("line", "cdf"):  # a line needs two points: panels with one x go
            xs: dict[str, set[Any]] = {}
            for r in rows:
                xs.setdefault(r["panel"], set()).add(r["x"])
            rows = [r for r in rows if len(xs[r["panel"]]) > 1]
        if not [r for r in rows if r["status"] == "ok"]:
            return
        if kw.pop("auto_logy", False):
            kw["logy"] = _spread([r["y"] for r in rows if r["y"]])
        png = out_dir / f"{name}.png"
        _write_csv(png.with_suffix(".csv"), rows)
        _figure(rows, f"{what}\n{title}", xlabel, ylabel, png, failed, styles=styles, **kw)
        written.append(png)

    tps = _series_rows(
        doc,
        "concurrency",
        lambda e: e.get("output_tokens_per_s"),
        ("workload", "tp", "context_tokens", "output_tokens"),
        only=_closed,
    )
    if len({r["x"] for r in tps}) > 1:
        emit(
            "tok_s_vs_concurrency",
            tps,
            "Output tok/s vs concurrency (closed loop)",
            "concurrency (requests in flight)",
            "output tokens / s",
            logx=True,
            auto_logy=True,
        )

    def ci(e: dict[str, Any]) -> Any:
        return e.get("speedup_vs_ar_ci95")

    def sp(e: dict[str, Any]) -> Any:
        return None if e.get("speedup_verdict") == "baseline" else e.get("speedup_vs_ar")

    for x_key, name, label in (
        ("concurrency", "speedup_vs_concurrency", "concurrency (requests in flight)"),
        ("context_tokens", "speedup_vs_context", "prompt tokens"),
    ):
        keys = [k for k in ("workload", "tp", "concurrency", "context_tokens", "output_tokens") if k != x_key]
        rows = _series_rows(doc, x_key, sp, keys, err=ci)
        rows = [r for r in rows if r["series"] not in _baselines(doc)]
        if len({r["x"] for r in rows}) > 1:
            emit(
                name,
                rows,
                "Speedup vs the AR baseline (95% CI over paired rounds; open loop: p50 latency ratio)",
                label,
                "speedup (x)",
                logx=True,
                hline=1.0,
            )

    acc = _series_rows(
        doc,
        "context_tokens",
        lambda e: e.get("accept_length"),
        ("workload", "tp", "concurrency"),
        only=lambda p, e: p.get("workload") == "long_context" or "long" in str(p.get("workload")),
    )
    if len({r["x"] for r in acc}) > 1:
        emit(
            "accept_vs_context",
            acc,
            "Acceptance length vs prompt length",
            "prompt tokens",
            "accept length (tokens per verify step)",
            logx=True,
        )

    for key, name, what, ylabel in (
        ("accept_length", "accept_vs_turn", "Acceptance length vs agentic turn", "accept length"),
        ("prefix_cache_hit_rate", "prefix_hits_vs_turn", "Prefix-cache hits vs agentic turn", "hit rate"),
    ):
        turns = [
            {
                "panel": _panel(p, ("workload", "tp", "concurrency")),
                "series": p["method"],
                "x": t["turn"],
                "y": t[key],
                "status": status,
            }
            for p, e, status in _cells(doc)
            for t in e.get("turns") or []
            if t.get(key) is not None
        ]
        emit(name, turns, what, "turn", ylabel)

    cats = _series_rows(doc, "category", lambda e: e.get("accept_length"), ("workload", "tp", "concurrency"))
    emit(
        "accept_by_category",
        cats,
        "Acceptance length per prompt category",
        "category",
        "accept length",
        kind="bar",
    )

    pos = []
    for p, e, status in _cells(doc):
        for i, rate in enumerate(e.get("accept_rate_by_position") or [], start=1):
            if rate is not None:
                pos.append(
                    {
                        "panel": _panel(
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
    )

    for key, name, label in (
        ("ttft_s", "ttft_cdf", "TTFT (ms)"),
        ("itl_ms_p50", "itl_cdf", "per-request median ITL (ms)"),
    ):
        rows = []
        for p, e, _status in _cells(doc):
            vals = sorted(v for v in ((e.get("per_request") or {}).get(key) or []) if v is not None)
            scale = 1e3 if key == "ttft_s" else 1.0
            for i, v in enumerate(vals):
                rows.append(
                    {
                        "panel": _panel(p, ("workload", "tp", "concurrency", "context_tokens")),
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
            kind="cdf",
        )

    tp = [
        r
        for r in _series_rows(
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
    if len({r["x"] for r in tp}) > 1:
        emit(
            "tok_s_per_gpu_by_tp", tp, "Output tok/s per GPU by TP size", "TP size", "output tokens / s / GPU"
        )

    energy = _series_rows(
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
    failed = _failed_ids(new)
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
        _write_csv(png.with_suffix(".csv"), rows)
        _bars(
            rows,
            f"New / old {label} per cell\n{_title(new)}",
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


def index_page(doc: dict[str, Any], pngs: list[Path], out_dir: Path, summary: list[str]) -> Path:
    """index.md: the summary table and the decision view (``summary``), then every picture."""
    lines = [f"# {_title(doc)}", "", *summary, ""]
    for p in pngs:
        lines += [
            f"## {p.stem.replace('_', ' ')}",
            "",
            f"![{p.stem}]({p.name})",
            f"data: [{p.with_suffix('.csv').name}]({p.with_suffix('.csv').name})",
            "",
        ]
    path = out_dir / "index.md"
    path.write_text("\n".join(lines))
    return path
