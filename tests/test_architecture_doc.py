"""docs/architecture.md names every module's room, truthfully: its "Floor plan" block lists every
module of every subpackage under that subpackage (``__init__.py`` files are the subpackages
themselves and need not be listed; ``__main__.py`` must be), lists the subpackages in the layer
order of tests/test_imports.py, and every module path the document names anywhere
(``report/summary.py``, ``pytest_specbench/report/summary.py``) exists."""

from __future__ import annotations

import re
from pathlib import Path

from test_imports import LAYERS

ROOT = Path(__file__).parents[1]
PKG = ROOT / "pytest_specbench"
DOC = ROOT / "docs" / "architecture.md"

# a module path relative to pytest_specbench/ (or under it), in one of the ten subpackages
PATH = re.compile(r"(?<![\w./-])(?:pytest_specbench/)?(" + "|".join(LAYERS) + r")/([a-z0-9_]+\.py)\b")
# a module's bare file name in the floor plan, listed under the subpackage whose line it is on
BARE = re.compile(r"(?<![\w./-])([a-z0-9_]+\.py)\b")
SECTION = re.compile(r"^  ([a-z]+)/ ")


def modules() -> set[str]:
    """Every module as ``subpkg/module.py``, ``__init__.py`` left out."""
    return {p.relative_to(PKG).as_posix() for p in PKG.glob("*/*.py") if p.name != "__init__.py"}


def floor_plan(text: str) -> list[tuple[str, str]]:
    """(subpackage, module file) for each module the "Floor plan" block lists under a
    subpackage, in order; a full path (``deciding/stopping.py``) names that module wherever it
    stands, a bare name (``stopping.py``) the one of the subpackage whose entry it is in."""
    block = text.split("## Floor plan", 1)[1].split("```", 2)[1]
    out: list[tuple[str, str]] = []
    section = None
    for line in block.splitlines():
        m = SECTION.match(line)
        if m:
            section = m.group(1)
            line = line[m.end() :]
        for sub, name in PATH.findall(line):
            out.append((sub, name))
        rest = PATH.sub(" ", line)
        for name in BARE.findall(rest):
            assert section is not None, f"{name} is listed before any subpackage of the floor plan"
            out.append((section, name))
    return out


def test_the_floor_plan_lists_the_subpackages_in_layer_order() -> None:
    text = DOC.read_text()
    block = text.split("## Floor plan", 1)[1].split("```", 2)[1]
    listed = [m.group(1) for m in map(SECTION.match, block.splitlines()) if m]
    assert listed == list(LAYERS)
    assert sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").exists()) == sorted(LAYERS)


def test_every_module_is_listed_under_its_subpackage() -> None:
    listed = {f"{sub}/{name}" for sub, name in floor_plan(DOC.read_text())}
    missing = sorted(modules() - listed)
    assert not missing, f"docs/architecture.md's floor plan does not list {missing}"


def test_every_module_path_the_doc_names_exists() -> None:
    text = DOC.read_text()
    named = {f"{sub}/{name}" for sub, name in PATH.findall(text)}
    named |= {f"{sub}/{name}" for sub, name in floor_plan(text)}
    gone = sorted(p for p in named if not (PKG / p).exists())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
