"""docs/options.md lists every command-line option the plugin registers, each once, and its ini key
column names ini keys only (the plugin's, or a named plugin's own option)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pytest_specbench.plugin.options import pytest_addoption

DOC = Path(__file__).parent.parent / "docs" / "options.md"


class FakeParser:
    def __init__(self) -> None:
        self.options: list[str] = []
        self.ini: list[str] = []

    def getgroup(self, *args: Any, **kwargs: Any) -> FakeParser:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options += names

    def addini(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.ini.append(name)


def _rows() -> list[tuple[list[str], str]]:
    """(the options named in the first column, the ini key column) of each table row."""
    out = []
    for line in DOC.read_text().splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `--"):
            out.append((re.findall(r"`(--[a-z-]+)", cols[0]), cols[1].strip("`")))
    return out


def test_every_plugin_option_is_in_the_options_page_once() -> None:
    p = FakeParser()
    pytest_addoption(p)  # type: ignore[arg-type]
    documented = [o for names, _ in _rows() for o in names]
    mine = sorted(o for o in p.options if o.startswith("--specbench-"))
    assert len(mine) == 28
    assert sorted(o for o in documented if o.startswith("--specbench-")) == mine
    # the ini key column: the plugin's own ini keys, or another plugin's option's (pytest-timeout)
    keys = {ini for _, ini in _rows() if ini}
    assert keys <= set(p.ini) | {"timeout"}, keys
