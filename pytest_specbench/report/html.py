"""``python -m pytest_specbench.report RUN.json --html FILE``: one self-contained HTML page (no
file beside it): what was measured where (provenance), the Markdown report (table, decision view,
crossover, tuning, warnings, failed cells) rendered, and every plot embedded as a data URI. A script
at the end records how many images the browser loaded (``data-images-loaded`` on ``<body>``)."""

from __future__ import annotations

import base64
import html
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import mdtext

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
td.n, th.n { text-align: right; }
code { background: #f4f4f4; padding: 0 3px; }
figure { margin: 1.5em 0; } img { max-width: 100%; border: 1px solid #eee; }
.prov td { text-align: left; }
"""


def _inline(text: str) -> str:
    out = mdtext.unescape_html(html.escape(text))
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def markdown_to_html(lines: list[str]) -> str:
    """The report's Markdown subset: tables, "- " lists, paragraphs."""
    out: list[str] = []
    table: list[list[str]] = []
    items: list[str] = []
    para: list[str] = []

    def numeric(col: int) -> bool:  # a column of numbers (or "-") is right-aligned
        vals = [r[col] for r in table[1:] if col < len(r) and r[col] not in ("-", "")]
        return bool(vals) and all(re.fullmatch(r"[-+x]?[\d.,]+%?", v) for v in vals)

    def flush() -> None:
        if table:
            head, *body = table
            cls = [' class="n"' if numeric(i) else "" for i in range(len(head))]

            def tr(row: list[str], tag: str) -> str:
                return (
                    "<tr>"
                    + "".join(f"<{tag}{k}>{_inline(c)}</{tag}>" for c, k in zip(row, cls, strict=False))
                    + "</tr>"
                )

            out.append("<table>" + tr(head, "th"))
            out.extend(tr(row, "td") for row in body)
            out.append("</table>")
            table.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if para:  # an indented line of the Markdown starts a new line of its paragraph
            out.append("<p>" + " ".join(_inline(t) if t != "\n" else "<br>" for t in para) + "</p>")
            para.clear()

    for line in lines:
        s = line.strip()
        if s.startswith("|"):
            cells = mdtext.split_row(s)
            if not all(set(c) <= set("-: ") for c in cells):  # not the |---| separator
                table.append(cells)
            continue
        if s.startswith("- "):
            if para:
                flush()
            items.append(s[2:])
            continue
        if s and not table and not items:  # consecutive text lines are one paragraph
            para += ["\n", s] if para and line.startswith(" ") else [s]
            continue
        flush()
        if s:
            para.append(s)
    flush()
    return "\n".join(out)


def _provenance(doc: dict[str, Any]) -> str:
    mi = doc.get("machine_info") or {}
    sb = mi.get("specbench") or {}
    ci = doc.get("commit_info") or {}
    spec = doc.get("specbench") or {}
    gpus = ", ".join(g.get("name", "?") for g in sb.get("gpus") or []) or "none"
    versions = ", ".join(f"{k} {v}" for k, v in (sb.get("versions") or {}).items() if v)
    rows = [
        ("matrix", spec.get("matrix")),
        ("when", doc.get("datetime")),
        ("host", mi.get("node")),
        ("CPU", (mi.get("cpu") or {}).get("brand_raw")),
        ("GPUs", gpus),
        ("driver", sb.get("driver")),
        ("versions", versions),
        ("commit", f"{ci.get('id', '?')}{' (dirty)' if ci.get('dirty') else ''}"),
        ("engine starts", spec.get("engine_starts")),
        ("interrupted", (spec.get("interrupted") or {}).get("why")),
        (
            "shards merged",
            ", ".join(f"{s.get('shard')} on {s.get('host')}" for s in spec.get("shards") or []),
        ),
    ]
    body = "".join(f"<tr><td>{k}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows if v)
    return f'<table class="prov">{body}</table>'


def render(
    doc: dict[str, Any], markdown: list[str], pngs: list[Path], not_made: Sequence[tuple[str, str]] = ()
) -> str:
    """The page: ``markdown`` (the report's lines, summary.markdown) and the ``pngs`` embedded,
    then the plots not made and why (``not_made``)."""
    figures = []
    for p in pngs:
        data = base64.b64encode(p.read_bytes()).decode()
        figures.append(
            f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(p.stem)} (its data: {html.escape(p.stem)}.csv beside the PNGs "
            "of --plots)</figcaption></figure>"
        )
    matrix = (doc.get("specbench") or {}).get("matrix")  # its file name: a machine's path says nothing
    title = f"pytest-specbench: {Path(str(matrix)).name if matrix else 'run'}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<h2>Where and what</h2>
{_provenance(doc)}
<h2>Cells, decision view, warnings</h2>
{markdown_to_html(markdown)}
<h2>Plots</h2>
{"".join(figures) or "<p>no plots (matplotlib missing, or nothing to draw)</p>"}
{_not_made(not_made)}
<script>
window.addEventListener("load", () => {{
  const imgs = Array.from(document.images);
  const ok = imgs.filter((i) => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.imagesLoaded = ok + "/" + imgs.length;
}});
</script>
</body></html>
"""


def _not_made(not_made: Sequence[tuple[str, str]]) -> str:
    if not not_made:
        return ""
    items = "".join(
        f"<li><code>{html.escape(name)}</code>: {html.escape(why)}</li>" for name, why in not_made
    )
    return f"<h3>Plots not made</h3><ul>{items}</ul>"


def write_html(
    doc: dict[str, Any],
    path: Path,
    markdown: list[str],
    plots: Callable[[dict[str, Any], Path, list[tuple[str, str]]], list[Any]],
) -> Path:
    """Draw the plots (``plots``: summary.write_plots) in a scratch directory and write the page
    with them embedded, and the plots not made with the reason."""
    not_made: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        pngs = plots(doc, Path(tmp), not_made)
        text = render(doc, markdown, [Path(p) for p in pngs if Path(p).suffix == ".png"], not_made)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
