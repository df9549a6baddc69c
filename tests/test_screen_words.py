"""The screen's words: a shape label is not cut mid-word where the screen has room for it (a
wrapped list counts each line's closing comma, a clipped line ends after a word), and counts take
the noun's number ("1 shape", "2 shapes") where report/ and plugin/ say how many shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specbench.report import drift, merge, pooled, screen
from pytest_specbench.report.screen_text import WIDTH, clip, wrap

ROOT = Path(__file__).parent.parent
BUSY = ROOT / "docs" / "results" / "cpu-default-tour" / "fresh-busy.json"  # the default job at load


def test_the_default_jobs_shape_labels_are_whole_on_its_screen() -> None:
    """Its withheld shapes fill the first line to exactly 160 characters with the comma before the
    next one: the comma went over the width and the line was clipped to "summarizat..."."""
    lines = screen.lines(json.loads(BUSY.read_text()), BUSY.name)
    assert all(len(ln) <= WIDTH for ln in lines)
    assert not [ln for ln in lines if ln.endswith("...")], lines
    text = "\n".join(lines)
    assert "category=chat/code/summarization," in text
    assert "trace tp1 c8 out12 request_rate=3.828 speed=1.0 trace=chat-small.jsonl" in text


def test_a_wrapped_list_counts_its_commas_and_never_cuts_an_item() -> None:
    head = "  h: "
    items = ["a" * 10, "b" * 10, "c" * 10]
    # "  h: aaaaaaaaaa, bbbbbbbbbb" is 27 characters: it fits 27, not with its closing comma
    assert wrap(head, items, width=27) == ["  h: aaaaaaaaaa,", "    bbbbbbbbbb, cccccccccc"]
    assert wrap(head, items, width=28) == ["  h: aaaaaaaaaa, bbbbbbbbbb,", "    cccccccccc"]
    many = [f"item{i:02d}" for i in range(50)]
    got = wrap("  50 shapes: ", many, width=40, max_lines=2)
    assert got == ["  50 shapes: item00, item01, item02,", "    item03, item04, ... and 45 more"]
    shown = [w for ln in got for w in re.findall(r"item\d\d", ln)]
    assert shown == many[:5]  # the count is of the items not shown, each shown whole


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (100, "withheld, 7 shapes: agentic tp1 c1 out32 scenario=calculator, categories tp1 c4 out32..."),
        (
            110,
            "withheld, 7 shapes: agentic tp1 c1 out32 scenario=calculator, categories tp1 c4 out32 "
            "category=chat/code...",
        ),
        (30, "withheld, 7 shapes: agentic..."),
    ],
)
def test_a_clipped_line_ends_after_a_word(width: int, expected: str) -> None:
    line = (
        "withheld, 7 shapes: agentic tp1 c1 out32 scenario=calculator, categories tp1 c4 out32 "
        "category=chat/code/summarization"
    )
    assert clip(line, width) == expected and len(expected) <= width


def test_a_word_longer_than_half_the_line_is_cut_where_it_must_be() -> None:
    assert clip("x " + "y" * 50, 20) == "x " + "y" * 15 + "..."


def test_counts_take_the_nouns_number() -> None:
    f = {"a": "ngram", "b": "draft", "shapes": 0, "withheld": 1}
    assert pooled.line(f) == "ngram vs draft: no pooled figure: 1 shape without a verdict"
    assert pooled.line({**f, "withheld": 2}) == "ngram vs draft: no pooled figure: 2 shapes without a verdict"
    rec = {
        "family": "ar-tp1",
        "groups": ["ar-tp1", "m-tp1"],
        "sentinel_cell": "ar-tp1-c1-sentinel",
        "drift": -0.1,
        "sentinel": 90.0,
        "baseline": 100.0,
        "rounds": 3,
        "sentinel_rounds": 1,
        "metric": "output tok/s",
        "withheld": ["m-tp1-c1"],
    }
    (said,) = drift.lines({"specbench": {"drift": [rec]}})
    assert "over 1 round against" in said and "1 verdict withheld (m-tp1-c1)" in said
    assert merge.missing_line([{"cell": "x", "shard": "1/2"}]) == "1 cell missing: x"


def test_no_shape_count_is_written_shape_s_or_without_its_number() -> None:
    """No "shape(s)", and no "{n} shapes" in an f-string of report/ and plugin/: counts of shapes
    go through screen_text.counted."""
    found = []
    for sub in ("report", "plugin"):
        for path in sorted((ROOT / "pytest_specbench" / sub).glob("*.py")):
            for n, ln in enumerate(path.read_text().splitlines(), 1):
                if "shape(s)" in ln or re.search(r"\}\s*shapes\b", ln):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {ln.strip()}")
    assert not found, found
