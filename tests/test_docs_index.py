"""The docs index lists every page of docs/ once, and the runner guide registers a runner with the
labels the GPU workflow asks for and gates with the options the job's script passes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"


def test_the_docs_index_lists_every_page_once() -> None:
    index = (DOCS / "README.md").read_text()
    linked = re.findall(r"^\| \[([\w./-]+)\]\(\1\) \| .+ \|$", index, re.M)
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert sorted(x for x in linked if "/" not in x) == pages
    assert len(linked) == len(set(linked))
    for target in linked:
        assert (DOCS / target).is_file() or target == "results/README.md", target


def _runs_on() -> list[str]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    return doc["jobs"]["bench"]["runs-on"]


def test_the_runner_guide_registers_the_labels_the_gpu_job_runs_on() -> None:
    guide = (DOCS / "gpu-runner.md").read_text()
    runs_on = _runs_on()
    assert runs_on[0] == "self-hosted"  # every self-hosted runner has it; config.sh adds the rest
    assert f"    runs-on: [{', '.join(runs_on)}]\n" in guide
    (labels,) = re.findall(r"--labels (\S+)", guide)
    assert labels.split(",") == runs_on[1:]


def _command(text: str, start: str) -> str:
    """The shell command that starts with ``start``, its continuation lines joined."""
    at = text.index(start)
    lines = []
    for line in text[at:].splitlines():
        lines.append(line.strip().rstrip("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    return " ".join(lines)


def test_the_runner_guide_gates_as_the_jobs_script_does() -> None:
    guide = _command((DOCS / "gpu-runner.md").read_text(), "python3 -m pytest_specbench.report baseline/")
    gpu_ci = (ROOT / "scripts" / "gpu_ci.sh").read_text()
    script = _command(gpu_ci, 'python3 -m pytest_specbench.report "$BASELINE"')

    def options(cmd: str) -> list[str]:
        return re.findall(r"(--[\w-]+)", cmd)

    assert (
        options(guide)
        == options(script)
        == ["--max-tok-s-drop", "--max-accept-drop", "--run-spread", "--plots"]
    )
