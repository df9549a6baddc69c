"""``python -m pytest_specbench.report RUN.json --versus METHOD``: a finished run re-based on read
(``specbench.versus``, which report/versus.py reads), or several runs' cells read as one for those
comparisons alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def set_versus(doc: dict[str, Any], method: str, error: Callable[[str], Any]) -> None:
    """Re-base ``doc`` on read: its comparisons section (report/versus.py) adds every method
    against ``method``, which must name a method, a sweep or a forced family of the run."""
    known = set()
    for b in doc.get("benchmarks") or []:
        e = b.get("extra_info") or {}
        known |= {(b.get("params") or {}).get("method"), e.get("sweep"), e.get("forced_family")}
    known.discard(None)
    if method not in known:
        error(f"--versus {method}: no such method in the run; methods: {', '.join(sorted(known))}")
    doc.setdefault("specbench", {})["versus"] = method


def read_several(paths: Sequence[str], method: str, error: Callable[[str], Any]) -> int:
    """``--versus`` over several JSONs: their cells read as one run (each tagged with its file, so
    a comparison across two files says so), and only the comparisons printed."""
    from .mdtext import one_line, safe_doc
    from .versus import section

    doc: dict[str, Any] = {"benchmarks": [], "specbench": {"compare": []}}
    for p in paths:
        try:
            one = json.loads(Path(p).read_text())
            entries = one["benchmarks"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            error(f"{p}: not a results JSON ({type(e).__name__}: {e})")
        doc["benchmarks"] += [{**b, "_run": p} for b in entries]
        doc["specbench"]["compare"] += (one.get("specbench") or {}).get("compare") or []
    set_versus(doc, method, error)
    print("\n".join(one_line(section(safe_doc(doc)))[1:]))
    return 0
