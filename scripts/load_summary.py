"""Verdicts of a results JSON under load, recomputed by this checkout's rule (stats/paired.py),
as a small JSON: per compared cell, others' share of the cores in each timed round of the cell
and of its interleaved baseline, the paired ratios, the speedup with its interval, the verdict
and why it was kept or withheld; then the counts.

    python scripts/load_summary.py RUN.json [--twins] > summary.json

``--twins``: the run compares two identical engines; the summary counts any "faster" or
"slower" among them as a separated twin (there must be none)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from pytest_specbench.report.summary import result_of_entry
from pytest_specbench.stats import paired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--twins", action="store_true")
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.json).read_text())
    results = [result_of_entry(b, b.get("group", ""), {}) for b in doc["benchmarks"]]
    baseline = {r["params"]["method"]: "ar" for r in results}
    comp = paired.compare_all(results, baseline)
    cells = []
    for i, r in enumerate(results):
        c = comp[i]
        m = r["metrics"]
        ref = m.get("reference") or {}
        if c.get("speedup_verdict") in (None, "baseline"):
            continue
        # per pair: tok/s ÷ the baseline's (closed loop), or its p50 latency ÷ the cell's (open loop)
        ratios = [x for x in paired._speeds(r, ref) if x] if ref else []
        ci = c.get("speedup_vs_ar_ci95")
        cells.append(
            {
                "cell": r["cell_id"],
                "pairing": c.get("speedup_pairing"),
                "other_cpu_share": m.get("other_cpu_share"),
                "round_other_cpu_share": m.get("round_other_cpu_share"),
                "baseline_round_other_cpu_share": ref.get("round_other_cpu_share"),
                "paired_ratios": [round(x, 4) for x in ratios],
                "speedup": round(c["speedup_vs_ar"], 4) if c.get("speedup_vs_ar") else None,
                "ci95": [round(x, 4) for x in ci] if ci else None,
                "verdict": c.get("speedup_verdict"),
                "under_load": c.get("speedup_under_load"),
            }
        )
    kinds = Counter(
        "withheld" if str(x["verdict"]).startswith("no verdict") else str(x["verdict"]) for x in cells
    )
    out = {
        "source": Path(args.json).name,
        "rule": {
            "load_gap": paired.LOAD_GAP,
            "pair_cv_max": paired.PAIR_CV_MAX,
            "load_margin": paired.LOAD_MARGIN,
        },
        "compared_cells": len(cells),
        "verdicts": dict(sorted(kinds.items())),
        "kept_under_load": sum(1 for x in cells if x["under_load"]),
        "cells": cells,
    }
    if args.twins:
        out["separated_twins"] = sum(1 for x in cells if x["verdict"] in ("faster", "slower"))
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
