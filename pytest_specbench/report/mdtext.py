"""Markdown escaping for the report: the strings a results JSON carries (method, workload and
cell names, failure reasons, process names, engine settings) land in Markdown tables and lists,
where a ``|`` would end a table cell, a backtick open a code span, ``<`` start an HTML tag and a
line break end a table row. ``safe_doc`` escapes every string of a document before the report
renders it; ``one_line`` joins what a string's own line breaks split. ``split_row`` and
``unescape_html`` read the escapes back (the HTML report). Pure: no pytest."""

from __future__ import annotations

import re
from typing import Any

ESCAPED = "`|<"  # each written as \X; a backslash itself as \\


def text(s: str) -> str:
    """``s`` with its backslashes, backticks, pipes and ``<`` backslash-escaped (CommonMark
    renders each as the character itself, inside a table too)."""
    s = s.replace("\\", "\\\\")
    for ch in ESCAPED:
        s = s.replace(ch, "\\" + ch)
    return s


def safe_doc(value: Any) -> Any:
    """``value`` with every string in it escaped (dict keys too, so lookups by a name still
    agree); numbers, booleans and None as they are."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {safe_doc(k): safe_doc(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(safe_doc(v) for v in value)
    return value


def one_line(lines: list[str]) -> list[str]:
    """Each entry as one Markdown line: a line break inside an entry (one a string of the
    document brought) becomes a space."""
    return [re.sub(r"\r\n?|\n", " ", ln) for ln in lines]


def split_row(row: str) -> list[str]:
    """The cells of a Markdown table row, split at the pipes that are not escaped."""
    cells, cur, i = [], "", 0
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            cur += body[i : i + 2]
            i += 2
            continue
        if ch == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    if cur.strip():
        cells.append(cur.strip())
    return cells


_ENTITY = {"\\": "&#92;", "`": "&#96;", "|": "&#124;", "&lt;": "&lt;"}


def unescape_html(escaped_html: str) -> str:
    """HTML (already through html.escape) with the Markdown escapes of ``text`` turned into the
    characters' entities: shown as themselves, never read as code spans or emphasis."""
    return re.sub(r"\\(\\|`|\||&lt;)", lambda m: _ENTITY[m.group(1)], escaped_html)
