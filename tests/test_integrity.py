"""Result integrity: failed cells are never measurements, bad input is refused before any engine
starts, interruptions and timeouts are reported as what they are (FakeEngine, tests/fake_engine.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_project import count_starts, fake_conftest, write_project

from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import eta, plan
from pytest_specbench.planning.text import format_plan

HERE = Path(__file__).parent

CONFTEST = fake_conftest("FakeEngine", 'register_backend("fake", FakeEngine, max_tp=4, gpu=False)')


def _project(pytester: pytest.Pytester, matrix: str) -> pytest.Pytester:
    return write_project(pytester, matrix, CONFTEST, bench_file="test_b.py")


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return count_starts(monkeypatch, tmp_path / "starts.txt")


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines() if p.exists() else []


# ----------------------------------------------------------------------------- failed cells

FLAKY = """
models: {m: /nonexistent/model}
methods:
  flaky: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 3}}
baseline: flaky
workloads:
  throughput: {concurrency: [2], output_tokens: [8], prompt_tokens: 8, waves: 1, rounds: 2, warmup: 0}
"""


def test_a_cell_with_one_failed_request_is_a_failed_cell_and_runs_again_on_resume(
    pytester: pytest.Pytester, starts: Path
) -> None:
    _project(pytester, FLAKY)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=1, failed=1)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [b["param"] for b in doc["benchmarks"]] == ["ngram-tp1-c2-out8"]
    (failed,) = doc["specbench"]["failed_cells"]
    assert failed["cell"] == "flaky-tp1-c2-out8"
    assert "1 of 4 requests failed; first: RuntimeError: flaky request" in failed["error"]
    assert failed["partial_metrics"]["errors"] == 1 and failed["partial_metrics"]["requests"] == 4
    # the failed baseline divides nothing
    assert doc["benchmarks"][0]["extra_info"]["speedup_vs_ar"] is None
    res = pytester.runpytest("benches", "--specbench-resume", "out.json", "--benchmark-json", "r.json")
    res.assert_outcomes(failed=1, skipped=1)  # flaky runs again (and fails again); ngram is copied
    assert [ln.split()[0] for ln in _lines(starts)][-1] == "flaky-tp1"


# ----------------------------------------------------------------------------- bad input

GOOD = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
workloads:
  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8}
"""


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            GOOD.replace(
                "  ar: {backend: fake, model: m}",
                "  ar: {backend: fake, model: m}\n  ar: {backend: fake, model: m}",
            ),
            "line 5: key 'ar' is given twice in one mapping (first on line 4)",
        ),
        (
            GOOD.replace("prompt_tokens: 8}", "prompt_tokens: 8, request_rate: [4, 4.0]}"),
            "workloads.throughput.request_rate: lists a rate twice: [4, 4.0]",
        ),
        (
            GOOD + "  agentic: {scenarios: [calculator, calculator]}\n",
            "workloads.agentic: cell id 'agentic-ar-tp1-c1-out64-calculator' is produced twice",
        ),
        (
            GOOD.replace(
                "  ar: {backend: fake, model: m}",
                "  ar: {backend: fake, model: m}\n  ttft-ar: {backend: fake, model: m}",
            )
            + "  ttft: {concurrency: [1], output_tokens: [8]}\n",
            "cell id 'ttft-ar-tp1-c1-out8' is produced twice",
        ),
        (
            GOOD.replace("ar: {backend: fake, model: m}", "ar: {backend: fake, model: m, speculative: {}}"),
            "methods.ar.speculative.algorithm: required key is missing",
        ),
        (
            GOOD.replace("ar: {backend: fake, model: m}", "ar: {backend: fake, model: m, speculative: null}"),
            "methods.ar.speculative: is empty; give {algorithm: ...}",
        ),
        (
            GOOD.replace("prompt_tokens: 8}", 'prompt_tokens: 8, options: {stream: "false"}}'),
            "workloads.throughput.options.stream: expected true or false; got 'false'",
        ),
        (
            GOOD.replace("prompt_tokens: 8}", "prompt_tokens: 8, options: {streaming: true}}"),
            "workloads.throughput.options.streaming: unknown key (did you mean 'stream'?); allowed: stream",
        ),
        (
            GOOD + "  agentic: {scenarios: [calculator], context_tokens: [3000]}\n",
            "workloads.agentic.context_tokens: workload kind 'agentic' does not use it",
        ),
        (
            GOOD.replace("backend: fake", "backend: hf")
            .replace(
                "ar: {backend: hf, model: m}",
                "ar: {backend: hf, model: e, speculative: {algorithm: eagle3, draft_model: e}}",
            )
            .replace(
                "models: {m: /nonexistent/model}", "models: {m: /nonexistent/model, e: 'embedded:tiny'}"
            ),
            "methods.ar: backend 'hf' implements speculative algorithms ngram, draft; 'eagle3' needs the "
            "sglang backend",
        ),
        (
            GOOD.replace("backend: fake", "backend: hf"),
            "methods.ar.model (models.m): '/nonexistent/model' does not exist; give a model directory",
        ),
    ],
    ids=[
        "dup-key",
        "dup-rate",
        "dup-scenario",
        "method-like-prefix",
        "empty-spec",
        "null-spec",
        "stream-str",
        "option-key",
        "ignored-key",
        "algorithm",
        "model-path",
    ],
)
def test_bad_input_is_a_usage_error_before_any_engine_starts(
    pytester: pytest.Pytester, starts: Path, yaml_text: str, message: str
) -> None:
    _project(pytester, yaml_text)
    res = pytester.runpytest("benches")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "benches/specbench.yaml: " in err and message in err, err
    assert _lines(starts) == []


def test_a_missing_model_quotes_the_command_in_the_matrix_comments_that_makes_it(
    pytester: pytest.Pytester, starts: Path
) -> None:
    header = (
        "# Dummy weights, from the repository root: python3 scripts/make_dummy_model.py .model/other\n"
        "#   --preset other, and for this one:\n"
        "#   python3 scripts/make_dummy_model.py /nonexistent/model --preset qwen3-1.7b \\\n"
        "#       --eagle3-draft .model/eagle3. Then plan it.\n"
    )
    _project(pytester, header + GOOD.replace("backend: fake", "backend: hf"))
    res = pytester.runpytest("benches", "--specbench-plan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "'/nonexistent/model' does not exist; give a model directory with config.json, embedded:tiny / "
        "embedded:tiny-draft, or a hub id (org/name); the matrix's comments say how to make it (from the "
        "repository root): python3 scripts/make_dummy_model.py /nonexistent/model --preset qwen3-1.7b "
        "--eagle3-draft .model/eagle3\n" in res.stderr.str() + "\n"
    ), res.stderr.str()
    assert _lines(starts) == []
    # without such a comment the error is the plain one
    _project(pytester, GOOD.replace("backend: fake", "backend: hf"))
    err = pytester.runpytest("benches", "--specbench-plan").stderr.str()
    assert "or a hub id (org/name)\n" in err + "\n" and "make_dummy_model" not in err, err


def test_the_shipped_break_even_matrix_says_how_to_make_its_dummy_models() -> None:
    from pytest_specbench.plugin.recipes import with_make_model_hint

    path = Path(__file__).resolve().parent.parent / "benches" / "examples" / "break-even.yaml"
    why = "methods.ar-dense.model (models.qwen3): '/x/.model/qwen3-1.7b' does not exist; give a directory"
    assert with_make_model_hint(path, why) == (
        why + "; the matrix's comments say how to make it (from the repository root): python3 "
        "scripts/make_dummy_model.py .model/qwen3-1.7b --preset qwen3-1.7b --eagle3-draft .model/eagle3 "
        "--dflash-draft .model/dflash"
    )


def test_agentic_and_categories_params_describe_what_ran(pytester: pytest.Pytester, starts: Path) -> None:
    m = parse(
        {
            "models": {"m": "/x"},
            "methods": {"ar": {"backend": "fake", "model": "m"}},
            "workloads": {
                "agentic": {"scenarios": ["calculator"]},
                "categories": {"categories": ["math"], "concurrency": [8], "rounds": 1, "warmup": 0},
            },
        },
        "m.yaml",
    )
    for c in m.cells():
        assert "context_tokens" not in c.params()
    # the built-in set has fewer math questions than 8: they cycle to one full wave
    _project(
        pytester,
        GOOD.replace(
            "  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8}",
            "  categories: {categories: [math], concurrency: [8], output_tokens: [4], rounds: 1, warmup: 0}",
        ),
    )
    res = pytester.runpytest("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=1)
    (b,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    e = b["extra_info"]
    assert e["requests"] == 8 and e["prompts"] < 8
    assert len(set(e["per_request"]["tag"])) == 8  # every request has its own tag
    assert e["prompt_tokens_mean"] == e["prompt_tokens"] / 8
    assert "context_tokens" not in b["params"]


def test_prompt_length_is_the_engines_count(pytester: pytest.Pytester, starts: Path) -> None:
    """The engine ("short") counts one token fewer than it was sent: the long-context cell fails."""
    _project(
        pytester,
        GOOD.replace("  ar: {backend: fake, model: m}", "  short: {backend: fake, model: m}").replace(
            "  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8}",
            "  long_context: {context_tokens: [300], output_tokens: [4], rounds: 1, warmup: 0}",
        ),
    )
    res = pytester.runpytest("benches")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*prompts must be exactly 300 tokens; the engine saw [[]299[]]*"])


def test_a_methods_env_is_restored_when_its_engine_stops(pytester: pytest.Pytester, starts: Path) -> None:
    _project(
        pytester,
        GOOD.replace(
            "  ar: {backend: fake, model: m}",
            "  ar: {backend: fake, model: m, env: {FAKE_ENV_PROBE: set-by-ar}}\n"
            "  ngram: {backend: fake, model: m, speculative: {algorithm: ngram}}",
        ),
    )
    res = pytester.runpytest("benches")
    res.assert_outcomes(passed=2)
    assert [ln.split()[-1] for ln in _lines(starts)] == ["probe=set-by-ar", "probe=-"]
    assert "FAKE_ENV_PROBE" not in os.environ


def test_roofline_counts_the_target_only_and_needs_a_known_bandwidth() -> None:
    m = parse(
        {
            "models": {
                "t": {"path": str(HERE.parent / "benches/examples/configs/qwen3-8b"), "load_format": "dummy"}
            },
            "methods": {
                "ar": {"backend": "sglang", "model": "t"},
                "oracle": {
                    "backend": "sglang",
                    "model": "t",
                    "speculative": {"algorithm": "standalone", "draft_model": "t", "num_steps": 3},
                },
            },
            "workloads": {"throughput": {"concurrency": [8], "output_tokens": [64], "prompt_tokens": 128}},
        },
        "m.yaml",
    )
    p = plan.make_plan(m.cells(), plan.GPUBudget(80 * 2**30, 3.35e12, "H100"))
    rl = {c.method.name: p.cells[c.id].roofline_tokens_per_s for c in m.cells()}
    assert rl["ar"] and rl["oracle"] == pytest.approx(rl["ar"])  # the draft's weights are not in it
    unknown = plan.make_plan(m.cells(), plan.GPUBudget(80 * 2**30, None, "GeForce RTX 3090"))
    assert all(c.roofline_tokens_per_s is None for c in unknown.cells.values())
    assert eta.bandwidth_for("NVIDIA GeForce RTX 3090") is None
    assert eta.bandwidth_for("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 1.792e12
    assert eta.bandwidth_for("NVIDIA H200") == 4.8e12
    text = "\n".join(format_plan(unknown))
    assert "bandwidth unknown (--specbench-gpu-bandwidth TB/s gives a roofline and decode ETAs)" in text


# ----------------------------------------------------------------------------- timeouts

TWO_CELLS = """
models: {m: /nonexistent/model}
methods:
  tmo: {backend: fake, model: m}
workloads:
  throughput: {concurrency: [1], output_tokens: [13, 8], prompt_tokens: 8, waves: 1, rounds: 1, warmup: 0}
"""


def test_a_requests_timeout_error_fails_only_its_cell(pytester: pytest.Pytester, starts: Path) -> None:
    _project(pytester, TWO_CELLS)
    res = pytester.runpytest("benches", "-p", "timeout")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(
        ["*tmo-tp1-c1-out13*1 of 1 requests failed; first: TimeoutError: read timed out*"]
    )
    assert "torn down" not in res.stdout.str()
    assert len(_lines(starts)) == 1


def test_timeout_option_fires_in_the_first_cell_of_a_group(pytester: pytest.Pytester, starts: Path) -> None:
    """--timeout 2 covers the engine start and the first cell: the engine start's own limit must
    not switch pytest-timeout's alarm off (a hung first cell used to pass under --timeout)."""
    _project(
        pytester, GOOD.replace("prompt_tokens: 8}", "prompt_tokens: 8, rounds: 1, warmup: 0, timeout_s: 15}")
    )
    res = pytester.runpytest(
        "benches", "-p", "timeout", "--timeout", "2", "--specbench-hang-engine", "ar-tp1@0"
    )
    res.assert_outcomes(failed=1)
    # pytest-timeout's alarm fired, not the cell's own 15 s limit
    res.stdout.fnmatch_lines(["*Timeout (>2.0s) from pytest-timeout*"])
    assert "timeout_s" not in res.stdout.str()


# ----------------------------------------------------------------------------- interruptions

SLOW = """
models: {m: /nonexistent/model}
methods:
  child-ar: {backend: fake, model: m}
  child-slow: {backend: fake, model: m, speculative: {algorithm: ngram}}
baseline: child-ar
workloads:
  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8, rounds: 1, warmup: 0}
"""


def _bench(out: Path, *args: str) -> list[str]:
    """The command line of a bench run writing ``out``."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "benches",
        *args,
        "-p",
        "no:cacheprovider",
        "--benchmark-json",
        str(out),
    ]


def _start(pytester: pytest.Pytester, env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[str]:
    """The bench run as its own process (so that it can be signalled), output captured."""
    return subprocess.Popen(
        _bench(out, *args),
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_mid_cell_keeps_the_json_marks_the_cell_and_leaves_no_process(
    pytester: pytest.Pytester, tmp_path: Path, sig: signal.Signals, loop: str
) -> None:
    import psutil

    if loop == "uvloop":
        pytest.importorskip("uvloop")

    _project(pytester, SLOW)
    pids = tmp_path / "pids.txt"
    env = {**os.environ, "FAKE_CHILD_PIDS": str(pids), "FAKE_SLOW_S": "60"}
    if loop == "uvloop":
        env["FAKE_UVLOOP"] = "1"
    env.pop("FAKE_ENGINE_STARTS", None)
    out = pytester.path / "out.json"
    proc = _start(pytester, env, out)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the first cell measured, the second one running
            if out.exists() and len(_lines(pids)) == 2 and json.loads(out.read_text())["benchmarks"]:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    doc = json.loads(out.read_text())
    assert [b["param"] for b in doc["benchmarks"]] == ["child-ar-tp1-c1-out8"]
    (f,) = doc["specbench"]["failed_cells"]
    assert f["cell"] == "child-slow-tp1-c1-out8" and f["interrupted"] is True
    assert doc["specbench"]["interrupted"]["why"] == f"interrupted by {sig.name}"
    assert "INTERRUPTED (interrupted by" in output and f"--specbench-resume {out} " in output
    # the interrupted group's start is in the JSON too (its cell never got a teardown report)
    assert [e["group"] for e in doc["specbench"]["engine_groups"]] == ["child-ar-tp1", "child-slow-tp1"]
    for pid in map(int, _lines(pids)):  # every engine's child process is gone
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # resume runs only the interrupted cell
    env["FAKE_SLOW_S"] = "0"
    done = subprocess.run(
        _bench(pytester.path / "r.json", "--specbench-resume", str(out)),
        cwd=pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    r = json.loads((pytester.path / "r.json").read_text())
    assert sorted(b["param"] for b in r["benchmarks"]) == ["child-ar-tp1-c1-out8", "child-slow-tp1-c1-out8"]
    assert r["specbench"]["resumed_cells"] == ["child-ar-tp1-c1-out8"]


# ----------------------------------------------------------------------------- resume provenance


def test_resume_refuses_cells_of_another_machine_unless_asked(
    pytester: pytest.Pytester, starts: Path
) -> None:
    _project(
        pytester,
        GOOD.replace(
            "  ar: {backend: fake, model: m}",
            "  ar: {backend: fake, model: m}\n"
            "  ngram: {backend: fake, model: m, speculative: {algorithm: ngram}}",
        ),
    )
    pytester.runpytest("benches", "--benchmark-json", "out.json").assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    prov = doc["benchmarks"][0]["extra_info"]["provenance"]
    assert set(prov["machine"]) == {"gpus", "driver", "cpu", "cpu_count", "versions"} and "commit" in prov
    doc["benchmarks"][0]["extra_info"]["provenance"]["machine"]["gpus"] = ["NVIDIA RTX PRO 6000"]
    (pytester.path / "other.json").write_text(json.dumps(doc))
    res = pytester.runpytest("benches", "--specbench-resume", "other.json", "--benchmark-json", "r.json")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["resume refused 1 cell *: ar-tp1-c1-out8 (measured on another machine: gpus)"])
    res = pytester.runpytest(
        "benches",
        "--specbench-resume",
        "other.json",
        "--specbench-resume-any-machine",
        "--benchmark-json",
        "a.json",
    )
    res.assert_outcomes(skipped=2)
    a = {
        b["param"]: b["extra_info"] for b in json.loads((pytester.path / "a.json").read_text())["benchmarks"]
    }
    assert a["ar-tp1-c1-out8"]["resumed_from_other_machine"]["gpus"] == ["NVIDIA RTX PRO 6000"]
    assert "resumed_from_other_machine" not in a["ngram-tp1-c1-out8"]


SLOW_TWO = """
models: {m: /nonexistent/model}
methods:
  slow-a: {backend: fake, model: m}
  slow-b: {backend: fake, model: m}
baseline: slow-a
workloads:
  throughput: {concurrency: [1], output_tokens: [8], prompt_tokens: 8, rounds: 1, warmup: 0}
"""


@pytest.mark.slow
def test_sigterm_to_the_controller_under_n2_marks_the_running_cells_and_names_the_signal(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The controller gets SIGTERM while cells run on the workers: the JSON and the summary say
    SIGTERM (not SIGINT, not "outside a cell"), every running cell is a failed cell marked
    interrupted, and the exit status says interrupted."""
    pytest.importorskip("xdist")
    _project(pytester, SLOW_TWO)
    started = tmp_path / "starts.txt"
    env = {**os.environ, "FAKE_SLOW_S": "60", "FAKE_ENGINE_STARTS": str(started)}
    out = pytester.path / "out.json"
    proc = _start(pytester, env, out, "-n", "2")
    try:
        # a worker collected and started a cell (each takes 60 s; the two methods are one family,
        # so one worker runs both, one after the other): waited for, not assumed after a fixed
        # time (a loaded machine starts the workers later)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _lines(started):
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    doc = json.loads(out.read_text())
    spec = doc["specbench"]
    assert spec["interrupted"]["why"] == "interrupted by SIGTERM", spec["interrupted"]
    # every cell that was running (its group's engine had started) is a failed cell marked
    # interrupted: none is lost as "outside a cell"
    marked = {f["group"] for f in spec["failed_cells"] if f.get("interrupted")}
    started = {e["group"] for e in spec["engine_groups"]}
    assert marked and marked == started, (spec["failed_cells"], spec["engine_groups"])
    assert spec["interrupted"]["cell"] in {f["cell"] for f in spec["failed_cells"]}
    assert "INTERRUPTED (interrupted by SIGTERM) in cell slow-" in output
