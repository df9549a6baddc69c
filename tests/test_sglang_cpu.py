"""The sglang backend's pure parts, on a machine without sglang or GPUs."""

from __future__ import annotations

import os
import sys

import pytest

from pytest_specbench.engines.sglang import engine_kwargs
from pytest_specbench.gpus import inventory as gpus
from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.schema import parse

DOC = {
    "models": {
        "t": {"path": "/models/qwen3", "load_format": "dummy", "context_length": 131072},
        "d": "/models/eagle3",
    },
    "methods": {
        "eagle3": {
            "backend": "sglang",
            "model": "t",
            "speculative": {
                "algorithm": "eagle3",
                "draft_model": "d",
                "num_steps": 3,
                "topk": 1,
                "num_draft_tokens": 4,
            },
            "engine_args": {
                "mem_fraction_static": 0.8,
                "attention_backend": "fa3",
                "json_model_override_args": {"max_position_embeddings": 131072},
            },
            "env": {"SGLANG_ENABLE_SPEC_V2": "1"},
        },
        "dflash": {
            "backend": "sglang",
            "model": "t",
            "speculative": {"algorithm": "dflash", "draft_model": "d", "block_size": 16},
        },
    },
    "tp": [4],
    "workloads": {"throughput": {}},
}


def test_engine_kwargs_from_yaml() -> None:
    m = parse(DOC, "m.yaml")
    kw = engine_kwargs(EngineGroup(m.method("eagle3"), 4))
    assert kw["model_path"] == "/models/qwen3" and kw["load_format"] == "dummy"
    assert kw["tp_size"] == 4 and kw["context_length"] == 131072
    assert kw["speculative_algorithm"] == "EAGLE3" and kw["speculative_draft_model_path"] == "/models/eagle3"
    assert (
        kw["speculative_num_steps"],
        kw["speculative_eagle_topk"],
        kw["speculative_num_draft_tokens"],
    ) == (3, 1, 4)
    assert kw["attention_backend"] == "fa3"  # engine_args override the offline defaults
    assert kw["mem_fraction_static"] == 0.8
    assert kw["json_model_override_args"] == '{"max_position_embeddings": 131072}'
    kw = engine_kwargs(EngineGroup(m.method("dflash"), 1))
    assert kw["speculative_algorithm"] == "DFLASH" and kw["speculative_dflash_block_size"] == 16
    assert "sglang" not in sys.modules


def G(i: int, used: int = 10, procs: int = 0) -> gpus.GPU:
    return gpus.GPU(i, "NVIDIA H200", 143771, used, procs)


def test_busy_gpus_are_left_out() -> None:
    inv = [G(0, used=57000, procs=1), G(1), G(2), G(3, used=30000)]
    use, notes = gpus.choose(inv, None)
    assert use == (1, 2)
    assert notes == [
        "not using GPU 0 runs 1 compute process(es)",
        "not using GPU 3 has 113771 MiB free of 143771 MiB",
    ]
    assert gpus.choose(inv, (0, 3)) == ((0, 3), [])
    with pytest.raises(ValueError, match=r"names GPU\(s\) \[7\]; this host has \[0, 1, 2, 3\]"):
        gpus.choose(inv, (7,))


def test_worker_slices_are_disjoint() -> None:
    g = (1, 2, 3, 4, 5, 6, 7)
    slices = [gpus.worker_slice(g, w, 2) for w in range(2)]
    assert slices == [(1, 2, 3), (4, 5, 6, 7)]
    assert gpus.parse_gpu_list("0,2") == (0, 2)
    with pytest.raises(ValueError, match="distinct"):
        gpus.parse_gpu_list("1,1")


def test_scheduler_info_is_read_where_sglang_0_5_17_keeps_it() -> None:
    from types import SimpleNamespace

    from pytest_specbench.engines.sglang import _scheduler_info

    eng = SimpleNamespace(
        _scheduler_init_result=SimpleNamespace(
            scheduler_infos=[
                {
                    "status": "ready",
                    "max_total_num_tokens": 1087303,
                    "max_req_input_len": 40955,
                    "nested": {"x": 1},
                }
            ]
        )
    )
    assert _scheduler_info(eng) == {
        "status": "ready",
        "max_total_num_tokens": 1087303,
        "max_req_input_len": 40955,
    }
    assert _scheduler_info(SimpleNamespace()) == {}


def test_only_sglang_titled_processes_are_watched() -> None:
    from pytest_specbench.engines.sglang import is_engine_process

    assert is_engine_process("sglang::scheduler_TP0")
    assert is_engine_process("sglang::detokenizer")
    # multiprocessing's resource tracker is a child of pytest too: its exit is no engine crash
    assert not is_engine_process(
        "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(9)"
    )


def test_dead_engine_process_says_how_it_ended_without_being_reaped() -> None:
    import signal
    import subprocess
    import time

    from pytest_specbench.engines.sglang import exit_status

    killed = subprocess.Popen(["sleep", "30"])
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    os.kill(killed.pid, signal.SIGKILL)
    for p in (killed, exited):
        for _ in range(200):  # until it is a zombie
            if os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
            time.sleep(0.02)
    assert exit_status(killed.pid) == "was killed by SIGKILL"
    assert exit_status(exited.pid) == "exited with code 3"
    # not reaped: the engine's own waiters (multiprocessing, sglang's watchdog) still see the status
    assert killed.wait(timeout=5) == -signal.SIGKILL
    assert exited.wait(timeout=5) == 3


def test_engine_failure_names_the_reason_from_the_log(tmp_path) -> None:
    from pytest_specbench.engines.sglang import failure_report, log_reason
    from pytest_specbench.report.summary import failure_headline

    log = tmp_path / "engine-hybrid-standalone-tp1.log"
    frames = "".join(f'  File "/tmp/site/sglang/x{i}.py", line {i}, in f\n    y = g()\n' for i in range(40))
    log.write_text(
        "Capturing batches (bs=32 avail_mem=9.1 GB):  40%|####      | 4/10\r"
        "Traceback (most recent call last):\n"
        + frames
        + "AttributeError: 'NoneType' object has no attribute 'dim'\n"
        "[rank0]:[W1129 17:33:01] Warning: WARNING: destroy_process_group() was not called\n"
    )
    assert log_reason(log) == "AttributeError: 'NoneType' object has no attribute 'dim'"
    msg = failure_report("hybrid-standalone-tp1: sglang.Engine failed to start: RuntimeError: died", log)
    lines = msg.splitlines()
    assert lines[1] == "engine log says: AttributeError: 'NoneType' object has no attribute 'dim'"
    assert lines[2].startswith("--- engine log tail (")
    assert failure_headline({"error": "EngineStartError: " + msg, "reason": "x"}) == (
        "EngineStartError: hybrid-standalone-tp1: sglang.Engine failed to start: RuntimeError: died; "
        "engine log says: AttributeError: 'NoneType' object has no attribute 'dim'"
    )
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[2026-11-29] Ignore import error when loading sglang.srt.models.inkling\n")
    assert log_reason(quiet) is None
    assert "engine log says" not in failure_report("ar-crash-tp1: engine crashed", quiet)
    assert log_reason(tmp_path / "missing.log") is None
    assert log_reason(log.with_name("x")) is None
    # an earlier run's failure in the same (appended) log is not this engine's reason
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("[2026-11-30] scheduler started\n")
    assert log_reason(log, offset) is None
    assert failure_report("ar-crash-tp1: engine crashed", log, offset).splitlines()[2:] == [
        "[2026-11-30] scheduler started"
    ]
    for line in ("torch.OutOfMemoryError: CUDA out of memory.", "RuntimeError", "KeyboardInterrupt"):
        quiet.write_text(line + "\n")
        assert log_reason(quiet) == line


def test_warm_up_that_never_answers_fails_the_start(tmp_path, monkeypatch) -> None:
    import asyncio
    from types import SimpleNamespace

    from pytest_specbench.engines import sglang as sg
    from pytest_specbench.engines.base import EngineStartError

    monkeypatch.setattr(sg, "WARMUP_TIMEOUT_S", 0.3)
    eng = object.__new__(sg.SGLangEngine)
    log = tmp_path / "engine-ar-tp1.log"
    log.write_text("[2026-11-29] scheduler started\n")
    killed = []

    async def never() -> None:
        await asyncio.sleep(3600)

    loop = asyncio.new_event_loop()
    eng.group, eng.log_path, eng.crashed, eng._children = SimpleNamespace(id="ar-tp1"), log, None, {}
    eng.log_offset = 0
    eng.engine = SimpleNamespace(loop=loop)
    eng._warmup = never
    eng._kill_children = lambda: killed.append(True)
    with pytest.raises(EngineStartError) as e:
        eng._warm_up()
    loop.close()
    assert str(e.value).startswith("ar-tp1: the warm-up request after the start got no answer within 0.3 s")
    assert killed == [True]  # its processes are killed: the GPU is free for the next group
    assert eng.deadline is None


def test_requests_reach_sglang_with_their_temperature() -> None:
    """What SGLang's async_generate receives: the request's temperature (0 = greedy), exactly
    max_new_tokens with EOS ignored; a batch carries one sampling dict per request."""
    import asyncio
    from types import SimpleNamespace

    from pytest_specbench.engines import sglang as sg
    from pytest_specbench.engines.base import Request

    calls = []

    async def async_generate(input_ids, sampling_params, stream=False):
        calls.append(sampling_params)
        meta = {"completion_tokens": 4, "prompt_tokens": 2, "e2e_latency": 0.1}
        if isinstance(sampling_params, list):
            return [{"meta_info": meta, "output_ids": [1, 2, 3, 4]} for _ in sampling_params]
        return {"meta_info": meta, "output_ids": [1, 2, 3, 4]}

    eng = object.__new__(sg.SGLangEngine)
    eng.engine = SimpleNamespace(async_generate=async_generate)
    greedy, hot = Request((5, 6), 4, stream=False), Request((5, 6), 4, stream=False, temperature=0.7)
    asyncio.run(eng.agenerate(hot))
    asyncio.run(eng.agenerate_batch([greedy, hot]))
    assert calls == [
        {"temperature": 0.7, "max_new_tokens": 4, "ignore_eos": True},
        [
            {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True},
            {"temperature": 0.7, "max_new_tokens": 4, "ignore_eos": True},
        ],
    ]
