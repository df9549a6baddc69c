"""A run's cells as rows of panelled series (one panel per shape, one series per method, x an
axis of the shape), their CSV, and the figure that draws them: lines, bars or CDFs, intervals as
error bars, failed and interrupted cells as a red x at the bottom of their panel and listed under
the figure. matplotlib is imported only while a figure is drawn (figure.py). No pytest here.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .figure import _new_figure

Row = dict[str, Any]  # one plotted point: panel, series, x, y, lo, hi, status


def cells_with_status(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(params, extra_info, status) of every cell: measured ones, then failed ones (their params
    when the JSON has them) as status "failed"."""
    out = [(dict(b["params"]), b["extra_info"], "ok") for b in doc.get("benchmarks", [])]
    for f in (doc.get("specbench") or {}).get("failed_cells") or []:
        if isinstance(f, dict) and isinstance(f.get("params"), dict):
            out.append((dict(f["params"]), {}, "interrupted" if f.get("interrupted") else "failed"))
    return out


def failed_ids(doc: dict[str, Any]) -> list[str]:
    fails = (doc.get("specbench") or {}).get("failed_cells") or []
    return [f["cell"] for f in fails if isinstance(f, dict) and f.get("cell")]


def panel_label(p: dict[str, Any], keys: Sequence[str]) -> str:
    fmt = {"tp": "tp{}", "concurrency": "c{}", "context_tokens": "in{}", "output_tokens": "out{}"}
    parts = [fmt.get(k, "{}").format(p[k]) for k in keys if k in p]
    extra = [f"{k}={p[k]}" for k in ("request_rate", "temperature", "scenario", "category") if k in p]
    return " ".join(parts + extra)


def series_rows(
    doc: dict[str, Any],
    x_key: str,
    y: Callable[[dict[str, Any]], Any],
    panel_keys: Sequence[str],
    err: Callable[[dict[str, Any]], Any] | None = None,
    only: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
) -> list[Row]:
    rows = []
    for p, e, status in cells_with_status(doc):
        if x_key not in p or (only is not None and not only(p, e)):
            continue
        val = y(e) if status == "ok" else None
        if status == "ok" and val is None:
            continue
        ci = err(e) if (err is not None and status == "ok") else None
        rows.append(
            {
                "panel": panel_label({k: v for k, v in p.items() if k != x_key}, panel_keys),
                "series": p["method"],
                "x": p[x_key],
                "y": val,
                "lo": ci[0] if ci else None,
                "hi": ci[1] if ci else None,
                "status": status,
            }
        )
    return rows


def write_csv(path: Path, rows: list[Row]) -> None:
    cols = ["panel", "series", "x", "y", "lo", "hi", "status"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in cols})


def draw(
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
