"""The screen's text rules: its width and line budget, a line clipped or a list wrapped to fit,
a verdict said short. Shared by screen.py and withheld.py. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

WIDTH = 160  # no line of the screen is longer
SCREEN_LINES = 42  # the decided shapes get what the other sections leave of this
MIN_SHAPE_LINES = 6  # ... and at least this many (header included)
MAX_WRAPPED = 3  # lines of one grouped list (shapes, cells) before "... and N more"
MAX_VIEW_LINES = 4  # per extra view (break-even, the matrix's compare pairs, failed cells)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 shape", "2 shapes", "0 cells": a count and its noun in the number the count takes
    (``plural`` where adding "s" is not it)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def clip(line: str, width: int = WIDTH) -> str:
    """``line`` on one line of at most ``width`` characters ("..." where it was cut)."""
    text = str(line)
    indent = text[: len(text) - len(text.lstrip(" "))]
    line = indent + " ".join(text.split())
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def wrap(
    head: str, items: Iterable[str], width: int = WIDTH, indent: str = "    ", max_lines: int = MAX_WRAPPED
) -> list[str]:
    """``head`` then ``items`` joined by ", ", continued on indented lines of at most ``width``;
    past ``max_lines`` lines the rest is counted ("... and 12 more")."""
    items = list(items)
    out, line = [], head
    for i, item in enumerate(items):
        piece = ("" if i == 0 else ", ") + item
        if len(line) + len(piece) > width and line.strip():
            if len(out) + 1 == max_lines:  # the last line: what is left, counted
                line += f", ... and {len(items) - i} more"
                if len(line) > width:
                    line = line[: width - 3] + "..."
                break
            out.append(line + ("," if i else ""))
            line, piece = indent, item
        line += piece
    out.append(line)
    return [clip(ln, width) for ln in out]


def short_verdict(v: Any) -> str:
    """A comparison's verdict without its details: "no verdict: the cell was disturbed (other
    processes ...: python (pid 1): 3 s)" -> "no verdict (disturbed)"; the details are the report's."""
    v = str(v or "")
    if v.startswith("no verdict"):
        for word, kind in (("drift", "drift"), ("saturated", "saturated"), ("disturbed", "disturbed")):
            if word in v:
                return f"no verdict ({kind})"
        return "no verdict (withheld)"
    if v.startswith("unpaired"):
        return "unpaired (different requests)"
    if v.startswith("no interval"):  # "no interval (1 round)": the count is the point
        return v
    return v.split(" (", 1)[0]


def withheld(v: Any) -> bool:
    return str(v or "").startswith(("no verdict", "unpaired"))
