"""Two or more results JSONs of the same matrix, side by side: per cell its tok/s and speedup in
each run, how far the speedup points drift between runs, the verdicts, and each run's first timed
round against the median of its other rounds (a cold start leaking into the timed rounds).

    python scripts/compare_runs.py run1.json run2.json [run3.json ...] > runs.md

Prints a Markdown table, then the summary lines: the largest relative difference between the
runs' closed-loop speedup points, cells whose verdicts disagree ("faster" in one run, "slower" in
another), and cells whose first timed round was below FIRST_ROUND_FLOOR of the others' median.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

FIRST_ROUND_FLOOR = 0.75


def _cells(path: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(Path(path).read_text())
    return {b["param"]: b for b in doc["benchmarks"]}


def first_round_ratio(e: dict[str, Any]) -> float | None:
    """The first timed round's tok/s over the median of the other rounds' (None: < 2 rounds)."""
    rates = e.get("round_tokens_per_s") or []
    if len(rates) < 2 or not statistics.median(rates[1:]):
        return None
    return rates[0] / statistics.median(rates[1:])


def _closed(b: dict[str, Any]) -> bool:
    return not b["params"].get("request_rate") and b["params"].get("workload") != "agentic"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    runs = [_cells(p) for p in args.runs]
    ids = sorted(set.intersection(*(set(r) for r in runs)))
    n = len(runs)
    head = ["cell", *(f"tok/s {i + 1}" for i in range(n)), *(f"vs ar {i + 1}" for i in range(n))]
    head += [
        "vs ar spread",
        *(f"verdict {i + 1}" for i in range(n)),
        *(f"1st round {i + 1}" for i in range(n)),
    ]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    worst: tuple[float, str] = (0.0, "")
    flips, cold = [], []
    for cid in ids:
        es = [r[cid]["extra_info"] for r in runs]
        sp = [e.get("speedup_vs_ar") for e in es]
        spread = None
        if all(s for s in sp) and len(set(sp)) >= 1 and es[0].get("speedup_verdict") != "baseline":
            spread = max(sp) / min(sp) - 1
            if _closed(runs[0][cid]) and spread > worst[0]:
                worst = (spread, cid)
        verdicts = [str(e.get("speedup_verdict") or "-") for e in es]
        if any(v.startswith("faster") for v in verdicts) and any(v.startswith("slower") for v in verdicts):
            flips.append(cid)
        firsts = [first_round_ratio(e) for e in es]
        for i, f in enumerate(firsts):
            if f is not None and f < FIRST_ROUND_FLOOR:
                cold.append(f"{cid} (run {i + 1}: {f:.2f})")
        row = [cid]
        row += [f"{e.get('output_tokens_per_s') or 0:.1f}" for e in es]
        row += ["-" if s is None else f"{s:.3f}" for s in sp]
        row += ["-" if spread is None else f"{spread:.1%}"]
        row += verdicts
        row += ["-" if f is None else f"{f:.2f}" for f in firsts]
        print("| " + " | ".join(row) + " |")
    print()
    print(f"cells in every run: {len(ids)}")
    print(f"largest spread of a closed-loop speedup point between runs: {worst[0]:.1%} ({worst[1] or '-'})")
    print(f"verdicts faster in one run and slower in another: {len(flips)} {', '.join(flips)}")
    print(f"first timed round below {FIRST_ROUND_FLOOR:.0%} of the others' median: {len(cold)}", *cold)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
