"""The HTML report's title names the matrix by its file name, not the absolute path of the machine
that ran it."""

from __future__ import annotations

from pytest_specbench.report.html import render


def test_the_html_title_names_the_matrix_file_not_its_path() -> None:
    doc = {"benchmarks": [], "specbench": {"matrix": "/home/someone/work/benches/specbench.yaml"}}
    page = render(doc, ["# report"], [])
    assert "<title>pytest-specbench: specbench.yaml</title>" in page
    assert "/home/someone" not in page.split("<h2>")[0]
    assert "<title>pytest-specbench: run</title>" in render({"benchmarks": []}, [], [])
