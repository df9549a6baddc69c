"""When ``-k`` or ``-m`` leaves no cell of the matrix: what the matrix has, and which shipped
matrices have cells the same ``-k`` selects. Pure but for reading the shipped YAML files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..matrix.cells import fmt_tokens


def _keywords(cell: Any, bench_file: str) -> tuple[str, ...]:
    """The names pytest's ``-k`` matches a cell's item against (substring, case-insensitive): the
    item's name (test function and cell id), the file it is collected from and the cell's exact
    tokens (``:c1:``)."""
    return (f"test_{cell.workload.kind}[{cell.id}]", bench_file, Path(bench_file).parent.name, *cell.tokens())


def k_filter(expr: str, cells: Iterable[Any], bench_file: str = "benches/test_specbench.py") -> list[Any]:
    """The ``cells`` that ``-k expr`` selects (all for an empty expression; none where pytest's
    expression parser is not importable or the expression does not parse: pytest says so itself)."""
    cells = list(cells)
    if not expr:
        return cells
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
    except Exception:  # noqa: BLE001 - a private API: no suggestion rather than a crash
        return []

    def selects(cell: Any) -> bool:
        names = [n.lower() for n in _keywords(cell, bench_file)]
        return compiled.evaluate(lambda sub, **_: any(sub.lower() in n for n in names))

    return [c for c in cells if selects(c)]


def k_selects(expr: str, cells: Iterable[Any]) -> int:
    """How many of ``cells`` ``-k expr`` would select."""
    return len(k_filter(expr, cells)) if expr else 0


def contents(matrix: Any) -> str:
    """One line: the axes a ``-k`` can pick from, as they appear in the cell ids."""
    cells = matrix.cells()

    def uniq(xs: Iterable[Any]) -> list[Any]:
        return sorted(set(xs), key=lambda x: (str(type(x)), x))

    ctx = uniq(c.context_tokens for c in cells if c.workload.context_tokens)
    parts = [
        "methods: " + ", ".join(dict.fromkeys(c.method.name for c in cells)),
        "TP: " + ", ".join(f"tp{t}" for t in uniq(c.tp for c in cells)),
        "concurrency: " + ", ".join(f"c{n}" for n in uniq(c.concurrency for c in cells)),
        *(["contexts: " + ", ".join(f"ctx{fmt_tokens(n)}" for n in ctx)] if ctx else []),
        "outputs: " + ", ".join(f"out{n}" for n in uniq(c.output_tokens for c in cells)),
        "workloads: " + ", ".join(dict.fromkeys(c.workload.name for c in cells)),
    ]
    return "; ".join(parts)


def shipped_matches(expr: str, root: Path, current: str | None) -> list[tuple[str, int]]:
    """(matrix path relative to ``root``, cells selected) for every matrix under ``root/benches``
    that ``-k expr`` selects cells of, the current one left out; files that are not matrices are
    skipped."""
    from ..matrix import schema

    out: list[tuple[str, int]] = []
    here = Path(current).resolve() if current else None
    for p in sorted((root / "benches").rglob("*.yaml")):
        if here is not None and p.resolve() == here:
            continue
        try:
            m = schema.load(p)
        except Exception:  # noqa: BLE001 - not a matrix, or one for other backends
            continue
        n = k_selects(expr, m.cells())
        if n:
            out.append((str(p.relative_to(root)), n))
    return out


def empty_selection_lines(
    matrix: Any, keyword: str, markexpr: str, root: Path, max_listed: int = 6
) -> list[str]:
    """What to say when the selection left no cell of ``matrix``."""
    asked = " ".join(x for x in (f"-k {keyword!r}" * bool(keyword), f"-m {markexpr!r}" * bool(markexpr)) if x)
    lines = [
        f"specbench: {asked} selects none of the {len(matrix.cells())} cells of {matrix.path}",
        f"  it has: {contents(matrix)}",
    ]
    if keyword:
        found = shipped_matches(keyword, root, matrix.path)
        if found:
            lines.append(f"  shipped matrices with cells -k {keyword!r} selects (--specbench-matrix PATH):")
            lines += [f"    {p}: {n} cells" for p, n in found[:max_listed]]
            if len(found) > max_listed:
                lines.append(f"    ... and {len(found) - max_listed} more")
            lines += plan_lines(keyword, root, found[0][0])
        else:
            lines.append(f"  no shipped matrix under {root / 'benches'} has cells -k {keyword!r} selects")
    return lines


def plan_lines(keyword: str, root: Path, path: str) -> list[str]:
    """Where the first matrix ``-k`` would select from needs a backend other than the CPU one
    (sglang: its package and GPUs), how to see its cells and ETA without either."""
    from ..matrix import schema

    try:
        backends = sorted({c.method.backend for c in schema.load(root / path).cells()} - {"hf"})
    except Exception:  # noqa: BLE001 - loaded a moment ago; say nothing rather than crash
        return []
    if not backends:
        return []
    return [
        f"  running {path} needs the {', '.join(backends)} backend and its GPUs;",
        "  --specbench-plan prints its cells, memory fit and ETA without either:",
        f"    pytest benches --specbench-matrix {path} -k {keyword!r} --specbench-plan",
    ]
