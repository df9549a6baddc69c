"""python -m pytest_specbench.report: a results JSON as Markdown, and two compared cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.report import main


def _doc(cells: dict[str, tuple[float, float | None]], failed: list[dict] | None = None) -> dict:
    return {
        "benchmarks": [
            {
                "param": cid,
                "extra_info": {
                    "output_tokens_per_s": tps,
                    "accept_length": acc,
                    "speedup_vs_ar": None,
                    "latency_s_p50": 0.5,
                    "errors": 0,
                },
            }
            for cid, (tps, acc) in cells.items()
        ],
        "specbench": {"engine_starts": 2, "failed_cells": failed or []},
    }


def test_markdown_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    failed = {
        "cell": "sa-tp1-c1-out256",
        "phase": "setup",
        "error": "EngineStartError: sa-tp1: sglang.Engine failed to start: RuntimeError: died\n"
        "engine log says: AttributeError: 'NoneType' object has no attribute 'dim'\n--- tail",
        "reason": "",
    }
    old.write_text(
        json.dumps(_doc({"ar-tp1-c1-out256": (500.0, None), "ngram-tp1-c1-out256": (1000.0, 9.5)}))
    )
    new.write_text(json.dumps(_doc({"ar-tp1-c1-out256": (450.0, None)}, [failed])))
    assert main([str(new)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| cell | tok/s | accept | vs ar | ttft p50 ms | tpot p50 ms | lat p50 s | err |",
        "|---|---|---|---|---|---|---|---|",
        "| ar-tp1-c1-out256 | 450.0 | - | - | - | - | 0.500 | 0 |",
        "- failed `sa-tp1-c1-out256` (setup): EngineStartError: sa-tp1: sglang.Engine failed to start: "
        "RuntimeError: died; engine log says: AttributeError: 'NoneType' object has no attribute 'dim'",
        "- engine starts: 2",
    ]
    assert main([str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| ar-tp1-c1-out256 | 500.0 | 450.0 | 0.900 | - | - |",
        "| ngram-tp1-c1-out256 | 1000.0 | absent | - | 9.500 | - |",
    ]


def test_bad_input_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit) as e:
        main([str(bad)])
    assert e.value.code == 2
    assert f"{bad}: not a results JSON (TypeError" in capsys.readouterr().err
