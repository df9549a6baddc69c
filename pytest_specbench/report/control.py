"""The A/A control: a twin of the baseline (the same engine, another instance) measured as a member
against it, and the verdicts it withholds (docs/metrics.md "A/A control"). Pure: no pytest, no I/O.

Rounds that alternate cancel what the machine does to two engines over time; they do not cancel a
difference between the two engine instances themselves: a server whose processes the OS placed
badly, a slower GPU of a set, a cache warmed differently. A member compared with a baseline
instance that runs 30 % slow reads 30 % "faster" with an interval as tight as any. A twin of the
baseline (same backend, model, engine_args and env; ``Matrix.controls``) reads that effect: it
should be x1.00. Where its interval at a shape excludes 1, the instance effect is established and
its band is the interval's far end from 1 (|log|), as a drift sentinel's (report/drift.py): each
other verdict at that shape (same workload, TP, concurrency, ...) must be clear of the band, or it
is withheld with the control as the reason. A control whose interval spans 1 withholds nothing: its
spread is the rounds', which every interval already carries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..stats.drift import instance_band as band  # noqa: F401  (the instance effect a control establishes)
from ..stats.paired import axes
from .drift import VERDICTS, not_clear


def _instance(r: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Where a cell's baseline instance lives: its shape and, under -n, its worker (each worker
    starts its own baseline instance beside its members)."""
    return (*axes(r["params"]), ("worker", str(r.get("worker") or "")))


def apply(
    results: Sequence[Mapping[str, Any]],
    comparisons: Mapping[int, dict[str, Any]],
    specbench: dict[str, Any],
    baselines: str | Mapping[str, str | None] | None = None,
) -> None:
    """In place: ``specbench["control"]``, one record per control cell with a comparison (its
    ratio, interval, whether it is established, its band, the verdicts it withheld), and each
    withheld verdict turned into "no verdict: ..." (``speedup_verdict_before_control`` keeps it).
    A control checks the members compared with the same baseline at its shape in the same worker
    (the same baseline instance). Its own reading is never a method's verdict: its comparison
    gets ``aa_control`` (never ranked) and "no verdict: ..." (``speedup_verdict_before_control``
    keeps what it read). ``baselines``: each method's baseline (one name for all); without it a
    control checks every member at its shape. Nothing without ``specbench["controls"]``."""
    controls = specbench.get("controls") or {}
    if not controls:
        return
    recs: list[dict[str, Any]] = []
    for i, r in enumerate(results):
        method = r["params"].get("method")
        f = comparisons.get(i)
        if method not in controls or f is None or not f.get("speedup_vs_ar"):
            continue
        point, ci = f["speedup_vs_ar"], f.get("speedup_vs_ar_ci95")
        rec: dict[str, Any] = {
            "control": method,
            "baseline": controls[method],
            "control_cell": r["cell_id"],
            "shape": dict(axes(r["params"])),
            "worker": r.get("worker"),
            "ratio": point,
            "ci95": list(ci) if ci else None,
            "pairing": f.get("speedup_pairing"),
            "withheld": [],
        }
        if not ci:
            rec.update(established=False, band=0.0, why="one round: no interval, no check")
        else:
            b = band(ci[0], ci[1])
            rec.update(established=b > 0, band=b)
        recs.append(rec)
        f["aa_control"] = controls[method]
        if f.get("speedup_verdict") is not None:
            f["speedup_verdict_before_control"] = f["speedup_verdict"]
            f["speedup_verdict"] = (
                f"no verdict: the A/A control, a twin of {controls[method]}: it reads the instance "
                "effect, not a method's speed"
            )
    by_cell = {c["control_cell"]: c for c in recs}
    at: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        if r["cell_id"] in by_cell:
            at.setdefault(_instance(r), []).append(by_cell[r["cell_id"]])
    for i, r in enumerate(results):
        f = comparisons.get(i)
        method = r["params"].get("method")
        if method in controls or f is None:
            continue
        base = baselines if isinstance(baselines, str) or baselines is None else baselines.get(method)
        here = [
            c
            for c in at.get(_instance(r), ())
            if c["established"] and (base is None or c["baseline"] == base)
        ]
        v = f.get("speedup_verdict")
        if not here or v not in VERDICTS:
            continue
        rec = max(here, key=lambda c: c["band"])
        why = not_clear(f, rec["band"], v)
        if why:
            f["speedup_verdict_before_control"] = v
            f["speedup_verdict"] = (
                f"no verdict: {why} of the instance effect its A/A control {rec['control_cell']} "
                f"measured ({says(rec)})"
            )
            rec["withheld"].append(r["cell_id"])
    specbench["control"] = recs


def says(rec: Mapping[str, Any]) -> str:
    """``x1.402 [1.210, 1.625] against ar``."""
    ci = rec.get("ci95")
    return (
        f"x{rec['ratio']:.3f}"
        + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        + f" against {rec['baseline']}"
    )


def lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per control cell, e.g. "A/A control twin-tp1-c16: x1.07 [0.90, 1.27] against ar:
    not separated: an instance effect up to x1.27 not ruled out"; a control that measured nothing;
    and where a run compared members with baselines beside them and carries no control, the line
    that says so."""
    sb = doc.get("specbench") or {}
    out = []
    recs = list(sb.get("control") or ())
    for rec in recs:
        if rec.get("established"):
            held = rec.get("withheld") or []
            said = (
                f"separated: an instance effect of up to x{math.exp(rec['band']):.3f}; "
                f"{len(held)} verdicts at its shape withheld" + (f" ({', '.join(held)})" if held else "")
            )
        elif rec.get("why"):
            said = rec["why"]
        else:
            lo, hi = rec["ci95"]
            said = f"not separated: an instance effect up to x{max(hi, 1 / lo):.3f} either way not ruled out"
        out.append(f"A/A control {rec['control_cell']}: {says(rec)}: {said}")
    read = {r.get("control") for r in recs}
    for m, base in (sb.get("controls") or {}).items():
        if m not in read:
            out.append(
                f"A/A control {m} (a twin of {base}) measured nothing: the instances of {base} "
                "are unchecked in this run"
            )
    if not sb.get("controls") and uncontrolled(doc):
        out.append(
            "no A/A control: members were compared with a baseline instance beside them; a twin of "
            "the baseline in the matrix (same engine args, another name) would check that instance "
            'runs as fast as another (docs/metrics.md "A/A control")'
        )
    return out


def uncontrolled(doc: Mapping[str, Any]) -> bool:
    """Whether the run took verdicts against baseline engines started beside a member's on its GPUs
    (resident baselines: a second instance whose speed no other cell checks)."""
    refs = (doc.get("specbench") or {}).get("reference_engines") or ()
    return any(isinstance(e, dict) and e.get("resident") for e in refs)


def control_cells(doc: Mapping[str, Any]) -> list[str]:
    """The A/A control cells (never ranked: they read the instance effect)."""
    return [str(rec.get("control_cell")) for rec in (doc.get("specbench") or {}).get("control") or ()]


def withheld_cells(doc: Mapping[str, Any]) -> list[str]:
    """The cells whose verdicts an A/A control withheld."""
    ids = [c for rec in (doc.get("specbench") or {}).get("control") or () for c in rec.get("withheld") or ()]
    return list(dict.fromkeys(ids))
