"""The package's layers (pytest_specbench/__init__.py, docs/architecture.md): a subpackage imports
only from itself and the subpackages below it, never from one above; only the pytest side
imports pytest; nothing imports in a cycle. Imports under ``if TYPE_CHECKING:`` are types for
annotations, never executed, and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).parents[1] / "pytest_specbench"

# lowest first: each may import the ones before it. stats/ is the floor every measuring layer reads;
# report/ sits above what runs (it reads a results JSON only, and nothing that runs imports it)
LAYERS = (
    "inputs",
    "stats",
    "matrix",
    "planning",
    "gpus",
    "engines",
    "deciding",
    "workloads",
    "report",
    "plugin",
)
PYTEST_SIDE = "plugin"
# pytest_benchmark.stats (round statistics in its JSON format) imports no pytest
PYTEST_MODULES = ("pytest", "_pytest", "xdist", "pytest_timeout", "pluggy")


def _module(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.body:
                out.update(id(n) for n in ast.walk(child))
    return out


def imports_of(path: Path, modules: set[str], root: Path = PKG) -> tuple[set[str], set[str]]:
    """(the package modules, the top-level outside names) that ``path`` imports when it runs."""
    name = _module(path, root)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    inside: set[str] = set()
    outside: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                inside.add(full if full in modules else base)
            if not node.level:
                outside.add(base.split(".")[0])
        elif isinstance(node, ast.Import):
            for a in node.names:
                inside.add(a.name)
                outside.add(a.name.split(".")[0])
    return {d for d in inside if d in modules and d != name}, outside - {"pytest_specbench"}


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in PKG.rglob("*.py")}
    return {m: imports_of(p, set(paths))[0] for m, p in paths.items()}


def layer(module: str) -> str:
    """The subpackage a module belongs to ('' for the package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_subpackage_is_a_layer_and_says_what_it_owns() -> None:
    subpackages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert subpackages == set(LAYERS)
    assert not [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"], "modules belong in a subpackage"
    for sub in LAYERS:
        doc = ast.get_docstring(ast.parse((PKG / sub / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"{sub}/__init__.py: a docstring saying what it owns and may import"
        )


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports that go from a layer to a higher one (the package's __init__ may import nothing)."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = []
    for mod, deps in sorted(graph.items()):
        here = layer(mod)
        for d in sorted(deps):
            there = layer(d)
            if not here or (there and rank[there] > rank[here]):
                wrong.append(f"{mod} ({here or 'the package'}) imports {d} ({there}, a higher layer)")
    return wrong


def test_layers_import_downwards_only() -> None:
    wrong = upward(_graph())
    assert not wrong, "\n".join(wrong)


def test_only_the_pytest_side_imports_pytest() -> None:
    modules = {_module(p) for p in PKG.rglob("*.py")}
    for p in sorted(PKG.rglob("*.py")):
        if layer(_module(p)) == PYTEST_SIDE:
            continue
        outside = imports_of(p, modules)[1]
        assert not outside & set(PYTEST_MODULES), (str(p.relative_to(PKG)), outside & set(PYTEST_MODULES))


def test_no_import_cycle_inside_the_package() -> None:
    graph = _graph()
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


def mutual_imports(root: Path = PKG) -> list[str]:
    """Pairs of modules that import each other, counting imports for types only (under
    ``if TYPE_CHECKING:``) too: two modules that need each other are one concern split in two."""
    paths = {_module(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for m, p in paths.items():
        tree = ast.parse(p.read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
                deps |= {base} | {f"{base}.{a.name}" for a in node.names}
        graph[m] = deps & set(paths)
    return [f"{a} <-> {b}" for a in sorted(graph) for b in sorted(graph[a]) if a < b and a in graph[b]]


def test_no_two_modules_import_each_other_even_for_types(tmp_path: Path) -> None:
    assert not mutual_imports(), mutual_imports()
    root = tmp_path / "pytest_specbench"  # the check itself: a planted type-only back import is found
    for p in PKG.rglob("*.py"):
        (root / p.relative_to(PKG)).parent.mkdir(parents=True, exist_ok=True)
        (root / p.relative_to(PKG)).write_text(p.read_text())
    prev = root / "planning" / "previous.py"
    prev.write_text(prev.read_text() + "\nif TYPE_CHECKING:\n    from .plan import Plan\n")
    assert mutual_imports(root) == ["pytest_specbench.planning.plan <-> pytest_specbench.planning.previous"]


@pytest.mark.parametrize(
    "lower, planted",
    [
        ("stats/metrics.py", "from ..engines.base import RequestRecord"),
        ("matrix/cells.py", "from ..planning import plan"),
        ("engines/hf.py", "from ..plugin.state import get_state"),
        ("planning/eta.py", "import pytest_specbench.workloads.kinds"),
        ("gpus/leases.py", "if not TYPE_CHECKING:\n        from ..engines import base"),
    ],
)
def test_the_layer_check_catches_an_upward_import(tmp_path: Path, lower: str, planted: str) -> None:
    """The check itself: the package with one upward import planted in a module (inside a
    function, as the lazy imports are) is reported."""
    root = tmp_path / "pytest_specbench"
    for p in PKG.rglob("*.py"):
        (root / p.relative_to(PKG)).parent.mkdir(parents=True, exist_ok=True)
        (root / p.relative_to(PKG)).write_text(p.read_text())
    target = root / lower
    target.write_text(target.read_text() + f"\n\ndef _planted():\n    {planted}\n")
    paths = {_module(p, root): p for p in root.rglob("*.py")}
    graph = {m: imports_of(p, set(paths), root)[0] for m, p in paths.items()}
    wrong = upward(graph)
    assert len(wrong) == len(upward(_graph())) + 1
    assert any(w.startswith(_module(target, root)) for w in wrong), wrong
