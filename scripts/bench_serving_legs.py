"""SGLang's own bench_serving, with TTFT's three legs recorded for each of its requests.

    python scripts/bench_serving_legs.py --legs-out LEGS.jsonl [--legs-reps N] [--legs-keep-alive] \\
        [--legs-port PORT] <python -m sglang.bench_serving's own arguments>

The third clock beside the plugin's client and the server's histogram: bench_serving's request
function, unchanged, wrapped to note the wall time of each submission and, from the first
streamed chunk that carries them, SGLang's ``request_received_ts`` and
``response_sent_to_client_ts`` (meta_info) with the wall time bench_serving read that chunk. So
bench_serving's TTFT splits into the same legs as the plugin's (stats/ttft_legs.py): intake
(submission to SGLang's tokenizer manager taking the request), server (to the first chunk handed
to its HTTP layer) and delivery (to the client's read); and, as the plugin times it, the
client's send (submission to the body handed to the socket: an aiohttp trace on its session).

``--legs-reps N`` runs bench_serving's benchmark N times in this one process (each pass its own
warm-up, as N separate runs would), the server's TTFT histogram read around each pass
(``--legs-port``, default 30123). ``--legs-keep-alive`` gives every request of a pass one shared
keep-alive aiohttp session, where bench_serving opens a session (a connection) per request: the
one difference between its client and the plugin's connection handling, measured, not assumed.
Each pass appends one JSON line to LEGS.jsonl: the mode, the concurrency, each request's legs,
the histogram's sum and count before and after. bench_serving's own TTFT is its first chunk with
non-empty text (0 where none had any: a dummy model's ids can all decode to nothing); the legs
run to the first chunk, as the plugin's client reads TTFT. bench_serving's own JSON goes where its
``--output-file`` says, tagged with the mode (``--tag``).

Runs on a host with SGLang installed (the GPU host); not imported by the plugin or its tests.
"""

from __future__ import annotations

import argparse
import contextvars
import copy
import json
import sys
import time
import urllib.request

_REC: contextvars.ContextVar[dict | None] = contextvars.ContextVar("legs_rec", default=None)


def _scrape(port: int) -> list[float]:
    from pytest_specbench.engines.httpclient import histogram_sums, parse_prometheus

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    h = histogram_sums(parse_prometheus(text))
    return [
        h.get("sglang:time_to_first_token_seconds_sum", 0.0),
        h.get("sglang:time_to_first_token_seconds_count", 0.0),
    ]


class _OrjsonNoting:
    """bench_serving's ``orjson``, noting the first chunk's SGLang stamps for the request whose
    task parses it (one task per request: the context variable is that request's record)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def loads(self, data):
        out = self._real.loads(data)
        rec = _REC.get()
        if rec is not None and isinstance(out, dict):
            meta = out.get("meta_info") or {}
            # the first chunk's hand-over and its read; the request's arrival (SGLang sends
            # request_received_ts with its last chunk)
            if "read" not in rec and meta.get("response_sent_to_client_ts") is not None:
                rec["read"] = time.time()
                rec["first_sent"] = meta["response_sent_to_client_ts"]
            if meta.get("request_received_ts") is not None:
                rec["received"] = meta["request_received_ts"]
        return out


class _KeptSession:
    """One aiohttp session for every request of a pass; ``async with`` leaves it open."""

    def __init__(self, session):
        self.session = session

    async def __aenter__(self):
        return self.session

    async def __aexit__(self, *exc):
        return False


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--legs-out", required=True)
    ap.add_argument("--legs-reps", type=int, default=1)
    ap.add_argument("--legs-keep-alive", action="store_true")
    ap.add_argument("--legs-port", type=int, default=30123)
    mine, rest = ap.parse_known_args(argv)
    mode = "keep-alive" if mine.legs_keep_alive else "per-request"

    import aiohttp
    import sglang.benchmark.serving as S

    S.orjson = _OrjsonNoting(S.orjson)
    real_request = S.ASYNC_REQUEST_FUNCS["sglang"]
    records: list[dict] = []

    async def noted(request_func_input, pbar=None):
        rec: dict = {"sent": time.time()}
        token = _REC.set(rec)
        try:
            out = await real_request(request_func_input=request_func_input, pbar=pbar)
        finally:
            _REC.reset(token)
        rec["ttft"] = getattr(out, "ttft", None)
        rec["ok"] = bool(getattr(out, "success", False))
        records.append(rec)
        return out

    S.ASYNC_REQUEST_FUNCS["sglang"] = noted

    async def body_sent(_session, _ctx, _params):  # the client's send done, as the plugin's client times it
        rec = _REC.get()
        if rec is not None:
            rec["body_sent"] = time.time()

    def traced() -> list:
        t = aiohttp.TraceConfig()
        t.on_request_chunk_sent.append(body_sent)
        return [t]

    def per_request(**kw):  # bench_serving's own session (its timeout and buffer), traced
        timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
        return aiohttp.ClientSession(timeout=timeout, read_bufsize=10 * 1024**2, trace_configs=traced(), **kw)

    S._create_bench_client_session = per_request
    if mine.legs_keep_alive:
        made_for: dict = {}

        def kept():
            import asyncio

            loop = asyncio.get_running_loop()
            if made_for.get("loop") is not loop:  # one session per pass (each pass its own loop)
                pool = aiohttp.TCPConnector(limit=0, limit_per_host=0)  # unbounded, kept alive
                made_for.update(loop=loop, session=per_request(connector=pool))
            return _KeptSession(made_for["session"])

        S._create_bench_client_session = kept

    real_run = S.run_benchmark

    def run_reps(args):
        args.tag = args.tag or mode
        for _ in range(mine.legs_reps):
            records.clear()
            before = _scrape(mine.legs_port)
            real_run(copy.deepcopy(args))
            after = _scrape(mine.legs_port)
            line = {
                "mode": mode,
                "tag": args.tag,
                "max_concurrency": args.max_concurrency,
                "before": before,
                "after": after,
                "requests": [dict(r) for r in records],
            }
            with open(mine.legs_out, "a") as f:
                f.write(json.dumps(line) + "\n")

    S.run_benchmark = run_reps
    sys.argv = [sys.argv[0], *rest]
    S.cli_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
