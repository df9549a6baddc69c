"""A bracketed member's intervals, widened by the drift its two brackets bound (docs/metrics.md
"Brackets"). Pure: no pytest, no I/O.

A member whose baseline cannot run beside it (planning/residency.py: both do not fit on its
GPUs; every family with --specbench-brackets) runs between two brackets: re-runs of its
baseline's first shape on the same GPUs, each the drift sentinel's warm-up and 3-5 timed rounds
(report/drift.py ``sentinel_rounds``), the first before the member (for the
family's first member: the baseline's own cell), the second after it. Each bracket's speed over
the baseline's own rounds of that shape is the machine's level then, relative to when the
baseline's cells ran: b before, a after (report/drift.py measures both as sentinels). Where the
machine's level moved monotonically between the two brackets, the member ran at a level f within
[min(a, b), max(a, b)] of the baseline's, so its measured ratio R = true ratio x f, and

    true ratio in [lo / max(a, b), hi / min(a, b)]   ([lo, hi]: the interval of R)

is the widened interval the verdict reads. Against a leader that is itself a bracketed member
(range [g_lo, g_hi]): [lo x g_lo / max(a, b), hi x g_hi / min(a, b)]. The brackets' points are
used (each one's rounds' geometric mean over the baseline's), not their intervals (docs/metrics.md
"Brackets" says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..stats.brackets import Range, drift_range, widen  # noqa: F401
from ..stats.paired import Interval


def _ranges(specbench: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Member group -> {"range": (lo, hi) | None, "before", "after", "why"} from the run's bracket
    records (``specbench.sentinels`` with ``bracket_after``; ``bracket_members``: every member a
    GPU set's closing bracket closes) and their drift (``specbench.drift``)."""
    drifts = {d["sentinel_cell"]: d for d in specbench.get("drift") or []}
    out: dict[str, dict[str, Any]] = {}
    for s in specbench.get("sentinels") or []:
        member = s.get("bracket_after")
        if not member:
            continue
        before_id = s.get("bracket_before")
        after = (drifts.get(s["cell_id"]) or {}).get("ratio")
        before = None if before_id is None else (drifts.get(before_id) or {}).get("ratio")
        rec: dict[str, Any] = {"after": s["cell_id"], "before": before_id or s["baseline_cell"]}
        if after is None or (before_id is not None and before is None):
            missing = s["cell_id"] if after is None else before_id
            rec["why"] = f"its bracket {missing} measured nothing"
        else:
            rec["range"] = drift_range(before, after)
            rec["drift"] = [1.0 if before is None else before, after]
        # a spread family's GPU set bracketed at its end: the range of each of its members
        for m in s.get("bracket_members") or [member]:
            out[m] = rec
    return out


VERDICTS = ("faster", "slower", "not separated", "within ±2%")


def apply(
    results: Sequence[Mapping[str, Any]], comparisons: Mapping[int, dict[str, Any]], specbench: dict[str, Any]
) -> None:
    """In place: each bracketed member's comparison against its baseline gets
    ``speedup_brackets`` ({before, after, drift: [b, a], ci95: the widened interval}) and the
    verdict of the widened interval (``speedup_verdict_before_brackets`` keeps the measured one
    where they differ); without both brackets measured: "no verdict: its bracket ... measured
    nothing". A verdict already withheld (disturbed, saturated) stays withheld."""
    ranges = _ranges(specbench)
    if not ranges:
        return
    for i, r in enumerate(results):
        rec = ranges.get(r.get("group", ""))
        f = comparisons.get(i)
        if rec is None or f is None or f.get("speedup_pairing") == "interleaved":
            continue
        f["speedup_brackets"] = {k: rec[k] for k in ("before", "after", "drift") if k in rec}
        ci = f.get("speedup_vs_ar_ci95")
        if "range" in rec and ci:
            f["speedup_brackets"]["ci95"] = list(widen(ci[0], ci[1], rec["range"]))
        v = f.get("speedup_verdict")
        if v is None or v not in VERDICTS:
            continue
        if "range" not in rec:
            f["speedup_verdict_before_brackets"] = v
            f["speedup_verdict"] = f"no verdict: {rec['why']}"
            continue
        if not ci:
            continue
        lo, hi = f["speedup_brackets"]["ci95"]
        point = f["speedup_vs_ar"] / math.sqrt(rec["range"][0] * rec["range"][1])
        widened = Interval(point, lo, hi, f.get("speedup_pairs") or 0).verdict()
        if widened != v:
            f["speedup_verdict_before_brackets"] = v
            f["speedup_verdict"] = widened
