"""FakeServer: a scripted-timing HTTP/1.1 server for the server backends' tests (plain asyncio).

It speaks SGLang's native API (/health, /get_server_info, /generate, /flush_cache) and the
OpenAI one (/v1/models, /v1/completions, /reset_prefix_cache), streams SSE on a fixed schedule
and keeps Prometheus counters (/metrics) in vLLM's and SGLang's names. Run as a script, it takes
``sglang.launch_server``'s flags (unknown ones ignored), so the ``sglang-server`` backend can
launch it. The script, from the environment:

- FAKE_TTFT_MS (default 50): first chunk this long after the request arrived;
- FAKE_HEADERS_MS (default 0): the response headers this long after the request arrived (a
  server that answers its headers late, as one that queues the request does);
- FAKE_TTFT_SPREAD_MS (default 0): the first chunks of requests that arrive together spread
  over this long (the n-th request's TTFT is FAKE_TTFT_MS + (n mod 16) / 16 x this), as a
  server's chunked prefill returns a burst's first tokens over several steps;
- FAKE_SPIN_MS (default 2): how long before each scheduled time the server stops sleeping and
  yields in a loop (precise times, one core busy while any request waits so);
- FAKE_ITL_MS (default 10): per token; a chunk of k tokens follows the previous one by k x this;
- tokens per chunk = accept length: --speculative-num-steps + 1 when speculating, else 1
  (FAKE_ACCEPT overrides); verify steps = ceil(tokens / accept length);
- FAKE_DIE_AFTER=N: the process exits (code 3) in the middle of the N-th /generate stream;
- FAKE_CHILD=1: spawns a child (sleep 600) into its session at start;
- FAKE_API_KEY: every request must carry "Authorization: Bearer <it>" (else 401);
- FAKE_NO_RESET=1 / FAKE_NO_FLUSH=1: /reset_prefix_cache / /flush_cache answer 404;
- FAKE_START_S: seconds before /health answers;
- FAKE_SHORT=1: every request gets half the tokens it asked for;
- FAKE_SEEN_FILE: every request's Authorization header and path appended (key-leak checks).
/fake/stats answers the peak number of requests in flight and the request count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

TRACE: list[tuple[float, float]] | None = [] if os.environ.get("FAKE_TRACE") else None


class FakeServer:
    def __init__(self, accept: int, ttft_ms: float, itl_ms: float):
        self.accept = accept
        self.ttft = ttft_ms / 1e3
        self.itl = itl_ms / 1e3
        self.spread = float(os.environ.get("FAKE_TTFT_SPREAD_MS", "0")) / 1e3
        self.in_flight = 0
        self.peak = 0
        self.generates = 0
        self.counters: dict[str, float] = {
            "vllm:spec_decode_num_drafts_total": 0,
            "vllm:spec_decode_num_draft_tokens_total": 0,
            "vllm:spec_decode_num_accepted_tokens_total": 0,
            "vllm:generation_tokens_total": 0,
            "vllm:request_success_total": 0,
            "sglang:spec_verify_calls_total": 0,
            "sglang:generation_tokens_total": 0,
            "sglang:num_requests_total": 0,
        }
        self.per_pos = [0.0] * max(accept - 1, 0)
        # SGLang's latency histograms' sums and counts, from the actual first and last chunk times
        self.hist: dict[str, float] = {
            "sglang:time_to_first_token_seconds_sum": 0.0,
            "sglang:time_to_first_token_seconds_count": 0.0,
            "sglang:e2e_request_latency_seconds_sum": 0.0,
            "sglang:e2e_request_latency_seconds_count": 0.0,
        }
        self.die_after = int(os.environ.get("FAKE_DIE_AFTER", "0"))
        self.key = os.environ.get("FAKE_API_KEY")
        self.seen = os.environ.get("FAKE_SEEN_FILE")
        self.ready_at = time.monotonic() + float(os.environ.get("FAKE_START_S", "0"))

    # --------------------------------------------------------------- helpers
    def schedule(self, n: int, nth: int = 0) -> list[tuple[float, int]]:
        """(seconds after arrival, cumulative tokens) of each chunk of the ``nth`` request."""
        out, t, done = [], self.ttft + (nth % 16) / 16 * self.spread, 0
        while done < n:
            k = min(self.accept, n - done)
            if done:
                t += k * self.itl
            done += k
            out.append((t, done))
        return out

    def count(self, n: int) -> tuple[int, list[int]]:
        steps = math.ceil(n / self.accept) if n else 0
        hist = [0] * self.accept
        left = n
        for _ in range(steps):
            k = min(self.accept, left)
            hist[k - 1] += 1
            left -= k
        c = self.counters
        c["vllm:spec_decode_num_drafts_total"] += steps if self.accept > 1 else 0
        c["vllm:spec_decode_num_draft_tokens_total"] += steps * (self.accept - 1)
        c["vllm:spec_decode_num_accepted_tokens_total"] += (n - steps) if self.accept > 1 else 0
        for i in range(len(self.per_pos)):
            self.per_pos[i] += sum(hist[i + 1 :])
        c["vllm:generation_tokens_total"] += n
        c["vllm:request_success_total"] += 1
        c["sglang:spec_verify_calls_total"] += steps if self.accept > 1 else 0
        c["sglang:generation_tokens_total"] += n
        c["sglang:num_requests_total"] += 1
        return steps, hist

    # --------------------------------------------------------------- HTTP/1.1
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One keep-alive connection: requests in turn, answered as the script says. A plain
        asyncio server: parsing a request takes far less than the client spends sending it, so
        a c256 burst does not queue here and the script's times are what the client sees."""
        proto = writer.transport.get_protocol()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                # the request's clock starts when its first bytes reached this process (the loop's
                # read callback), not when this coroutine got to them: a burst of requests queues
                # here, and that queue is the server's, as SGLang's own stamp is taken on arrival
                t0 = getattr(proto, "arrived", None) or time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                n = int(headers.get("content-length", "0"))
                body = await reader.readexactly(n) if n else b""
                if isinstance(proto, _Stamped):
                    proto.arrived = None  # the next request's first bytes start its clock
                await self.route(writer, t0, method, path.split("?", 1)[0], headers, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def route(
        self, w: asyncio.StreamWriter, t0: float, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> None:
        auth = headers.get("authorization", "")
        if self.seen:
            with open(self.seen, "a") as f:
                f.write(f"{path} {auth}\n")
        if self.key and auth != f"Bearer {self.key}":
            return await _send(w, 401, {"error": {"message": "invalid API key"}})
        if path == "/health":
            if time.monotonic() < self.ready_at:
                return await _send(w, 503, "starting")
            return await _send(w, 200, "ok")
        if path == "/get_server_info":
            return await _send(w, 200, {"fake": True, "max_total_num_tokens": 100000, "accept": self.accept})
        if path == "/v1/models":
            return await _send(w, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        if path == "/flush_cache":
            if os.environ.get("FAKE_NO_FLUSH"):
                return await _send(w, 404, "Not Found")
            return await _send(w, 200, "Cache flushed.")
        if path == "/reset_prefix_cache":
            return (
                await _send(w, 404, "Not Found")
                if os.environ.get("FAKE_NO_RESET")
                else await _send(w, 200, "")
            )
        if path == "/fake/trace":
            return await _send(w, 200, TRACE or [])
        if path == "/fake/stats":
            return await _send(w, 200, {"peak_in_flight": self.peak, "generates": self.generates})
        if path == "/metrics":
            return await _send(w, 200, self.metrics_text())
        if path in ("/generate", "/v1/completions") and method == "POST":
            req = json.loads(body)
            if path == "/generate":
                ids, n = (
                    list(req["input_ids"]),
                    int((req.get("sampling_params") or {}).get("max_new_tokens", 16)),
                )
                api = "sglang"
            else:
                ids, n, api = list(req["prompt"]), int(req.get("max_tokens", 16)), "openai"
            return await self._serve(w, t0, ids, n, bool(req.get("stream")), api)
        return await _send(w, 404, "Not Found")

    def metrics_text(self) -> str:
        lines = []
        for name, v in self.counters.items():
            lines += [f"# TYPE {name.removesuffix('_total')} counter", f'{name}{{model_name="fake"}} {v}']
        for i, v in enumerate(self.per_pos):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="fake",position="{i}"}} {v}'
            )
        lines.append('sglang:spec_accept_length{model_name="fake"} 9.99')  # a gauge: never diffed
        for name, v in self.hist.items():
            lines.append(f'{name}{{model_name="fake"}} {v}')
        return "\n".join(lines) + "\n"

    async def _serve(
        self, w: asyncio.StreamWriter, t0: float, ids: list[int], n: int, stream: bool, api: str
    ) -> None:
        self.generates += 1
        nth = self.generates
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if os.environ.get("FAKE_SHORT"):  # a server that stops early (a length cap, EOS honoured)
            n = max(1, n // 2)
        out = [(ids[-1] + 1 + i) % 1000 if ids else i for i in range(n)]
        sched = self.schedule(n, nth)
        steps, hist = self.count(n)
        try:
            if not stream:
                await _sleep_until(t0 + (sched[-1][0] if sched else 0))
                await _send(w, 200, self._final(api, ids, out, n, steps, hist))
                self._latency("time_to_first_token", t0)
                return self._latency("e2e_request_latency", t0)
            await _sleep_until(t0 + float(os.environ.get("FAKE_HEADERS_MS", "0")) / 1e3)
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            _chunk(w, b": keep-alive\n\n")
            await w.drain()
            prev = 0
            for j, (at, cum) in enumerate(sched):
                await _sleep_until(t0 + at)
                if self.die_after and nth == self.die_after and j == 1:
                    os._exit(3)
                if api == "sglang":
                    ev: dict[str, Any] = {
                        "text": "",
                        "output_ids": out[:cum],
                        "meta_info": {
                            "prompt_tokens": len(ids),
                            "completion_tokens": cum,
                            "cached_tokens": 0,
                            "spec_verify_ct": j + 1 if self.accept > 1 else 0,
                            **({"spec_accept_histogram": hist} if self.accept > 1 and cum == n else {}),
                            # SGLang's wall-clock stamps: the first chunk's hand-over to HTTP, and
                            # (in the last chunk) where its clock started, the request's arrival
                            **({"response_sent_to_client_ts": time.time()} if j == 0 else {}),
                            **({"request_received_ts": _wall(t0)} if cum == n else {}),
                        },
                    }
                else:
                    ev = {
                        "object": "text_completion",
                        "choices": [{"index": 0, "text": "x" * (cum - prev), "token_ids": out[prev:cum]}],
                    }
                _chunk(w, b"data: " + json.dumps(ev).encode() + b"\n\n" + (b": ping\n\n" if j == 0 else b""))
                await w.drain()
                if j == 0:
                    self._latency("time_to_first_token", t0)
                if j == 0 and TRACE is not None:
                    TRACE.append((t0, time.monotonic()))
                prev = cum
            if api == "openai":
                usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
                _chunk(w, b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            _chunk(w, b"data: [DONE]\n\n")
            w.write(b"0\r\n\r\n")
            await w.drain()
            self._latency("e2e_request_latency", t0)
        finally:
            self.in_flight -= 1

    def _latency(self, name: str, t0: float) -> None:
        """One observation of a latency histogram: now (the chunk written) since the request came."""
        self.hist[f"sglang:{name}_seconds_sum"] += time.monotonic() - t0
        self.hist[f"sglang:{name}_seconds_count"] += 1

    def _final(self, api: str, ids: list[int], out: list[int], n: int, steps: int, hist: list[int]) -> Any:
        if api == "sglang":
            return {
                "text": "",
                "output_ids": out,
                "meta_info": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": n,
                    "cached_tokens": 0,
                    "spec_verify_ct": steps if self.accept > 1 else 0,
                    **({"spec_accept_histogram": hist} if self.accept > 1 else {}),
                },
            }
        return {
            "choices": [{"index": 0, "text": "x" * n, "token_ids": out}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n},
        }


def _wall(t: float) -> float:
    """A time.monotonic() instant on the wall clock (time.time()), as SGLang stamps its meta_info."""
    return t + time.time() - time.monotonic()


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: the kernel's receive time per read


class _Stamped(asyncio.StreamReaderProtocol):
    """A connection that notes when a request's first bytes arrived (``arrived``, on
    time.monotonic): the kernel's receive time of the bytes (SO_TIMESTAMPNS, read with recvmsg
    by this protocol's own reader in place of the transport's), so that a server process kept
    off the CPU when a request came still starts its clock when it came; where the kernel gives
    no stamp, when this process read them."""

    arrived: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.sock = None
        raw = transport.get_extra_info("socket")
        try:
            raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.sock = socket.socket(fileno=os.dup(raw.fileno()))
            self.sock.setblocking(False)
            transport.pause_reading()  # type: ignore[attr-defined]
            asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)
        except (OSError, AttributeError):
            self.sock = None

    def _readable(self) -> None:
        assert self.sock is not None
        try:
            data, anc, _flags, _addr = self.sock.recvmsg(2**16, 256)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, anc = b"", []
        if not data:
            self._unread()
            self.eof_received()
            return
        if self.arrived is None:
            self.arrived = time.monotonic()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                    sec, ns = struct.unpack("qq", raw[:16])
                    self.arrived = min(self.arrived, sec + ns / 1e9 - (time.time() - time.monotonic()))
        self.data_received(data)

    def _unread(self) -> None:
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._unread()
        super().connection_lost(exc)


def _chunk(w: asyncio.StreamWriter, data: bytes) -> None:
    w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def _send(w: asyncio.StreamWriter, status: int, body: Any) -> None:
    if isinstance(body, str):
        data, ctype = body.encode(), "text/plain"
    else:
        data, ctype = json.dumps(body).encode(), "application/json"
    w.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
    )
    await w.drain()


SPIN_S = float(os.environ.get("FAKE_SPIN_MS", "2")) / 1e3


async def _sleep_until(t: float) -> None:
    """Wake at ``t`` to well under a millisecond: the event loop's timers wake up to 1 ms late
    (epoll's millisecond timeout), so the last FAKE_SPIN_MS (default 2) are spent yielding to
    other requests. That spin holds a core while any request is within it: FAKE_SPIN_MS=0 gives
    the core to the client instead (the schedule's times are then up to 1 ms late, and the
    server's own stamps say when each chunk really left)."""
    d = t - time.monotonic()
    if d > SPIN_S:
        await asyncio.sleep(d - SPIN_S)
    while time.monotonic() < t:
        await asyncio.sleep(0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    args, _unknown = p.parse_known_args(argv)
    accept = 1
    if args.speculative_algorithm:
        accept = (args.speculative_num_steps or (args.speculative_num_draft_tokens or 4) - 1) + 1
    accept = int(os.environ.get("FAKE_ACCEPT", accept))
    if os.environ.get("FAKE_CHILD"):
        subprocess.Popen(["sleep", "600"])
    server = FakeServer(
        accept, float(os.environ.get("FAKE_TTFT_MS", "50")), float(os.environ.get("FAKE_ITL_MS", "10"))
    )
    print(f"fake server on {args.host}:{args.port}, accept {accept}", flush=True)

    async def serve() -> None:
        def connection() -> _Stamped:
            return _Stamped(asyncio.StreamReader(limit=2**16), server.handle)

        loop = asyncio.get_running_loop()
        srv = await loop.create_server(connection, args.host, args.port, backlog=1024)
        async with srv:
            await srv.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1:])
