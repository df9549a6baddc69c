"""The server backends' client worker processes (engines/clientpool.py) and the client's own
clock: a round sent from several processes is the same round (requests, order, digests, slots,
arrival times) as from one; no worker outlives its engine, an interrupt or its parent; a cell
records its client loops' lag; and at c64 the client's mean TTFT agrees with the scripted
server's own histogram."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest
from test_server_backends import _cells, _project, fake_server  # noqa: F401

from pytest_specbench.engines import clientpool
from pytest_specbench.engines.base import Request
from pytest_specbench.engines.httpclient import http_call
from pytest_specbench.engines.server import HTTPEngine
from pytest_specbench.matrix.schema import MatrixError, parse
from pytest_specbench.stats.metrics import loop_lag, server_clock

MATRIX = """
models: {{t: {{path: "embedded:tiny"}}}}
methods:
  srv: {{backend: http, model: t, url: "{url}", api: sglang}}
workloads:
  throughput:
    concurrency: [{conc}]
    output_tokens: [{out}]
    prompt_tokens: 16
    waves: {waves}
    rounds: 2
    warmup: {warmup}
    options: {{stream: true{opts}}}
"""


def _engine(url: str) -> HTTPEngine:
    m = parse(
        {
            "models": {"t": {"path": "embedded:tiny"}},
            "methods": {"h": {"backend": "http", "model": "t", "url": url, "api": "sglang"}},
            "workloads": {"throughput": {"concurrency": [1]}},
        }
    )
    return HTTPEngine(m.cells()[0].group)


def _requests(n: int, out: int = 2) -> list[Request]:
    return [Request(tuple(range(i, i + 16)), out, tag=f"round0/req{i}") for i in range(n)]


def _gone(pids: list[int], wait_s: float = 15.0) -> list[int]:
    """The pids still alive (zombies count as gone) after waiting up to ``wait_s`` for them."""
    t_end = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > t_end:
            return alive
        time.sleep(0.1)


# ----------------------------------------------------------------------------- pure parts


def test_the_default_is_one_process_up_to_8_in_flight_then_one_per_8_capped_by_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    d = clientpool.default_processes
    assert [d(c, cores=16) for c in (1, 8, 9, 16, 64, 256)] == [1, 1, 2, 2, 8, 14]
    assert [d(c, cores=2) for c in (8, 9, 64, 256)] == [1, 2, 2, 2]  # at least two past 8
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")  # two pytest workers: half the cores each
    assert [d(c, cores=16) for c in (8, 64, 256)] == [1, 6, 6]
    # never more workers than slots or requests
    assert clientpool.effective_processes(4, 100, 8) == 4
    assert clientpool.effective_processes(64, 3, 8) == 3
    assert clientpool.effective_processes(64, 1000, 1) == 1


def test_slots_and_requests_are_dealt_so_each_worker_holds_its_share_of_the_closed_loop() -> None:
    assert clientpool.split_slots(7, 3) == [3, 2, 2]
    # C = 4 slots over 2 workers: slot s to worker s mod 2, request i to the holder of slot i mod 4
    assert clientpool.deal(10, 4, 2, closed=True) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    # C = 3 over 2: worker 0 holds slots 0 and 2 (two thirds of the requests), worker 1 slot 1
    assert clientpool.deal(9, 3, 2, closed=True) == [[0, 2, 3, 5, 6, 8], [1, 4, 7]]
    # every worker's first wave is the round's first C requests
    shares = clientpool.deal(64, 8, 3, closed=True)
    slots = clientpool.split_slots(8, 3)
    assert sorted(i for s, c in zip(shares, slots, strict=True) for i in s[:c]) == list(range(8))
    assert clientpool.deal(5, 2, 2, closed=False) == [[0, 2, 4], [1, 3]]


@pytest.mark.parametrize("value", [0, -1, 1.5, "many", True, 257], ids=repr)
def test_a_bad_client_processes_value_is_a_matrix_error_naming_the_key(value: object) -> None:
    with pytest.raises(MatrixError) as e:
        parse(
            {
                "models": {"t": {"path": "embedded:tiny"}},
                "methods": {"h": {"backend": "http", "model": "t", "url": "http://x", "api": "sglang"}},
                "workloads": {"throughput": {"concurrency": [64], "options": {"client_processes": value}}},
            }
        )
    msg = str(e.value)
    assert "workloads.throughput.options.client_processes" in msg
    assert "from 1 (the engine's own event loop) to 256" in msg and f"got {value!r}" in msg


def test_the_loop_lag_marks_a_cell_client_bound_past_its_limits() -> None:
    quiet = loop_lag([0.2] * 98 + [1.0, 1.5])
    assert quiet == {"mean_ms": 0.221, "p99_ms": 1.005, "max_ms": 1.5, "ticks": 100}
    out = server_clock([], None, quiet)
    assert out == {
        "client_loop_lag_ms_mean": 0.221,
        "client_loop_lag_ms_p99": 1.005,
        "client_loop_lag_ms_max": 1.5,
    }
    busy = server_clock([], None, loop_lag([3.0] * 100))  # late by 3 ms on average
    assert "ran 3.0 ms late on average" in busy["client_bound"]
    bursts = server_clock([], None, loop_lag([0.1] * 97 + [30.0] * 3))  # mean 1 ms, worst 1 % 30 ms
    assert "30.0 ms in its worst 1 %" in bursts["client_bound"]
    assert server_clock([], None, {"ticks": 0}) == {}


# ----------------------------------------------------------------------------- against FakeServer


def test_a_round_from_three_processes_is_the_same_round_in_order_with_c_in_flight(
    fake_server,  # noqa: F811
) -> None:
    """12 requests at c4 from three workers: every record in the plan's order with its own tag
    and output, each request sent once, and exactly 4 in flight at the server at the peak (the
    slots split 2 + 1 + 1, not 4 per worker)."""
    srv = fake_server(FAKE_TTFT_MS="20", FAKE_ITL_MS="5", FAKE_SPIN_MS="0")
    eng = _engine(srv.url)
    try:
        reqs = _requests(12, out=3)
        recs = eng.submit_round(reqs, None, 4, 3)
        pids = clientpool.shared().pids()
        assert len(pids) == 3 and os.getpid() not in pids
        assert [r.tag for r in recs] == [q.tag for q in reqs]
        assert all(r.error is None and r.output_tokens == 3 for r in recs)
        # the scripted server answers input ids ending in x with x+1, x+2, ...
        assert [r.output_ids[0] for r in recs] == [(q.input_ids[-1] + 1) % 1000 for q in reqs]
        assert srv.stats() == {"peak_in_flight": 4, "generates": 12 + 1}  # + the warm-up request
        assert eng.processes_used == [3]
        assert len(eng.lag_ms) > 0  # the workers' ticks came back
    finally:
        eng.close()
    assert _gone(pids) == []  # the last engine's close stops them


def test_an_open_loop_from_workers_keeps_each_arrival_time(fake_server) -> None:  # noqa: F811
    """Arrivals 40 ms apart dealt over three workers: no request leaves before its time, each
    reaches the server in the schedule's order, and its lateness is recorded."""
    srv = fake_server(FAKE_TTFT_MS="5", FAKE_ITL_MS="1", FAKE_SPIN_MS="0", FAKE_TRACE="1")
    eng = _engine(srv.url)
    try:
        reqs = _requests(9)
        arrivals = [0.04 * i for i in range(9)]
        seen = len(json.loads(http_call(srv.url + "/fake/trace")[1]))
        recs = eng.submit_round(reqs, arrivals, 9, 3)
        trace = json.loads(http_call(srv.url + "/fake/trace")[1])[seen:]
        assert [r.tag for r in recs] == [q.tag for q in reqs]
        for r, at in zip(recs, arrivals, strict=True):
            assert r.start_s is not None and r.start_s >= at, (r.tag, r.start_s, at)
            assert r.client_late_s >= 0 and r.queue_s == 0.0
        # sent in the schedule's order, each once
        assert sorted(range(9), key=lambda i: recs[i].start_s) == list(range(9))
        assert len(trace) == 9
    finally:
        eng.close()


def test_the_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    """A parent killed with SIGKILL never closes its pool: its workers see their stdin end."""
    script = textwrap.dedent(
        """
        import sys, time
        from pytest_specbench.engines import clientpool
        pool = clientpool.shared().acquire()
        pool.grow(2)
        print(" ".join(map(str, pool.pids())), flush=True)
        time.sleep(600)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2 and all(psutil.pid_exists(x) for x in pids)
    p.kill()
    p.wait()
    assert _gone(pids) == []


def test_an_interrupted_cell_leaves_no_worker_behind(
    pytester: pytest.Pytester,
    fake_server,  # noqa: F811
) -> None:
    """SIGINT in the middle of a timed round sent by three workers: the run stops, and no process
    carrying the run's mark (the workers inherit its environment) is left."""
    srv = fake_server(FAKE_TTFT_MS="20", FAKE_ITL_MS="50", FAKE_SPIN_MS="0")
    m = MATRIX.format(url=srv.url, conc=32, out=20, waves=4, warmup=0, opts=", client_processes: 3")
    _project(pytester, m)
    mark = uuid.uuid4().hex
    env = {**os.environ, "SPECBENCH_TEST_MARK": mark}
    p = subprocess.Popen(
        [sys.executable, "-m", "pytest", "benches", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        t_end = time.monotonic() + 120
        # the engine's warm-up request, its warm shape (32), then 20 into the first timed round
        # (128 requests of about 1 s, 32 at a time)
        while srv.stats()["generates"] < 1 + 32 + 20 and time.monotonic() < t_end:
            time.sleep(0.1)
        workers = _marked(mark, p.pid)
        assert len(workers) == 3, workers
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert b"interrupted" in out.lower() or p.returncode != 0
    assert _gone(workers) == [] and _marked(mark, p.pid) == []


def _marked(mark: str, parent: int) -> list[int]:
    """Processes other than ``parent`` whose environment carries the mark."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == parent:
            continue
        try:
            if proc.environ().get("SPECBENCH_TEST_MARK") == mark and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return out


def test_digests_and_records_are_the_same_from_one_process_and_from_three(
    pytester: pytest.Pytester,
    fake_server,  # noqa: F811
) -> None:
    """The same cell with client_processes 1 and 3: the same request digests round by round and
    the same requests in the same order in its records; only the process count differs."""
    srv = fake_server(FAKE_TTFT_MS="10", FAKE_ITL_MS="2", FAKE_SPIN_MS="0")
    got = {}
    for n in (1, 3):
        opts = f", client_processes: {n}"
        _project(pytester, MATRIX.format(url=srv.url, conc=12, out=3, waves=2, warmup=1, opts=opts))
        res = pytester.runpytest("benches", "--benchmark-json", f"out{n}.json", "-p", "no:randomly")
        res.assert_outcomes(passed=1)
        (b,) = _cells(json.loads((pytester.path / f"out{n}.json").read_text())).values()
        got[n] = b["extra_info"]
    one, three = got[1], got[3]
    assert one["client_processes"] == 1 and three["client_processes"] == 3
    assert len(one["request_digests"]) == 2 and one["request_digests"] == three["request_digests"]
    assert one["request_digest"] == three["request_digest"]
    assert one["per_request"]["tag"] == three["per_request"]["tag"]  # the same requests, in order
    assert one["per_request"]["tag"][:3] == ["round1/req0", "round1/req1", "round1/req2"]
    assert one["requests"] == three["requests"] == 2 * 24
    for m in (one, three):
        assert m["client_loop_lag"]["ticks"] > 0 and m["client_loop_lag_ms_max"] >= 0


# a disturbed cell's bound: half the script's 100 ms to the second chunk, so a client that read
# the first chunk only with the second, or counted from a round's start, still fails; other
# processes' CPU was seen to add +2.0 to +11.0 ms at c64 on two shared cores (load 5-16)
DISTURBED_UP_TO_MS = 50.0
LAUNCHED_C64 = """
models: {t: {path: "embedded:tiny"}}
methods:
  ar:
    backend: sglang-server
    model: t
    env: {FAKE_TTFT_MS: "100", FAKE_TTFT_SPREAD_MS: "100", FAKE_ITL_MS: "100", FAKE_SPIN_MS: "0"}
workloads:
  throughput:
    concurrency: [64]
    output_tokens: [2]
    prompt_tokens: 16
    waves: 12
    rounds: 2
    warmup: 0
    options: {stream: true}
"""


def test_at_c64_the_clients_mean_ttft_agrees_with_the_servers_own_within_3_ms(
    pytester: pytest.Pytester,
) -> None:
    """64 requests in flight, sent by the default number of worker processes (two or more), to
    the scripted server launched as an sglang-server: its histogram stamps each request's first
    chunk as it leaves, counted from when the request's bytes reached its socket (the kernel's
    receive time). The client's mean TTFT over the 1536 timed requests is within 3 ms of it.

    What the difference holds is the client's own time: its clock starts before the request is
    written, and it reads the first chunk when its event loop gets to it. The script keeps both
    sides mostly asleep, as on a GPU host where the client has cores of its own: each request
    lives about 300 ms for two chunks, a burst's first chunks come over 100 ms (as a server's
    chunked prefill returns them over several steps), the server does not spin before its times
    (FAKE_SPIN_MS=0), and a round is 12 waves, so its first wave's 64 simultaneous submissions
    weigh one twelfth. No warm-up round: the engine's start sent its warm shape (64 requests at
    once) through the same worker processes. A client that read its streams late, or counted
    from the wrong start, reads more than 3 ms above: the check fails. What the difference
    cannot tell from the client's own lateness is CPU that other processes took from it: a cell
    the run marks disturbed (other processes took more than 10 % of the cores over its timed
    rounds; the launched server and the workers are the run's own) is held to the bound that
    holds under load, 0 to 50 ms (half the 100 ms to the second chunk: a client that read its
    streams a chunk late, or counted from a round's start, fails it whatever the machine did),
    and when it reads 3 ms or more above it is skipped after that check, saying so (on two cores
    shared with other test sessions, whose processes took 74-83 % of them, such cells read +2.0
    to +3.6 ms; one with a 208 ms stall of the client +6.6 ms; at load 5-16 +10.96 ms)."""
    _project(pytester, LAUNCHED_C64)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "-p", "no:randomly")
    res.assert_outcomes(passed=1)
    (b,) = _cells(json.loads((pytester.path / "out.json").read_text())).values()
    m = b["extra_info"]
    assert m["client_processes"] == clientpool.default_processes(64) >= 2
    assert m["server_latency"]["ttft_requests"] == m["requests"] == 2 * 12 * 64
    assert m["server_ttft_ms_mean"] >= 100.0  # never before the script
    late = m["client_ttft_ms_mean"] - m["server_ttft_ms_mean"]
    said = (late, m["client_ttft_ms_mean"], m["server_ttft_ms_mean"], m["client_loop_lag"])
    if m.get("disturbed"):
        assert 0 <= late < DISTURBED_UP_TO_MS, said
        if late >= 3.0:
            pytest.skip(f"other processes took the client's CPU ({m['disturbed']}): read {late:+.2f} ms")
    assert 0 <= late < 3.0, said


RESIDENT = """
models: {t: {path: "embedded:tiny"}}
methods:
  ar: {backend: sglang-server, model: t}
  twin: {backend: sglang-server, model: t}
workloads:
  throughput:
    concurrency: [12]
    output_tokens: [4]
    prompt_tokens: 8
    rounds: 2
    warmup: 0
    options: {stream: true, client_processes: 3}
"""


def test_a_member_and_its_resident_baseline_share_the_workers_each_round_to_its_own_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AR's launched server beside its twin's, rounds interleaved, both sent by the same three
    worker processes: each server counted exactly its own engine's timed requests (a round sent
    to the wrong endpoint would show in the other's histogram), and no worker outlives the run."""
    from test_server_backends import CONFTEST

    monkeypatch.setenv("FAKE_TTFT_MS", "5")
    monkeypatch.setenv("FAKE_ITL_MS", "2")
    _project(pytester, RESIDENT)
    pytester.makeconftest(CONFTEST.replace("gpu=False)", "gpu=False, sentinel=True, resident=True)"))
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "--specbench-log-dir", "logs")
    res.assert_outcomes(passed=2)
    cells = _cells(json.loads((pytester.path / "out.json").read_text()))
    twin = cells["twin-tp1-c12-out4"]["extra_info"]
    assert twin["speedup_pairing"] == "interleaved" and twin["client_processes"] == 3
    assert twin["server_latency"]["ttft_requests"] == twin["requests"] == 2 * 4 * 12
    assert "server_latency_exclusive" not in twin
    ref = twin["reference"]
    assert ref["method"] == "ar" and ref["errors"] == 0 and len(ref["round_tokens_per_s"]) == 2
    assert all(x > 0 for x in ref["round_tokens_per_s"])
    workers = [
        c for c in psutil.Process().children(recursive=True) if "clientworker" in " ".join(c.cmdline())
    ]
    assert _gone([c.pid for c in workers]) == [] and clientpool.shared().pids() == []


class FakeSpanEngine:
    """Records what rounds.timed does with an engine's ``round_span_s``."""

    round_span_s: float | None = None

    def __init__(self, span: float | None):
        self.span = span

    def flush_cache(self) -> None:
        pass


def test_a_round_sent_by_workers_is_timed_from_their_start_to_its_last_completion() -> None:
    """rounds.timed takes a worker-sent round's wall time as the engine reports it (the shared
    start to the last completion), not the dealing and merging around it; a round the engine
    sent itself (no span) keeps the clock around the call, and a span is never carried over."""
    from pytest_specbench.engines.base import RequestRecord
    from pytest_specbench.workloads.rounds import RoundPlan, timed

    cell = parse(
        {
            "models": {"t": {"path": "embedded:tiny"}},
            "methods": {"h": {"backend": "http", "model": "t", "url": "http://x", "api": "sglang"}},
            "workloads": {"throughput": {"concurrency": [1], "rounds": 2, "warmup": 0}},
        }
    ).cells()[0]
    plans = [RoundPlan(_requests(1)) for _ in range(2)]
    calls = []

    def round_fn(eng: FakeSpanEngine, plan: RoundPlan) -> list[RequestRecord]:
        time.sleep(0.05)
        if not calls:  # the first round only: sent by workers, 10 ms from their start
            eng.round_span_s = eng.span
        calls.append(1)
        return [RequestRecord(16, 2, 0.01, start_s=0.0, end_s=0.01)]

    run = timed(FakeSpanEngine(0.01), cell, plans, round_fn, None)  # type: ignore[arg-type]
    assert run.round_times[0] == 0.01
    assert run.round_times[1] >= 0.05  # its own clock: the span was reset before it
