"""versus.png: each comparison between two methods (report/versus.py: the matrix's ``compare``
pairs and ``--versus``) by concurrency, A over B with its paired-rounds interval, a panel per pair
and shape, the dashed line at 1. matplotlib is imported by the figure code (panels.py) only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import panels
from .figure import run_title
from .versus import plot_rows


def plot_versus(
    doc: dict[str, Any], out_dir: Path, not_made: list[tuple[str, str]] | None = None
) -> list[Path]:
    """versus.png (and .csv) when the run names comparisons; [] otherwise, and why in ``not_made``."""
    rows = plot_rows(doc)
    if not rows:
        if not_made is not None:
            not_made.append(
                ("versus", "no comparison between two methods (the matrix's compare pairs, --versus)")
            )
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "versus.png"
    panels.write_csv(png.with_suffix(".csv"), rows)
    title = f"Method against method (A over B, paired rounds, 95% interval)\n{run_title(doc)}"
    panels.draw(
        rows, title, "concurrency", "A over B", png, panels.failed_ids(doc), logx=True, logy=True, hline=1.0
    )
    return [png]
