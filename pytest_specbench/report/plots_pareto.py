"""The Pareto plot: per closed-loop shape, output tok/s per user (x) against output tok/s per GPU
(y), one point per (method, TP, concurrency) in the method's colour and marker (figure.py), each
labelled with its TP and concurrency, and the frontier (pareto.py) drawn through the points no other
point beats on both axes; with its data as CSV."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from .pareto import Point, csv_rows, frontier, hosts, hosts_note, points, trade_panels


def plot_pareto(
    doc: dict[str, Any], out_dir: Path, not_made: list[tuple[str, str]] | None = None
) -> list[Path]:
    """pareto.png (and .csv) when the run has closed-loop shapes with a trade to show (a method at
    two or more TP sizes or concurrencies); [] else, and why in ``not_made``."""
    pts = points(doc)
    panels = trade_panels(pts)
    if not panels:
        if not_made is not None:
            not_made.append(
                (
                    "pareto",
                    "no method ran one closed-loop shape at two or more TP sizes or concurrencies: "
                    "no trade to draw"
                    if pts
                    else "no closed-loop cell with tok/s per user and per GPU",
                )
            )
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "pareto.png"
    with png.with_suffix(".csv").open("w", newline="") as f:
        csv.writer(f).writerows(csv_rows(panels))
    draw(doc, panels).savefig(png, dpi=90)
    return [png]


def draw(doc: dict[str, Any], panels: dict[str, list[Point]]) -> Any:
    """The figure: a panel per shape, each method in its colour and marker of the run."""
    from .figure import _new_figure, method_styles, run_title

    styles = method_styles(doc)
    where = hosts(doc)
    names = sorted(panels)
    cols = min(len(names), 2)
    nrows = math.ceil(len(names) / cols)
    fig = _new_figure((6.4 * cols, 4.4 * nrows + 0.7))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        pts = panels[name]
        note = hosts_note(frontier(pts), where)
        for method in sorted({q.method for q in pts}):
            mine = sorted((q for q in pts if q.method == method), key=lambda q: (q.tp, q.concurrency))
            colour, marker = styles.get(method, ("C0", "o"))
            xs, ys = [q.per_user for q in mine], [q.per_gpu for q in mine]
            ax.scatter(xs, ys, color=colour, marker=marker, s=36, label=method, zorder=3)
            for tp in sorted({q.tp for q in mine}):  # the method's curve over concurrency, per TP
                line = [q for q in mine if q.tp == tp]
                ax.plot(
                    [q.per_user for q in line],
                    [q.per_gpu for q in line],
                    "-",
                    color=colour,
                    lw=0.8,
                    alpha=0.5,
                )
            several_tp = len({p.tp for p in pts}) > 1
            for q in mine:
                at = f" @{where.get(q.cell, '?')}" if note else ""  # a frontier across hosts
                ax.annotate(
                    (f"tp{q.tp} c{q.concurrency}" if several_tp else f"c{q.concurrency}") + at,
                    (q.per_user, q.per_gpu),
                    textcoords="offset points",
                    xytext=(4, 3),
                    fontsize=7,
                    color="0.3",
                )
        front = frontier(pts)
        fx, fy = [q.per_user for q in front], [q.per_gpu for q in front]
        ax.plot(fx, fy, "--", color="0.2", lw=1, label="frontier", zorder=2)
        froms = {q.per_user_from for q in pts}
        how = {
            frozenset({"tpot"}): "1000 / TPOT p50 ms",
            frozenset({"latency"}): "tokens a request / (E2E p50 - TTFT p50); no TPOT measured",
        }.get(frozenset(froms), "1000 / TPOT p50 ms, else tokens / (E2E p50 - TTFT p50)")
        ax.set_xlabel(f"output tok/s per user ({how})")
        ax.set_ylabel("output tok/s per GPU")
        ax.set_title(name + (f"\n{note}" if note else ""), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        "Interactivity against cost: each point a (method, TP, concurrency); up and right is better\n"
        + run_title(doc),
        fontsize=9,
    )
    fig.tight_layout()  # (it leaves room for the suptitle)
    return fig
