"""The checks every section of the matrix file uses: :class:`MatrixError` and a context that
names the file and the key path in every message, with the allowed values. No pytest."""

from __future__ import annotations

import difflib
import math
from typing import Any

# the largest count (tokens, requests, rounds, concurrency) a matrix may ask for: a 10M-token
# prompt or 10M requests a round is beyond any engine; more is a typo that would hang prompt
# building or run for years
MAX_COUNT = 10_000_000


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message names file, key path and what is allowed."""


def did_you_mean(given: Any, known: Any) -> str:
    """`` (did you mean 'concurrency'?)`` for a near miss among ``known`` (difflib), else ''."""
    close = difflib.get_close_matches(str(given), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Ctx:
    """Carries the file name so every error can name it."""

    def __init__(self, path: str):
        self.path = path

    def err(self, key: str, msg: str) -> MatrixError:
        return MatrixError(f"{self.path}: {key}: {msg}")

    def mapping(
        self, value: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(key, f"expected a mapping with keys {', '.join(allowed)}; got {value!r}")
        for k in value:
            if k not in allowed:
                hint = did_you_mean(k, allowed)
                raise self.err(f"{key}.{k}", f"unknown key{hint}; allowed: {', '.join(allowed)}")
        for k in required:
            if k not in value:
                raise self.err(f"{key}.{k}", "required key is missing")
        return value

    def pos_int(self, value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.err(key, f"expected a positive integer; got {value!r}")
        if value > MAX_COUNT:
            raise self.err(key, f"{value:,} cannot be measured here; at most {MAX_COUNT:,}")
        return value

    def pos_number(self, value: Any, key: str, what: str, most: float) -> float:
        """A finite number > 0 and <= ``most`` (NaN, infinity and absurd values refused)."""
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise self.err(key, f"expected {what} > 0 (a finite number); got {value!r}")
        if value > most:
            raise self.err(key, f"{value:g} cannot be measured here; at most {most:g}")
        return float(value)

    def int_list(self, value: Any, key: str) -> tuple[int, ...]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.err(key, "expected a non-empty list of positive integers")
        vals = tuple(self.pos_int(v, f"{key}[{i}]") for i, v in enumerate(items))
        if len(set(vals)) != len(vals):
            raise self.err(key, f"duplicate values in {list(vals)}")
        return vals

    def choice(self, value: Any, key: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.err(key, f"{value!r} is not allowed; allowed: {', '.join(allowed)}")
        return str(value)

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(key, f"expected a non-empty string; got {value!r}")
        return value

    def name(self, value: Any, key: str) -> str:
        s = self.string(value, key)
        if not all(ch.isalnum() or ch in "._" or ch == "-" for ch in s):
            raise self.err(key, f"{s!r}: names may use letters, digits, '.', '_' and '-' only")
        return s


def without_x_keys(value: Any, _copies: dict[int, Any] | None = None) -> Any:
    """``value`` with every mapping key starting ``x-`` left out, at every level (the Compose
    convention: a home for YAML anchors, notes). No SGLang argument, variable or matrix key starts
    with ``x-``. An alias used twice is copied once; a recursive alias stays recursive."""
    copies = {} if _copies is None else _copies
    if not isinstance(value, (dict, list)):
        return value
    if id(value) in copies:
        return copies[id(value)]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        copies[id(value)] = out
        for k, v in value.items():
            if not str(k).startswith("x-"):
                out[k] = without_x_keys(v, copies)
        return out
    items: list[Any] = []
    copies[id(value)] = items
    items.extend(without_x_keys(v, copies) for v in value)
    return items
