"""scripts/mutants.py's table still points at the code: each mutant's line is found exactly once
in its file (a rule rewritten without its mutant leaves a mutant that tests nothing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mutants():
    spec = importlib.util.spec_from_file_location("specbench_mutants", ROOT / "scripts" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # its dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod.MUTANTS


def test_every_mutant_finds_its_line_exactly_once() -> None:
    lost = []
    for m in _mutants():
        text = (ROOT / m.file).read_text()
        hits = sum(1 for line in text.splitlines() if m.old in line)
        if hits != 1:
            lost.append(f"{m.name}: {m.old!r} on {hits} lines of {m.file}")
        for t in m.tests:
            if not (ROOT / t.split("::")[0]).exists():
                lost.append(f"{m.name}: no {t}")
    assert not lost, "\n".join(lost)
