"""TTFT in three legs on the wall clock client and server share (stats/ttft_legs.py): the client's
submission to the server's clock start, the server's clock to its first chunk's hand-over, and the
hand-over to the client's read; the client is bound only when its own legs (its send, the
delivery) are late."""

from __future__ import annotations

import json

import pytest
from test_server_backends import HTTP_MATRIX, _cells, _project, fake_server  # noqa: F401

from pytest_specbench.engines.base import Request, RequestRecord
from pytest_specbench.engines.httpclient import StreamState, record_from
from pytest_specbench.stats.metrics import server_clock
from pytest_specbench.stats.ttft_legs import legs


def _stream(received: float | None, sent: float | None) -> StreamState:
    st = StreamState()
    st.sglang({"output_ids": [1], "meta_info": {"completion_tokens": 1, "response_sent_to_client_ts": sent}})
    st.sglang({"output_ids": [1, 2], "meta_info": {"completion_tokens": 2, "request_received_ts": received}})
    return st


def test_a_streamed_record_carries_its_three_legs() -> None:
    req = Request(input_ids=(1, 2, 3), max_new_tokens=2)
    # sent at 1000.000; the server's clock started at .020, handed the first chunk over at .140;
    # the client read it 150 ms after sending
    rec = record_from(req, _stream(1000.020, 1000.140), [(0.150, 1), (0.160, 2)], 0.2, sent_wall=1000.0)
    assert dict(rec.meta)["ttft_legs_s"] == pytest.approx((0.020, 0.120, 0.010), abs=1e-6)
    # without the server's stamps, or without the client's send time: no legs
    assert "ttft_legs_s" not in dict(record_from(req, _stream(None, 1000.14), [(0.15, 1)], 0.2, 1000.0).meta)
    assert "ttft_legs_s" not in dict(record_from(req, _stream(1000.02, 1000.14), [(0.15, 1)], 0.2).meta)


def _rec(ttft: float, intake: float, delivery: float, send: float | None = None) -> RequestRecord:
    legs_s = (intake, ttft - intake - delivery, delivery)
    meta: tuple = (("ttft_legs_s", legs_s),) + ((("ttft_send_s", send),) if send is not None else ())
    return RequestRecord(16, 8, ttft + 0.1, ttft_s=ttft, meta=meta)


def test_the_clients_send_is_its_own_part_of_the_intake() -> None:
    req = Request(input_ids=(1, 2, 3), max_new_tokens=2)
    rec = record_from(req, _stream(1000.020, 1000.140), [(0.150, 1), (0.160, 2)], 0.2, 1000.0, send_s=0.0004)
    assert dict(rec.meta)["ttft_send_s"] == 0.0004
    assert "ttft_send_s" not in dict(
        record_from(req, _stream(1000.02, 1000.14), [], 0.2, 1000.0, 0.0004).meta
    )
    # sent in 0.2 and 0.4 ms, read 0.5 and 1.5 ms after the hand-over: on time, the gap is the server's
    quick = [_rec(0.200, 0.060, 0.0005, send=0.0002), _rec(0.220, 0.070, 0.0015, send=0.0004)]
    m = server_clock(quick, {"ttft_ms_mean": 140.0, "ttft_requests": 2})
    assert (m["ttft_send_ms_mean"], m["ttft_send_ms_p99"]) == (0.3, 0.398)  # 0.2 + 0.99 * 0.2
    assert "client_bound" not in m
    assert "the client's send 0.30 ms of the intake (p99 0.40)" in m["ttft_before_server_clock"]
    assert (
        "the client sent each request and read each first chunk within the 2 ms / 2% bound (p99 1.9 ms)"
        in m["ttft_before_server_clock"]
    )  # own legs 0.7 and 1.9 ms: 0.7 + 0.99 * 1.2 = 1.888 at p99
    # read on time, but 30 ms to hand the body to the socket: the client's own part, client-bound
    slow = [_rec(0.200, 0.060, 0.0005, send=0.030), _rec(0.220, 0.070, 0.0015, send=0.030)]
    m = server_clock(slow, {"ttft_ms_mean": 140.0, "ttft_requests": 2})
    assert m["client_bound"].startswith("the client's own legs (send and delivery) took 31.0 ms on average")
    # on time on average (1.2 ms), but one request in 50 sent 20 ms late: its worst 1 % is late
    spiky = [_rec(0.200, 0.060, 0.0005, send=0.0002) for _ in range(49)]
    spiky.append(_rec(0.220, 0.070, 0.0005, send=0.0200))
    m = server_clock(spiky, {"ttft_ms_mean": 140.0, "ttft_requests": 50})
    assert m["ttft_client_own_ms_mean"] == pytest.approx(1.096, abs=1e-3)  # (49 * 0.7 + 20.5) / 50
    assert m["ttft_client_own_ms_p99"] == pytest.approx(10.798, abs=1e-3)  # 0.7 + 0.51 * (20.5 - 0.7)
    assert m["client_bound"].startswith(
        "the client's own legs (send and delivery) took 1.1 ms on average, 10.8"
    )
    assert "ttft_before_server_clock" not in m
    assert "ttft_before_server_clock" not in m
    # a server without stamps: the send is still recorded
    assert (
        server_clock([RequestRecord(16, 8, 0.3, ttft_s=0.2, meta=(("ttft_send_s", 0.001),))], None)[
            "ttft_send_ms_mean"
        ]
        == 1.0
    )


def test_the_legs_judge_the_client_by_its_own_leg() -> None:
    on_time = [_rec(0.200, 0.060, 0.0005), _rec(0.220, 0.070, 0.0015)]  # client mean 210 ms
    got = legs(on_time)
    assert got == {
        "ttft_intake_ms_mean": 65.0,
        "ttft_server_ms_mean": 144.0,
        "ttft_delivery_ms_mean": 1.0,
        "ttft_delivery_ms_p99": 1.49,  # interpolated, as every p99: 0.5 + 0.99 * (1.5 - 0.5)
        "ttft_client_own_ms_mean": 1.0,  # no send timed: the delivery alone
        "ttft_client_own_ms_p99": 1.49,
        "ttft_legs_requests": 2,
        "ttft_send_requests": 0,
    }
    m = server_clock(on_time, {"ttft_ms_mean": 140.0, "ttft_requests": 2})
    assert "client_bound" not in m  # 70 ms above the histogram, but read 1 ms after the hand-over
    assert m["ttft_before_server_clock"].startswith(
        "the client read TTFT 210.0 ms, the server's histogram 140.0"
    )
    assert "intake 65.0 ms, server 144.0 ms, delivery 1.0 ms (p99 1.5)" in m["ttft_before_server_clock"]
    late = [_rec(0.200, 0.010, 0.030), _rec(0.220, 0.010, 0.050)]  # read 40 ms after the hand-over
    m = server_clock(late, {"ttft_ms_mean": 150.0, "ttft_requests": 2})
    assert m["client_bound"].startswith("the client's own legs (send and delivery) took 40.0 ms on average")
    assert "ttft_before_server_clock" not in m
    # no histogram at all: the legs are still recorded, and still judge the client
    assert server_clock(late, None)["ttft_delivery_ms_mean"] == 40.0 and "client_bound" in server_clock(
        late, None
    )


def test_a_cell_against_the_scripted_server_records_legs_that_add_up_to_its_ttft(
    pytester: pytest.Pytester,
    fake_server,  # noqa: F811
) -> None:
    """The scripted server stamps its first chunk's hand-over and the request's arrival as SGLang
    does: every timed request carries its legs, their means add up to the client's mean TTFT,
    the server's leg covers its script, and the client-bound mark follows the client's own legs
    (its send and the delivery)."""
    srv = fake_server(FAKE_TTFT_MS="40", FAKE_ITL_MS="5", FAKE_ACCEPT="1")
    _project(pytester, HTTP_MATRIX.format(url=srv.url, api="sglang", extra="", conc="[16]", out=8))
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "-p", "no:randomly")
    res.assert_outcomes(passed=1)
    (b,) = _cells(json.loads((pytester.path / "out.json").read_text())).values()
    m = b["extra_info"]
    assert m["ttft_legs_requests"] == m["server_latency"]["ttft_requests"]  # every timed request
    total = m["ttft_intake_ms_mean"] + m["ttft_server_ms_mean"] + m["ttft_delivery_ms_mean"]
    # the client's write, inside the intake (two clocks read µs apart: 50 µs of slack)
    assert 0.0 < m["ttft_send_ms_mean"] <= m["ttft_intake_ms_mean"] + 0.05
    assert total == pytest.approx(m["client_ttft_ms_mean"], abs=0.01)
    assert m["ttft_server_ms_mean"] >= 40.0  # the script's TTFT, from the arrival
    assert m["ttft_intake_ms_mean"] >= -1.0 and m["ttft_delivery_ms_mean"] >= -1.0  # one clock
    own = m["ttft_delivery_ms_mean"] + m["ttft_send_ms_mean"]
    assert ("client_bound" in m) is (own > 2.0 and own > 0.02 * m["client_ttft_ms_mean"]), m.get(
        "client_bound"
    )


def test_legs_judge_only_when_every_request_carries_them_on_one_clock() -> None:
    # 2 of 10 requests stamped: their mean is not the cell's; no judgement by the legs
    recs = [_rec(0.200, 0.060, 0.0005), _rec(0.220, 0.070, 0.0015)]
    recs += [RequestRecord(16, 8, 1.7, ttft_s=1.6) for _ in range(8)]
    m = server_clock(recs, None)
    assert m["ttft_legs_unused"] == "the server's stamps came with 2 of the 10 timed requests"
    assert "ttft_before_server_clock" not in m and "client_bound" not in m
    # a leg that runs backwards: the server's clock is not the client's
    skewed = [_rec(0.200, -0.050, 0.0005), _rec(0.220, -0.040, 0.0015)]
    m = server_clock(skewed, {"ttft_ms_mean": 100.0, "ttft_requests": 2})
    assert m["ttft_legs_unused"].startswith("a leg read -45.0 ms on average")
    # loops that ran late: client-bound by their lag, never "on time ... the server's intake"
    on_time = [_rec(0.200, 0.060, 0.0005), _rec(0.220, 0.070, 0.0015)]
    m = server_clock(
        on_time,
        {"ttft_ms_mean": 140.0, "ttft_requests": 2},
        {"mean_ms": 5.0, "p99_ms": 30.0, "max_ms": 40.0, "ticks": 100},
    )
    assert "client_bound" in m and "ttft_before_server_clock" not in m


def test_an_open_loops_own_queue_is_left_out_of_the_comparison_with_the_server() -> None:
    """A request that waited 250 ms for a slot in the client's open loop: its TTFT as the arriving
    user saw it holds the wait, the server never saw it; against the server's clock, and in the
    legs' sum, the client's TTFT runs from the request's submission."""
    from pytest_specbench.engines.base import with_queue

    queued = [with_queue(_rec(0.042, 0.001, 0.0005, send=0.0002), 0.250) for _ in range(4)]
    assert queued[0].ttft_s == pytest.approx(0.292)
    m = server_clock(queued, {"ttft_ms_mean": 40.5, "ttft_requests": 4})
    assert m["client_ttft_ms_mean"] == pytest.approx(42.0)
    assert "ttft_legs_unused" not in m and "client_bound" not in m and "ttft_before_server_clock" not in m
    # legs that do not add up to the client's TTFT are not the cell's account of it
    off = [
        RequestRecord(16, 8, 0.3, ttft_s=0.2, meta=(("ttft_legs_s", (0.01, 0.1, 0.0005)),)) for _ in range(2)
    ]
    m = server_clock(off, {"ttft_ms_mean": 100.0, "ttft_requests": 2})
    assert (
        m["ttft_legs_unused"] == "the legs add up to 110.5 ms, the client's TTFT from submission is 200.0 ms"
    )
    assert "ttft_before_server_clock" not in m


def test_the_client_takes_the_legs_only_from_a_server_on_its_own_host() -> None:
    from pytest_specbench.engines.httpclient import same_host

    assert same_host("http://127.0.0.1:30000") and same_host("http://localhost:8000/")
    assert not same_host("http://10.1.2.3:30000") and not same_host("https://api.example.com")


def test_the_full_reports_warnings_name_each_client_bound_cell_and_why() -> None:
    from pytest_specbench.report.cell_warnings import warnings

    late = server_clock([_rec(0.200, 0.010, 0.030), _rec(0.220, 0.010, 0.050)], None)
    quick = server_clock(
        [_rec(0.200, 0.060, 0.0005), _rec(0.220, 0.070, 0.0015)], {"ttft_ms_mean": 140.0, "ttft_requests": 2}
    )
    doc = {
        "benchmarks": [{"param": "late-c64", "extra_info": late}, {"param": "quick-c64", "extra_info": quick}]
    }
    got = warnings(doc)
    assert f"warning: late-c64: client-bound TTFT: {late['client_bound']}" in got
    assert f"note: quick-c64: {quick['ttft_before_server_clock']}" in got
    assert not any(w.startswith("warning: quick-c64") for w in got)
