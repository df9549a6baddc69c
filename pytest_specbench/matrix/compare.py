"""The matrix's top-level ``compare`` key: pairs of methods compared with each other at every shape
both ran (report/versus.py prints them), e.g. ``compare: [[ddtree, dflash]]``. A name is a method
of ``methods:``; a swept method's YAML name means its best setting at each shape, one setting's
name (``ddtree-b8``) that setting. No pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .checks import Ctx


def parse_compare(cx: Ctx, raw: Any, names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``compare:`` as (method, method) pairs, each an error naming the entry and what is valid:
    a list of two-name lists, names defined under ``methods:`` (``names``: the YAML names and
    every swept setting's), two different names, no pair twice."""
    if raw is None:
        return ()
    known = list(dict.fromkeys(names))
    shape = "a list of [method, method] pairs, e.g. compare: [[ddtree, dflash]]"
    if not isinstance(raw, list):
        raise cx.err("compare", f"expected {shape}; got {raw!r}")
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(raw):
        key = f"compare[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise cx.err(key, f"expected two method names, e.g. [ddtree, dflash]; got {pair!r}")
        a, b = (cx.string(v, f"{key}[{j}]") for j, v in enumerate(pair))
        for j, n in enumerate((a, b)):
            if n not in known:
                defined = ", ".join(known)
                raise cx.err(f"{key}[{j}]", f"{n!r} is not defined under methods:; defined: {defined}")
        if a == b:
            raise cx.err(key, f"compares {a!r} with itself; name two different methods")
        if (a, b) in out or (b, a) in out:
            raise cx.err(key, f"[{a}, {b}] is given twice; each pair once")
        out.append((a, b))
    return tuple(out)
