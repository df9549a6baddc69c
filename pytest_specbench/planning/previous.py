"""The plan's times from a previous results JSON (``--specbench-plan-from``): cells measured exactly
as planned (same fingerprint) and engine starts of the same backend and model. No pytest."""

from __future__ import annotations

from typing import Any

from ..matrix.schema import ENDPOINT_BACKENDS
from . import eta
from .records import CellPlan, GroupPlan


def _same_engine(ev: dict[str, Any], key: tuple[str, str] | None) -> bool:
    """Whether a JSON's engine start was of this backend and model (as far as the event says)."""
    if key is None or ev.get("backend") not in (None, key[0]):
        return False
    path = ((ev.get("info") or {}).get("kwargs") or {}).get("model_path")
    return path is None or str(path).rstrip("/").split("/")[-1] == key[1].rstrip("/").split("/")[-1]


def apply_previous(
    cells: dict[str, CellPlan],
    doc: dict[str, Any],
    groups: dict[str, GroupPlan] | None = None,
    fingerprints: dict[str, str] | None = None,
    group_keys: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Measured times from a previous results JSON: each cell's timed rounds, scaled to all its
    rounds (warm-up included), and each engine start (its process's import taken out). With
    ``fingerprints`` (cell id -> Cell.fingerprint) only cells measured exactly as planned count
    (the same id in another matrix is another measurement), and a group's start only when one
    of its cells matched or, with none of its cells in the JSON, when the start was of the same
    backend and model (``group_keys``: group id -> (backend, model path))."""
    matched: set[str] = set()
    seen: set[str] = set()  # groups with a cell in the JSON, matched or not
    for b in doc.get("benchmarks", []):
        cp = cells.get(b.get("param"))
        if cp is None:
            continue
        seen.add(cp.group)
        fp = (b.get("extra_info") or {}).get("cell_fingerprint")
        if fingerprints is not None and fp is not None and fp != fingerprints.get(b["param"]):
            continue  # (an older JSON without fingerprints is taken by id)
        matched.add(cp.group)
        data = (b.get("stats") or {}).get("data") or []
        warm_rates = (b.get("extra_info") or {}).get("warmup_tokens_per_s")
        warm = (
            len(warm_rates)
            if isinstance(warm_rates, list)
            else (b.get("options") or {}).get("warmup", 0) or 0
        )
        if data:
            gp = groups.get(cp.group) if groups else None
            over = eta.round_overhead_s(gp.backend) if gp is not None else 0.0
            cp.eta_s = (sum(data) / len(data) + over) * (len(data) + warm)
            cp.round_s, cp.eta_from = sum(data) / len(data), "measured"
    for ev in ((doc.get("specbench") or {}).get("engine_groups") or []) if groups else []:
        gp = groups.get(ev.get("group")) if groups else None
        if gp is None or not ev.get("ok") or not isinstance(ev.get("start_s"), (int, float)):
            continue
        if fingerprints is not None and gp.group not in matched:
            if gp.group in seen or not _same_engine(ev, (group_keys or {}).get(gp.group)):
                continue
        imported = float((ev.get("info") or {}).get("import_s") or 0.0)
        start = float(ev["start_s"]) - imported
        if imported > 1.0:  # the first start of its process: its cold caches are in first_start_extra_s
            start -= eta.COLD_KERNELS_S + eta.FIRST_WARMUP_S - eta.WARMUP_REQUEST_S
            gp.first_start_extra_s = imported + eta.COLD_KERNELS_S + eta.FIRST_WARMUP_S - eta.WARMUP_REQUEST_S
        floor = 0.0 if gp.backend == "hf" or gp.backend in ENDPOINT_BACKENDS else eta.ENGINE_BASE_S
        gp.start_s, gp.start_from = max(start, floor), "measured"
