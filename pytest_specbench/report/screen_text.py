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
    """``line`` on one line of at most ``width`` characters ("..." where it was cut): cut after
    a word (at a space, or after a "/" or ","), mid-word only where the last word boundary would
    lose more than half the line."""
    text = str(line)
    indent = text[: len(text) - len(text.lstrip(" "))]
    line = indent + " ".join(text.split())
    if len(line) <= width:
        return line
    head = line[: width - 3]
    cut = max(head.rfind(" "), head.rfind("/") + 1, head.rfind(",") + 1)
    if len(line) > width - 3 and line[width - 3] in " /,":  # the cut falls on a boundary
        cut = width - 3
    return (head[:cut] if cut > width // 2 else head).rstrip(" ,/") + "..."


def wrap(
    head: str, items: Iterable[str], width: int = WIDTH, indent: str = "    ", max_lines: int = MAX_WRAPPED
) -> list[str]:
    """``head`` then ``items`` joined by ", ", continued on indented lines of at most ``width``
    (each line's closing "," counted), never an item cut; past ``max_lines`` lines the last one
    ends with the items that fit beside "... and 12 more", which counts the rest."""
    items = list(items)
    rows: list[list[str]] = [[]]
    for i, item in enumerate(items):
        row = rows[-1]
        text = (head if len(rows) == 1 else indent) + ", ".join([*row, item])
        if len(text) + (1 if i + 1 < len(items) else 0) > width and (
            row or (len(rows) == 1 and head.strip())
        ):
            rows.append([item])
        else:
            row.append(item)
    rest = 0
    if len(rows) > max_lines:
        rows = rows[: max_lines - 1]
        left = items[sum(len(r) for r in rows) :]
        start = head if not rows else indent
        last: list[str] = []
        for k, item in enumerate(left):
            more = f", ... and {len(left) - k - 1} more" if k + 1 < len(left) else ""
            if len(start + ", ".join([*last, item]) + more) > width:
                break
            last.append(item)
        rows.append(last)
        rest = len(left) - len(last)
    out = []
    for j, row in enumerate(rows):
        text = (head if j == 0 else indent) + ", ".join(row)
        if j + 1 < len(rows):
            text += "," if row and rows[j + 1] else ""
        elif rest:
            text += (", " if row else "") + f"... and {rest} more"
        out.append(text)
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
