"""What every plot shares: a figure on the Agg canvas without pyplot, one colour and marker per
method across the plots of a run, and the run's title (matrix, GPUs, library versions). Imports
matplotlib only when a figure is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def method_styles(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """One colour and marker per method for every plot of a run: methods (measured or failed) in
    name order take the colour cycle C0..C9 and the markers in turn, so a method looks the same
    in every panel, and in the plots of another run of the same methods."""
    names = {b["params"]["method"] for b in doc.get("benchmarks", []) if "method" in (b.get("params") or {})}
    names |= {
        f["params"]["method"]
        for f in (doc.get("specbench") or {}).get("failed_cells") or []
        if isinstance(f, dict) and isinstance(f.get("params"), dict) and "method" in f["params"]
    }
    return {n: (f"C{i % 10}", MARKERS[(i // 10 + i) % len(MARKERS)]) for i, n in enumerate(sorted(names))}


def _new_figure(size: tuple[float, float]) -> Any:
    """A figure drawn by the Agg canvas through matplotlib's object API: no pyplot, so no GUI
    backend, no global figure list, and no IPython hook (a broken IPython on a GPU host made
    pyplot raise while choosing its backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def run_title(doc: dict[str, Any]) -> str:
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
