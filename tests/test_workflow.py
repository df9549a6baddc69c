"""The GitHub workflows, checked offline for what they rely on: triggers, the runner, steps that
name existing scripts, outputs that are written before they are read, the artifacts' paths
where scripts/gpu_ci.sh writes them, and shell blocks that parse. actionlint, which checks the
workflow syntax, expressions and action inputs, runs in .ci/run after the tests."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
GPU_CI = (ROOT / "scripts" / "gpu_ci.sh").read_text()
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def _steps(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job, s) for job, j in doc["jobs"].items() for s in j["steps"]]


GPU = _load(ROOT / ".github" / "workflows" / "gpu.yml")
BENCH = GPU["jobs"]["bench"]


def _step(name_or_id: str) -> dict[str, Any]:
    (s,) = [s for s in BENCH["steps"] if name_or_id in (s.get("id"), s.get("name"))]
    return s


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_workflow_has_jobs_runners_and_well_formed_steps(path: Path) -> None:
    doc = _load(path)
    assert doc["name"] and doc["on"] and doc["jobs"]
    for job, j in doc["jobs"].items():
        assert j.get("runs-on"), job
        ids = [s["id"] for s in j["steps"] if "id" in s]
        assert len(ids) == len(set(ids)), job
        for s in j["steps"]:
            assert ("uses" in s) != ("run" in s), (job, s)  # a step runs a command or an action
            if "uses" in s:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[\w.-]+", s["uses"]), s["uses"]
    # every ${{ steps.X.outputs.Y }} names an earlier step whose script writes Y to $GITHUB_OUTPUT
    text = path.read_text()
    for job, j in doc["jobs"].items():
        seen: dict[str, str] = {}
        for s in j["steps"]:
            for field in (s.get("run", ""), str(s.get("if", "")), yaml.safe_dump(s.get("with", {}))):
                for sid, out in re.findall(r"steps\.([\w-]+)\.outputs\.([\w-]+)", field):
                    assert sid in seen, (job, sid, "read before its step ran")
                    assert re.search(rf"echo \"{out}=.*\" >> \"\$GITHUB_OUTPUT\"", seen[sid]), (sid, out)
            if "id" in s:
                seen[s["id"]] = s.get("run", "")
    assert text.count("${{") == text.count("}}"), path.name


def test_gpu_workflow_triggers_and_runner() -> None:
    on = GPU["on"]
    inputs = on["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"select", "accept_baseline"}
    assert inputs["accept_baseline"]["type"] == "boolean" and inputs["accept_baseline"]["default"] is False
    (cron,) = [c["cron"] for c in on["schedule"]]
    assert len(cron.split()) == 5
    assert BENCH["runs-on"] == ["self-hosted", "gpu", "h200"]
    # the nightly run (no inputs) selects what a manual run selects by default
    assert f"|| '{inputs['select']['default']}'" in GPU["env"]["SELECT"]


def test_the_bench_step_runs_scripts_gpu_ci_sh_with_the_variables_it_reads() -> None:
    run = _step("bench")["run"]
    (line,) = [ln for ln in run.splitlines() if "scripts/gpu_ci.sh" in ln]
    words = shlex.split(line)
    assert words[-2:] == ["bash", "scripts/gpu_ci.sh"]
    given = dict(w.split("=", 1) for w in words[:-2])
    assert set(given) == {"OUT", "BASELINE", "MATRIX"}
    assert (ROOT / given["MATRIX"]).is_file()
    # the workflow's env reaches the script under the names the script reads
    for var in ("SELECT", "MAX_TOK_S_DROP", "MAX_ACCEPT_DROP", "RUN_SPREAD", *given):
        assert "${" + var in GPU_CI, var
    for var in ("MAX_TOK_S_DROP", "MAX_ACCEPT_DROP", "RUN_SPREAD"):
        assert 0 < float(GPU["env"][var]) < 1
    # the verdict line the step greps is the one the script writes
    assert re.search(r'echo "benchmark exit status: \$bench_rc"', GPU_CI)
    assert "benchmark exit status: 0" in run and given["OUT"] + "/verdict.txt" in run


def test_artifacts_and_summary_are_what_gpu_ci_sh_writes() -> None:
    out = shlex.split([ln for ln in _step("bench")["run"].splitlines() if "gpu_ci.sh" in ln][0])
    given = dict(w.split("=", 1) for w in out[:-2])
    written = set(re.findall(r'"\$OUT/([\w.-]+)"', GPU_CI))
    assert {"out.json", "report.md", "compare.md", "verdict.txt", "plan.txt", "pytest.log"} <= written
    # files the step's summary reads
    for f in re.findall(rf"{re.escape(given['OUT'])}/([\w.-]+)", _step("bench")["run"]):
        assert f in written, f
    uploads = [s for s in BENCH["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    by_name = {s["with"]["name"]: s for s in uploads}
    assert by_name["gpu-bench"]["with"]["path"].rstrip("/") == given["OUT"]
    assert by_name["gpu-bench"].get("if") == "always()"  # the JSON and logs of a failed run too
    baseline = by_name["gpu-bench-baseline"]["with"]
    assert baseline["path"] == f"{given['OUT']}/out.json" and baseline.get("overwrite") is True
    # the next run downloads that artifact where BASELINE points
    (dl,) = [s for s in BENCH["steps"] if "download-artifact" in s.get("uses", "")]
    assert dl["with"]["name"] == "gpu-bench-baseline"
    assert given["BASELINE"] == f"{dl['with']['path']}/out.json"
    assert dl["with"]["if_no_artifact_found"] in ("warn", "ignore")  # the first run has none


def test_the_models_the_workflow_makes_are_the_ones_its_matrix_reads() -> None:
    run = _step("dummy-weight models")["run"].replace("\\\n", " ")
    made: set[str] = set()
    presets: set[str] = set()
    for line in run.splitlines():
        words = shlex.split(line)
        if "scripts/make_dummy_model.py" not in words:
            continue
        at = words.index("scripts/make_dummy_model.py")
        made.add(words[at + 1])
        for flag in ("--eagle3-draft", "--dflash-draft"):
            if flag in words:
                made.add(words[words.index(flag) + 1])
        presets.add(words[words.index("--preset") + 1])
    matrix = yaml.safe_load((ROOT / "benches" / "gpu" / "h200.yaml").read_text())
    paths = {m["path"] if isinstance(m, dict) else m for m in matrix["models"].values()}
    assert {os.path.normpath(Path("benches", "gpu", p)) for p in paths} == made
    script = (ROOT / "scripts" / "make_dummy_model.py").read_text()
    for p in presets:
        assert f'"{p}"' in script, p


def test_the_install_step_names_an_extra_of_the_package() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    run = _step("install with the sglang extra")["run"]
    (extra,) = re.findall(r'pip install -e "\.\[(\w+)\]"', run)
    (deps,) = re.findall(rf"(?m)^{extra} = \[(.*)\]", extras)
    assert '"sglang==' in deps


def _shell(block: str) -> str:
    return EXPR.sub("x", block)  # an expression is substituted before the shell sees the block


@pytest.mark.parametrize(
    "path, step",
    [(p, s) for p in WORKFLOWS for _, s in _steps(_load(p)) if "run" in s],
    ids=lambda v: v.name if isinstance(v, Path) else (v.get("name") or v.get("id") or v["run"][:20]),
)
def test_run_blocks_parse_as_bash(path: Path, step: dict[str, Any]) -> None:
    r = subprocess.run(["bash", "-n"], input=_shell(step["run"]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_gpu_ci_sh_parses_and_passes_shellcheck() -> None:
    r = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_ci.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run(["shellcheck", str(ROOT / "scripts" / "gpu_ci.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
