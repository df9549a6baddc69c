"""The package's imports go one way: no cycles, and the JSON-reading side (report, decide, paired,
metrics) needs neither pytest nor the plugin's state."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).parents[1] / "pytest_specbench"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports (at module level or inside functions)."""
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    deps.add(full if full in mods else base)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        out[name] = {d for d in deps if d in mods and d != name}
    return out


def test_no_import_cycle_inside_the_package() -> None:
    graph = _imports()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_the_json_side_needs_no_pytest_and_no_plugin_state() -> None:
    graph = _imports()
    for name in ("report", "decide", "paired", "metrics"):
        mod = f"pytest_specbench.{name}"
        seen, todo = set(), [mod]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph[m]
        assert not seen & {"pytest_specbench.plugin", "pytest_specbench.state", "pytest_specbench.results"}, (
            name
        )
        for m in seen:
            src = (
                (PKG.parent / (m.replace(".", "/") + ".py")).read_text() if not m.endswith("engines") else ""
            )
            assert "import pytest\n" not in src and "from pytest " not in src, (name, m)
