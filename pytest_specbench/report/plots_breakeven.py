"""The break-even map: per method family, TP and output length, the break-even accept length
(breakeven.py) at each (concurrency, context) of the run, as a grid of numbered squares; where a
family pays at every forced length "<= min", at none "> max". Drawn with matplotlib's object API
(figure._new_figure), with its data as CSV."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from .breakeven import break_even, curves


def map_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (family, shape): panel (family, workload, TP, output), concurrency, context
    (prompt tokens), the break-even (None outside the forced range), and its text."""
    rows = []
    for (family, shape), pts in curves(doc).items():
        d = dict(shape)
        be = break_even(pts)
        lo, hi = be["forced_range"] or (None, None)
        text = {
            "at": f"{be['at']:.2f}" if be["at"] is not None else "",
            "below": f"<={lo:g}",
            "above": f">{hi:g}",
            "mixed": "mixed",
        }.get(be["where"], "")
        panel = f"{family} {d.get('workload', '')} tp{d.get('tp', '?')} out{d.get('output_tokens', '?')}"
        rows.append(
            {
                "panel": panel,
                "concurrency": int(d.get("concurrency", 0)),
                "context": int(d.get("context_tokens", d.get("prompt_tokens", 0)) or 0),
                "break_even": be["at"] if be["where"] == "at" else None,
                "where": be["where"],
                "text": text,
            }
        )
    return rows


def plot_map(doc: dict[str, Any], out_dir: Path, not_made: list[tuple[str, str]] | None = None) -> list[Path]:
    """break_even_map.png (and .csv) when the run has forced points; [] otherwise, and why in
    ``not_made``."""
    rows = map_rows(doc)
    if not rows:
        if not_made is not None:
            not_made.append(("break_even_map", "no cell ran at a forced accept length"))
        return []
    from .figure import _new_figure, run_title

    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "break_even_map.png"
    with png.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["panel", "concurrency", "context", "break_even", "where", "text"])
        w.writeheader()
        w.writerows(rows)
    panels = sorted({r["panel"] for r in rows})
    cols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / cols)
    fig = _new_figure((max(4.6 * cols, 6.0), 3.6 * nrows + 1.0))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    vals = [r["break_even"] for r in rows if r["break_even"] is not None]
    vmin, vmax = (min(vals), max(vals)) if vals else (1.0, 2.0)
    for ax, panel in zip(axes.flat, panels, strict=False):
        pr = [r for r in rows if r["panel"] == panel]
        cs = sorted({r["concurrency"] for r in pr})
        xs = sorted({r["context"] for r in pr})
        grid = [[math.nan] * len(cs) for _ in xs]
        for r in pr:
            v = r["break_even"]
            grid[xs.index(r["context"])][cs.index(r["concurrency"])] = math.nan if v is None else v
        im = ax.imshow(
            grid, cmap="viridis_r", vmin=vmin, vmax=vmax if vmax > vmin else vmin + 1, aspect="auto"
        )
        for r in pr:
            x, y = cs.index(r["concurrency"]), xs.index(r["context"])
            box = {"facecolor": "white", "alpha": 0.7, "edgecolor": "none"}
            ax.text(x, y, r["text"], ha="center", va="center", fontsize=9, bbox=box)
        ax.set_xticks(range(len(cs)), [f"c{c}" for c in cs])
        ax.set_yticks(range(len(xs)), [f"in{x}" for x in xs])
        ax.set_xlabel("concurrency")
        ax.set_ylabel("prompt tokens")
        ax.set_title(panel, fontsize=9)
        fig.colorbar(im, ax=ax, label="break-even accept length")
    fig.suptitle(
        "Break-even accept length (speedup over AR = 1; lower: speculation pays sooner)\n" + run_title(doc),
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(png, dpi=90)
    return [png]
