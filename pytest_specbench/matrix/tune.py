"""A swept method's ``tune`` key: the cells its settings are decided on (``at``) and how many
settings run elsewhere (``keep``). Parsed here; the plugin (deciding/tune.py) decides under
``--specbench-race``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checks import Ctx

# the cell params ``at`` may name (Cell.params keys)
AXES = (
    "method",
    "tp",
    "workload",
    "concurrency",
    "context_tokens",
    "output_tokens",
    "request_rate",
    "temperature",
    "scenario",
    "category",
    "speed",
    "enable_thinking",
)


@dataclass(frozen=True)
class Tune:
    at: tuple[tuple[str, tuple[str, ...]], ...]  # axis -> the values (as text) deciding cells have
    keep: int

    def matches(self, params: Mapping[str, Any]) -> bool:
        """Whether a cell with these params is one the sweep is decided on."""
        return all(str(params.get(k)) in vs for k, vs in self.at)

    @property
    def label(self) -> str:
        """``tp=1, concurrency=1/4``: where the sweep is decided."""
        return ", ".join(f"{k}={'/'.join(vs)}" for k, vs in self.at)


def parse_tune(cx: Ctx, key: str, raw: Any, swept: bool, forced: bool) -> Tune | None:
    """``methods.NAME.tune``: {at: {AXIS: VALUE or [VALUES], ...}, keep: K}."""
    if raw is None:
        return None
    where = f"{key}.tune"
    if not swept:
        raise cx.err(where, "tunes a sweep: give a list-valued knob (e.g. num_draft_tokens: [2, 4, 8])")
    if forced:
        raise cx.err(
            where,
            "a forced accept length is a cost curve, not settings to choose from (forced cells never "
            "race); remove tune or the simulate_accept_length list",
        )
    d = cx.mapping(raw, where, ("at", "keep"), required=("at", "keep"))
    at = d["at"]
    if not isinstance(at, dict) or not at:
        raise cx.err(f"{where}.at", f"expected a mapping of axis -> value(s) ({', '.join(AXES)}); got {at!r}")
    pairs = []
    for k, v in at.items():
        if k not in AXES:
            raise cx.err(f"{where}.at.{k}", f"not an axis; axes: {', '.join(AXES)}")
        vals = v if isinstance(v, list) else [v]
        if not vals:
            raise cx.err(f"{where}.at.{k}", "an empty list: give the value(s) the sweep is decided at")
        pairs.append((str(k), tuple(str(x) for x in vals)))
    keep = d["keep"]
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise cx.err(f"{where}.keep", f"expected a whole number >= 1 (settings kept); got {keep!r}")
    return Tune(tuple(pairs), keep)


def check_matches(cx: Ctx, cells: list[Any]) -> None:
    """Every tuned sweep has a cell its ``at`` matches (else nothing would decide it, and the
    plan would promise a saving it cannot make)."""
    sweeps: dict[str, Any] = {}
    for c in cells:
        t = getattr(c.method, "tune", None)
        if t is not None:
            sweeps.setdefault(c.method.sweep, (t, []))[1].append(c)
    for name, (t, mine) in sweeps.items():
        if not any(t.matches(c.params()) for c in mine):
            have = {k: sorted({str(c.params().get(k)) for c in mine}) for k, _ in t.at}
            said = "; ".join(f"{k}: {', '.join(v)}" for k, v in have.items())
            raise cx.err(
                f"methods.{name}.tune.at", f"{t.label} matches none of its cells (its cells have {said})"
            )
