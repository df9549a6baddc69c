"""Nothing lost: a JSON write that fails (disk full, directory gone) never ends the run or loses
its cells, and a --benchmark-json path that cannot be written is refused before any engine
starts (FakeEngine, tests/fake_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_project import count_starts, write_project

HERE = Path(__file__).parent

CONFTEST = f"""
import errno, os, pathlib, sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench.engines import register_backend
register_backend("fake", FakeEngine, max_tp=4, gpu=False)

# the disk "fills" for the results file's writes number FULL_FROM..FULL_TO (1-based)
_write_text = pathlib.Path.write_text
_n = [0]


def _full(self, *a, **k):
    if self.name == "out.json.tmp":
        _n[0] += 1
        lo, hi = int(os.environ.get("FULL_FROM", "0")), int(os.environ.get("FULL_TO", "0"))
        if lo <= _n[0] <= hi:
            _write_text(self, "partial")  # what a full disk leaves: a truncated temporary file
            raise OSError(errno.ENOSPC, "No space left on device")
    return _write_text(self, *a, **k)


pathlib.Path.write_text = _full
"""

MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
  ngram: {backend: fake, model: m, speculative: {algorithm: ngram, num_draft_tokens: 3}}
workloads:
  throughput: {concurrency: [1, 2], output_tokens: [8, 16], prompt_tokens: 8, rounds: 2, warmup: 0}
"""
CELLS = 8


def _project(pytester: pytest.Pytester) -> pytest.Pytester:
    return write_project(pytester, MATRIX, CONFTEST, bench_file="test_b.py")


def test_a_disk_full_mid_run_loses_no_cell_and_the_next_write_catches_up(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes 3 to 5 fail: every cell still runs, the message says so once, no .tmp is left, and
    the write after the disk frees up holds every cell."""
    _project(pytester)
    monkeypatch.setenv("FULL_FROM", "3")
    monkeypatch.setenv("FULL_TO", "5")
    res = pytester.runpytest_subprocess("benches", "--benchmark-json", "out.json", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=CELLS)
    assert res.ret == 0
    out = res.stdout.str()
    assert out.count("could not write") == 1 and "No space left on device" in out
    assert "written again after 3 failed write(s)" in out
    doc = json.loads((pytester.path / "out.json").read_text())
    assert len(doc["benchmarks"]) == CELLS
    assert not (pytester.path / "out.json.tmp").exists()


def test_a_disk_full_to_the_end_rescues_the_results_and_says_where(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the 3rd write on, the target cannot be written: the run goes on to its end, the last
    write goes to a rescue file beside it, the summary names it, and the exit status says failure."""
    _project(pytester)
    monkeypatch.setenv("FULL_FROM", "3")
    monkeypatch.setenv("FULL_TO", "1000")
    res = pytester.runpytest_subprocess("benches", "--benchmark-json", "out.json", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=CELLS)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    rescued = list(pytester.path.glob("out.rescued-*.json"))
    assert len(rescued) == 1
    assert len(json.loads(rescued[0].read_text())["benchmarks"]) == CELLS
    res.stdout.fnmatch_lines(
        [f"*JSON NOT WRITTEN to out.json: * No space left on device; the results are in *{rescued[0].name}*"]
    )
    # what the target holds is the last complete write (2 cells), never a truncated file
    assert len(json.loads((pytester.path / "out.json").read_text())["benchmarks"]) == 2
    assert not (pytester.path / "out.json.tmp").exists()


def test_a_plot_that_fails_costs_the_pictures_not_the_run(pytester: pytest.Pytester) -> None:
    """matplotlib raising while it draws (as a broken IPython made pyplot do on a GPU host): every
    cell is in the JSON, the summary says the plots failed and how to make them, exit status 1."""
    _project(pytester)
    (pytester.path / "conftest.py").write_text(
        (pytester.path / "conftest.py").read_text()
        + "\nfrom pytest_specbench.report import panels as _panels\n"
        "def _broken(*a, **k):\n"
        "    raise AttributeError(\"module 'IPython' has no attribute 'get_ipython'\")\n"
        "_panels.draw = _broken\n"
    )
    res = pytester.runpytest_subprocess(
        "benches", "--benchmark-json", "out.json", "--specbench-plots", "plots", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(passed=CELLS)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*PLOTS FAILED: plots not written to plots: AttributeError: module 'IPython'*"])
    assert len(json.loads((pytester.path / "out.json").read_text())["benchmarks"]) == CELLS
    assert "INTERNALERROR" not in res.stdout.str()


def test_a_json_path_that_cannot_be_written_is_refused_before_any_engine_starts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _project(pytester)
    starts = count_starts(monkeypatch, tmp_path / "starts.txt")
    res = pytester.runpytest_subprocess("benches", "--benchmark-json", "/nonexistent_dir/out.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*--benchmark-json /nonexistent_dir/out.json: directory /nonexistent_dir does not exist*"]
    )
    assert not starts.exists()


# ----------------------------------------------------------------------------- refused input

BASE = {
    "models": {"m": "embedded:tiny"},
    "methods": {"ar": {"backend": "hf", "model": "m"}},
    "workloads": {"throughput": {"concurrency": [1], "output_tokens": [8], "prompt_tokens": 8}},
}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "request_rate",
            [float("nan")],
            "workloads.throughput.request_rate[0]: expected requests per second > 0 (a finite number); "
            "got nan",
        ),
        (
            "request_rate",
            [float("inf")],
            "workloads.throughput.request_rate[0]: expected requests per second > 0 (a finite number); "
            "got inf",
        ),
        (
            "timeout_s",
            float("inf"),
            "workloads.throughput.timeout_s: expected a number of seconds > 0 (a finite number); got inf",
        ),
        ("timeout_s", 1e9, "workloads.throughput.timeout_s: 1e+09 cannot be measured here; at most 604800"),
        (
            "prompt_tokens",
            10**9,
            "workloads.throughput.prompt_tokens: 1,000,000,000 cannot be measured here; at most 10,000,000",
        ),
        (
            "requests",
            10**12,
            "workloads.throughput.requests: 1,000,000,000,000 cannot be measured here; at most 10,000,000",
        ),
        (
            "slo",
            {"e2e_s": float("nan")},
            "workloads.throughput.slo.e2e_s: expected a number > 0 (a finite number); got nan",
        ),
    ],
)
def test_values_that_cannot_be_measured_are_refused_with_file_key_and_what_is_valid(
    key: str, value: object, message: str
) -> None:
    import copy

    from pytest_specbench.matrix.schema import MatrixError, parse

    doc = copy.deepcopy(BASE)
    doc["workloads"]["throughput"][key] = value
    with pytest.raises(MatrixError) as e:
        parse(doc, "m.yaml")
    assert str(e.value) == f"m.yaml: {message}"


def test_engine_args_on_the_hf_backend_are_refused_not_ignored() -> None:
    import copy

    from pytest_specbench.engines import get_backend
    from pytest_specbench.matrix.schema import parse

    doc = copy.deepcopy(BASE)
    doc["methods"]["ar"]["engine_args"] = {"dtype": "float16"}
    (method,) = parse(doc, "m.yaml").methods
    assert get_backend("hf").refusal(method) == (
        "methods.ar.engine_args: backend 'hf' takes no engine arguments (given: dtype); remove them, "
        "or use the sglang backend"
    )
    assert get_backend("sglang").refusal(method, sends=False) is None


@pytest.mark.parametrize(
    "option", ["--specbench-timeout=-5", "--specbench-start-timeout=0", "--specbench-timeout=nan"]
)
def test_time_limits_on_the_command_line_must_be_positive_and_finite(
    pytester: pytest.Pytester, option: str
) -> None:
    _project(pytester)
    res = pytester.runpytest_subprocess("benches", option, "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [f"*{option.split('=')[0]}: expected a number of seconds > 0 (at most a week); got*"]
    )


def test_a_cell_planned_past_its_time_limit_says_so_in_the_plan() -> None:
    import copy

    from pytest_specbench.matrix.schema import parse
    from pytest_specbench.planning import plan

    doc = copy.deepcopy(BASE)
    doc["workloads"]["throughput"].update(output_tokens=[4096], requests=64, timeout_s=1)
    cells = parse(doc, "m.yaml").cells()
    cp = plan.make_plan(cells, None).cells[cells[0].id]
    assert cp.feasible and cp.eta_s is not None and cp.eta_s > 1
    assert "over its time limit: eta" in (cp.note or "") and "> 1 s" in (cp.note or "")
    # --specbench-timeout overrides the workload's limit, in the plan too
    assert "over its time limit" not in (
        plan.make_plan(cells, None, timeout_s=1e6).cells[cells[0].id].note or ""
    )


def test_a_backend_whose_library_is_missing_is_one_line_before_any_start() -> None:
    import copy
    import importlib.util

    from pytest_specbench.engines import get_backend
    from pytest_specbench.matrix.schema import parse

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed here")
    doc = copy.deepcopy(BASE)
    doc["methods"]["ar"]["backend"] = "sglang"
    (method,) = parse(doc, "m.yaml").methods
    why = get_backend("sglang").refusal(method)
    assert why is not None and why.startswith(
        "methods.ar: backend 'sglang' needs sglang, which is not installed: pip install"
    )
    assert (
        get_backend("sglang").refusal(method, sends=False) is None
    )  # a plan or a collection needs no sglang


# ----------------------------------------------------------------------------- a worker that dies

KILLER_CONFTEST = f"""
import os, signal, sys
sys.path.insert(0, {str(HERE)!r})
from fake_engine import FakeEngine
from pytest_specbench.engines import register_backend


class KillerEngine(FakeEngine):
    async def agenerate(self, request):
        marker = os.environ["FAKE_KILL_ONCE"]
        if self.group.method.name == "killer" and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-cell, as under the OOM killer
        return await super().agenerate(request)


register_backend("fake", KillerEngine, max_tp=4, gpu=False)
"""

KILLER_MATRIX = """
models: {m: /nonexistent/model}
methods:
  ar: {backend: fake, model: m}
  killer: {backend: fake, model: m}
workloads:
  throughput: {concurrency: [1, 2], output_tokens: [8], prompt_tokens: 8, rounds: 1, warmup: 0}
"""


def test_a_worker_killed_mid_cell_is_a_crashed_failed_cell_in_the_json(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("xdist")
    write_project(pytester, KILLER_MATRIX, KILLER_CONFTEST, bench_file="test_b.py")
    monkeypatch.setenv("FAKE_KILL_ONCE", str(tmp_path / "killed"))
    res = pytester.runpytest_subprocess(
        "benches", "-n", "2", "--benchmark-json", "out.json", "-p", "no:cacheprovider"
    )
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    doc = json.loads((pytester.path / "out.json").read_text())
    spec = doc["specbench"]
    (crash,) = spec["crashed_workers"]
    assert crash["cell"].startswith("killer-tp1-") and "crashed while running" in crash["xdist"]
    # xdist ran the cell again on the replacement worker: a result, not a failed cell; without that
    # re-run it would be in failed_cells marked crashed
    assert crash["measured_again"] is True
    assert crash["cell"] in {b["param"] for b in doc["benchmarks"]} and len(doc["benchmarks"]) == 4
    assert not [f for f in spec["failed_cells"] if f["cell"] == crash["cell"]]
    res.stdout.fnmatch_lines(["*CRASHED: 1 xdist worker died mid-cell*measured again*"])


# ----------------------------------------------------------------------------- one-line messages


def test_a_malformed_server_sent_event_names_the_url_and_the_event() -> None:
    from pytest_specbench.engines.httpclient import sse_events

    with pytest.raises(ValueError) as e:
        sse_events(
            ['data: {"text": "ok"}\n', "\n", 'data: {"text": oops}\n', "\n"], "POST http://h:1/generate"
        )
    msg = str(e.value)
    assert msg.startswith("POST http://h:1/generate: malformed server-sent event (")
    assert msg.endswith("""'{"text": oops}'""")


def test_a_hub_model_without_network_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    import huggingface_hub.constants

    from pytest_specbench.engines.base import EngineStartError
    from pytest_specbench.engines.hf import HFEngine
    from pytest_specbench.matrix.schema import parse

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the library read the variable when it was imported (another test may have imported it)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    doc = copy.deepcopy(BASE)
    doc["models"]["m"] = "nonexistent-org/no-such-model-here"
    (group,) = {c.group.id: c.group for c in parse(doc, "m.yaml").cells()}.values()
    with pytest.raises(EngineStartError) as e:
        HFEngine(group)
    msg = str(e.value)
    assert msg.startswith("ar-tp1: cannot load model 'nonexistent-org/no-such-model-here': ")
    assert "\n" not in msg and msg.endswith("(no network here? give a local path, or download it first)")
