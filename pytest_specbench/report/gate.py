"""The regression gate: ``python -m pytest_specbench.report OLD.json NEW.json --max-tok-s-drop F
--max-accept-drop F`` exits 1 when a cell of OLD got worse in NEW beyond the allowed fraction
(higher is better for both, which ``pytest-benchmark compare --benchmark-compare-fail`` cannot
gate: it fails only when a time goes up), when it failed in NEW, or when NEW does not hold it (a
shard lost, another ``-k``): a gate never passes on cells it did not see. Pure: no pytest.
"""

from __future__ import annotations

from typing import Any


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["param"]: b["extra_info"] for b in doc.get("benchmarks", [])}


def failure_headline(f: dict[str, Any]) -> str:
    """One line for a failed cell: the exception's first line, plus the engine log's own reason."""
    err = (f.get("error") or "").splitlines()
    if not err:
        return f["reason"].splitlines()[-1] if f.get("reason") else ""
    says = next((ln for ln in err if ln.startswith("engine log says: ")), None)
    return f"{err[0]}; {says}" if says else err[0]


def _work(doc: dict[str, Any]) -> dict[str, tuple[float, float] | None]:
    """Per cell, what one timed round measured: (requests per round, prompt tokens per request).
    Two runs' cells compare only when these agree (the number of rounds may differ)."""
    out: dict[str, tuple[float, float] | None] = {}
    for b in doc.get("benchmarks", []):
        e, rounds = b["extra_info"], len((b.get("stats") or {}).get("data") or [])
        n, p = e.get("requests"), e.get("prompt_tokens")
        out[b["param"]] = (round(n / rounds, 3), round(p / n, 3)) if n and p and rounds else None
    return out


def redefined(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """Cells in both runs whose rounds measured different work, with what differs."""
    wa, wb = _work(old), _work(new)
    out = {}
    for cell in (c for c in wa if c in wb):
        a, b = wa[cell], wb[cell]
        if a and b and a != b:
            names = ("requests per round", "prompt tokens per request")
            out[cell] = ", ".join(
                f"{n} {x:g} -> {y:g}" for n, x, y in zip(names, a, b, strict=True) if x != y
            )
    return out


def regressions(
    old: dict[str, Any],
    new: dict[str, Any],
    max_tok_s_drop: float | None = None,
    max_accept_drop: float | None = None,
) -> list[str]:
    """One line per cell of OLD that fails the gate in NEW."""
    if max_tok_s_drop is None and max_accept_drop is None:
        return []
    a, b = _rows(old), _rows(new)
    spec = new.get("specbench") or {}
    failed = {f["cell"]: f for f in spec.get("failed_cells") or [] if isinstance(f, dict) and f.get("cell")}
    missing = {m["cell"]: m for m in spec.get("missing_cells") or [] if isinstance(m, dict) and m.get("cell")}
    changed = redefined(old, new)
    out = []
    for cell, ea in a.items():
        if cell in failed:
            out.append(
                f"{cell}: measured in the old run, failed in the new one: {failure_headline(failed[cell])}"
            )
            continue
        if cell not in b:
            why = f" ({missing[cell]['why']})" if cell in missing else ""
            out.append(f"{cell}: measured in the old run, absent from the new one{why}")
            continue
        if cell in changed:
            continue
        eb = b[cell]
        for key, label, limit in (
            ("output_tokens_per_s", "tok/s", max_tok_s_drop),
            ("accept_length", "accept length", max_accept_drop),
        ):
            va, vb = ea.get(key), eb.get(key)
            if limit is None or not va or vb is None:
                continue
            if vb < va * (1 - limit):
                out.append(
                    f"{cell}: {label} {va:.3f} -> {vb:.3f} (new/old {vb / va:.3f}, "
                    f"allowed down to {1 - limit:.3f})"
                )
    return out
