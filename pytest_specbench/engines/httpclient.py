"""HTTP client parts of the server backends: SSE parsing, SGLang ``/generate`` and OpenAI
``/v1/completions`` requests as :class:`RequestRecord`, Prometheus ``/metrics`` deltas.

Streaming goes through aiohttp (what SGLang's and vLLM's own benchmark clients use), imported
only when a server engine starts; its connection pool is unbounded, the cell's concurrency is
the workload's semaphore (the default connector's 100 connections would silently cap a c256
cell). The synchronous calls
(health, metrics, server info, cache flush) use the standard library. The parsers are pure.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import Request, RequestRecord, cached_tokens

# ------------------------------------------------------------------------------ SSE


class SSEParser:
    """Server-sent events, one line at a time: ``data:`` lines are joined until a blank line
    ends the event; comment lines (``: keep-alive``) and other fields are skipped; ``[DONE]``
    ends the stream. A stream that ends without a blank line still yields its last event."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.done = False

    def feed(self, line: str) -> list[str]:
        line = line.rstrip("\r\n")
        if not line:
            return self._flush()
        if line.startswith(":"):
            return []
        field, _, value = line.partition(":")
        if field == "data":
            self.data.append(value[1:] if value.startswith(" ") else value)
        return []

    def close(self) -> list[str]:
        return self._flush()

    def _flush(self) -> list[str]:
        if not self.data:
            return []
        event, self.data = "\n".join(self.data), []
        if event.strip() == "[DONE]":
            self.done = True
            return []
        return [event]


def event_json(data: str, where: str = "the server") -> Any:
    """One SSE event's JSON; a malformed one is a ValueError naming where it came from and
    showing the event (a bare JSONDecodeError says neither)."""
    try:
        return json.loads(data)
    except ValueError as e:
        raise ValueError(f"{where}: malformed server-sent event ({e.msg}): {data[:200]!r}") from None


def sse_events(lines: Iterable[str], where: str = "the server") -> list[dict[str, Any]]:
    """Every JSON event of an SSE stream, in order (pure; what the streaming client does)."""
    p = SSEParser()
    out: list[dict[str, Any]] = []
    for ln in lines:
        out += [event_json(e, where) for e in p.feed(ln)]
        if p.done:
            return out
    return out + [event_json(e, where) for e in p.close()]


class ServerError(RuntimeError):
    """The server answered a request with an error (status, or an error event in the stream)."""


def _check_event(ev: Any) -> dict[str, Any]:
    if not isinstance(ev, dict):
        raise ServerError(f"unexpected event {str(ev)[:200]!r}")
    err = ev.get("error")
    if err:
        msg = err.get("message") if isinstance(err, dict) else err
        raise ServerError(f"server error: {str(msg)[:500]}")
    return ev


# ------------------------------------------------------------------------------ chunk accounting


@dataclass
class StreamState:
    """What a stream said so far: cumulative output tokens, the output ids, SGLang's meta_info."""

    n: int = 0
    ids: list[int] | None = None
    meta: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    approximate: bool = False  # token counts per chunk guessed from text chunks (OpenAI, no usage)
    # SGLang's own wall-clock stamps (meta_info): when its clock started for the request
    # (request_received_ts, in the last chunk) and when it handed the first chunk to its HTTP
    # layer (response_sent_to_client_ts, in the first)
    received_ts: float | None = None
    first_sent_ts: float | None = None

    text: str = ""

    def sglang(self, ev: dict[str, Any]) -> None:
        """A ``/generate`` event: meta_info.completion_tokens and text are cumulative; output_ids
        are cumulative by default and deltas under --incremental-streaming-output."""
        meta = ev.get("meta_info") or {}
        self.meta = meta
        if self.first_sent_ts is None and meta.get("response_sent_to_client_ts") is not None:
            self.first_sent_ts = float(meta["response_sent_to_client_ts"])
        if meta.get("request_received_ts") is not None:
            self.received_ts = float(meta["request_received_ts"])
        n = int(meta.get("completion_tokens", self.n))
        ids = ev.get("output_ids")
        if isinstance(ids, list):
            if len(ids) == n:
                self.ids = [int(i) for i in ids]
            elif self.ids is not None and len(self.ids) + len(ids) == n:
                self.ids += [int(i) for i in ids]
            else:
                self.ids = None
        if isinstance(ev.get("text"), str):
            self.text = ev["text"] if len(ev["text"]) >= len(self.text) else self.text + ev["text"]
        self.n = max(self.n, n)

    def openai(self, ev: dict[str, Any]) -> None:
        """A ``/v1/completions`` chunk. Tokens: the cumulative usage.completion_tokens where the
        server sends usage in every chunk (continuous_usage_stats), else the chunk's token_ids
        (vLLM's return_token_ids), else one per chunk with text (marked approximate); a final
        usage-only chunk (choices: []) sets the total. The text and token ids are collected in
        every case (agentic histories need them)."""
        usage = ev.get("usage")
        choices = ev.get("choices") or []
        counted = False
        if usage and usage.get("completion_tokens") is not None:
            self.usage = usage
            self.n = max(self.n, int(usage["completion_tokens"]))
            counted = True
        if not choices:
            return
        c = choices[0]
        self.text += c.get("text") or ""
        tids = c.get("token_ids")
        if isinstance(tids, list):
            self.ids = (self.ids or []) + [int(i) for i in tids]
            if not counted:
                self.n += len(tids)
        elif c.get("text") and not counted:
            self.n += 1
            self.approximate = True


def record_from(
    request: Request,
    st: StreamState,
    t_chunks: list[tuple[float, int]],
    latency: float,
    sent_wall: float | None = None,
    send_s: float | None = None,
) -> RequestRecord:
    """The request's record; with ``sent_wall`` (time.time() at submission) and the server's two
    stamps, its TTFT in three legs (``ttft_legs_s``): the client's submission to the server's clock
    start, the server's clock start to its first chunk handed to HTTP, and that hand-over to the
    client's read of it (stats/ttft_legs.py). ``send_s`` (``ttft_send_s``): submission to the
    request's body handed to the socket, the client's own part of the first leg."""
    meta = st.meta or {}
    n = st.n
    ids = tuple(st.ids) if st.ids is not None and len(st.ids) == n else ()
    extra: list[tuple[str, Any]] = []
    if st.approximate:
        extra.append(("token_counts", "approximate"))
    if sent_wall is not None and t_chunks and st.received_ts is not None and st.first_sent_ts is not None:
        read = sent_wall + t_chunks[0][0]
        legs = (st.received_ts - sent_wall, st.first_sent_ts - st.received_ts, read - st.first_sent_ts)
        extra.append(("ttft_legs_s", tuple(round(x, 6) for x in legs)))
    if send_s is not None and t_chunks:
        extra.append(("ttft_send_s", round(send_s, 6)))
    prompt = meta.get("prompt_tokens", (st.usage or {}).get("prompt_tokens"))
    return RequestRecord(
        prompt_tokens=len(request.input_ids),
        output_tokens=n,
        latency_s=latency,
        ttft_s=t_chunks[0][0] if t_chunks else None,
        verify_steps=meta.get("spec_verify_ct"),
        accept_histogram=tuple(meta.get("spec_accept_histogram") or ()),
        cached_tokens=cached_tokens(meta, st.usage),
        chunks=tuple(t_chunks),
        output_ids=ids,
        output_text=st.text,
        tag=request.tag,
        meta=tuple(extra),
        engine_prompt_tokens=int(prompt) if prompt is not None else None,
        # a request that got fewer (or more) tokens than it asked for measured something else
        error=None
        if n == request.max_new_tokens
        else f"asked for {request.max_new_tokens} output tokens, the server returned {n}",
    )


# ------------------------------------------------------------------------------ requests


def sglang_payload(request: Request) -> dict[str, Any]:
    return {
        "input_ids": list(request.input_ids),
        "sampling_params": {
            "temperature": request.temperature,
            "max_new_tokens": request.max_new_tokens,
            "ignore_eos": True,
        },
        "stream": request.stream,
    }


def openai_payload(request: Request, model: str) -> dict[str, Any]:
    """Token-id prompt (vLLM and SGLang take a list of ids as ``prompt``), exactly
    max_new_tokens (ignore_eos), usage in every chunk where the server supports it."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(request.input_ids),
        "max_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "ignore_eos": True,
        "stream": request.stream,
        "return_token_ids": True,
    }
    if request.stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return body


def same_host(url: str) -> bool:
    """Whether ``url``'s server runs on this host (loopback, or this host's own name): the one
    clock its stamps and the client's times share."""
    import socket
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        return True
    return host in {socket.gethostname().lower(), socket.getfqdn().lower()}


class Client:
    """One aiohttp session per engine, on the engine's event loop, pooled to the concurrency."""

    def __init__(self, base_url: str, api: str, headers: Mapping[str, str], model: str = ""):
        self.base = base_url.rstrip("/")
        self.api = api
        self.headers = dict(headers)
        self.model = model
        self.session: Any = None
        # TTFT's legs need the server's stamps on this host's clock: a server on this host only
        self.same_host = same_host(self.base)

    async def ensure(self) -> Any:
        """The session, created on first use on the running loop. Its pool is unbounded
        (limit=0): the workload's own semaphore holds the cell's concurrency, where aiohttp's
        default 100 connections would silently cap a c256 cell at 100 in flight."""
        try:
            import aiohttp
        except ImportError:
            raise ImportError(
                "the http and sglang-server backends stream through aiohttp: pip install aiohttp "
                '(or pip install -e ".[server]")'
            ) from None

        if self.session is None:
            conn = aiohttp.TCPConnector(limit=0, limit_per_host=0)
            # no total timeout: the cell's own limit (base.guard) bounds every request
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
            self.session = aiohttp.ClientSession(
                connector=conn,
                timeout=timeout,
                headers=self.headers,
                read_bufsize=2**20,
                trace_configs=[_send_trace(aiohttp)],
            )
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def generate(self, request: Request) -> RequestRecord:
        session = await self.ensure()
        if self.api == "openai":
            url, body, feed = f"{self.base}/v1/completions", openai_payload(request, self.model), "openai"
        else:
            url, body, feed = f"{self.base}/generate", sglang_payload(request), "sglang"
        st = StreamState()
        t_chunks: list[tuple[float, int]] = []
        sent: dict[str, float] = {}  # the body's hand-over to the socket (_send_trace)
        t0 = time.perf_counter()  # submission, as SGLang's and vLLM's benchmark clients count
        wall = time.time()  # the same instant on the clock SGLang stamps its meta_info with
        async with session.post(url, json=body, trace_request_ctx=sent) as resp:
            if resp.status != 200:
                text = (await resp.text())[:500]
                raise ServerError(f"POST {url}: HTTP {resp.status}: {text}")
            if not request.stream or "text/event-stream" not in resp.headers.get("Content-Type", ""):
                # not streamed (asked so, or a server that ignored stream: true): one JSON answer
                getattr(st, feed)(_check_event(await resp.json(content_type=None)))
                return record_from(request, st, [], time.perf_counter() - t0)
            async for ev in _events(resp.content, f"POST {url}"):
                now = time.perf_counter() - t0
                before = st.n
                getattr(st, feed)(_check_event(ev))
                if st.n > before and (feed == "sglang" or (ev.get("choices") or [])):
                    t_chunks.append((now, st.n))
        if t_chunks and t_chunks[-1][1] != st.n:  # a final usage chunk corrected the count
            t_chunks[-1] = (t_chunks[-1][0], st.n)
        return record_from(
            request,
            st,
            t_chunks,
            time.perf_counter() - t0,
            sent_wall=wall if self.same_host else None,
            send_s=sent["at"] - t0 if "at" in sent else None,
        )


def _send_trace(aiohttp: Any) -> Any:
    """A trace that notes, in the request's ``trace_request_ctx`` dict, when its last body chunk
    was handed to the socket (aiohttp calls it just before the write): the client's send done."""

    async def chunk_sent(_session: Any, ctx: Any, _params: Any) -> None:
        if isinstance(ctx.trace_request_ctx, dict):
            ctx.trace_request_ctx["at"] = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(chunk_sent)
    return trace


async def _events(content: Any, where: str = "the server") -> AsyncIterator[Any]:
    p = SSEParser()
    async for raw in content:
        for e in p.feed(raw.decode("utf-8", errors="replace")):
            yield event_json(e, where)
        if p.done:
            return
    for e in p.close():
        yield event_json(e, where)


# ------------------------------------------------------------------------------ synchronous calls


def http_call(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    method: str = "GET",
    body: Any = None,
    timeout: float = 10.0,
) -> tuple[int, str]:
    """(status, body text) of one request; status 0 with the reason when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(getattr(e, "reason", e))


# ------------------------------------------------------------------------------ Prometheus

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus text exposition: (name, sorted labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = _SAMPLE.match(ln)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = v
    return out


def counter_sums(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """Counters summed over labels (model, engine, ...), except the per-position counter,
    kept per ``position``: ``name`` or ``name[position]``."""
    out: dict[str, float] = {}
    for (name, labels), v in samples.items():
        if not name.endswith("_total"):
            continue
        pos = dict(labels).get("position")
        key = f"{name}[{pos}]" if pos is not None and "per_pos" in name else name
        out[key] = out.get(key, 0.0) + v
    return out


# latency histograms (seconds) whose _sum / _count give the server's own mean over a window
SERVER_LATENCY = {
    "ttft": ("sglang:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
    "e2e": ("sglang:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"),
}


def histogram_sums(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """The latency histograms' ``_sum`` and ``_count`` samples, summed over labels."""
    names = {n for pair in SERVER_LATENCY.values() for n in pair}
    out: dict[str, float] = {}
    for (name, _labels), v in samples.items():
        base, _, tail = name.rpartition("_")
        if base in names and tail in ("sum", "count"):
            out[name] = out.get(name, 0.0) + v
    return out


def latency_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """The server's mean TTFT and end-to-end latency over a window (ms), from its histograms'
    sums and counts before and after, and how many requests each counted."""
    out: dict[str, Any] = {}
    for what, names in SERVER_LATENCY.items():
        for name in names:
            n = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
            if f"{name}_count" in after and n > 0:
                total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
                out[f"{what}_ms_mean"] = total / n * 1e3
                out[f"{what}_requests"] = int(round(n))
                break
    return out


SERVER_SPEC_COUNTERS = (
    # vLLM (v1): drafts, draft tokens, accepted tokens, accepted per draft position
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    # SGLang: verify passes and generated tokens (accept length = their ratio)
    "sglang:spec_verify_calls_total",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
)


def spec_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """What the server counted between two scrapes: the counters' deltas, the accept length
    they give (vLLM: 1 + accepted / drafts; SGLang: generated tokens / verify passes) and the
    acceptance rate by draft position (vLLM). Server-scoped: every request the server served
    in the window is in it."""
    keys = [k for k in after if k in SERVER_SPEC_COUNTERS or "spec_decode_num_accepted_tokens_per_pos" in k]
    d = {k: after[k] - before.get(k, 0.0) for k in sorted(keys)}
    out: dict[str, Any] = {"deltas": d, "scope": "server"}
    drafts = d.get("vllm:spec_decode_num_drafts_total")
    if drafts:
        out["accept_length"] = 1 + d.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) / drafts
        per_pos = sorted(
            (int(k.rsplit("[", 1)[1].rstrip("]")), v) for k, v in d.items() if "per_pos" in k and "[" in k
        )
        if per_pos:
            out["accept_rate_by_position"] = [v / drafts for _, v in per_pos]
        out["requests"] = d.get("vllm:request_success_total")
    verify = d.get("sglang:spec_verify_calls_total")
    if verify:
        out["accept_length"] = d.get("sglang:generation_tokens_total", 0.0) / verify
        out["requests"] = d.get("sglang:num_requests_total")
    return out
