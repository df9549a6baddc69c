"""The workloads section of the matrix file: its keys, the per-kind axes (request rate,
scenarios, categories and questions, checked against the fixtures now, not when a cell runs),
SLOs and the frozen :class:`Workload`. Every error names the file, the key path and what is
allowed. No pytest, no heavy imports."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .cells import (
    Method,
    Workload,
    freeze,
)
from .checks import Ctx, did_you_mean
from .workload_kinds import PROMPT_SOURCES, TRACE_KEYS, WORKLOAD_KINDS, kind_of, kinds, own_keys

WORKLOAD_KEYS = (
    "kind",
    "concurrency",
    "output_tokens",
    "context_tokens",
    "prompt_tokens",
    "requests",
    "waves",
    "rounds",
    "max_rounds",
    "precision",
    "warmup",
    "timeout_s",
    "methods",
    "options",
    "request_rate",
    "scenarios",
    "categories",
    "questions",
    "temperature",
    "slo",
    "trace",
    "speed",
    "cut",
    "block_tokens",
    "max_output_tokens",
    "chat_template",
    "enable_thinking",
)
MAX_REQUEST_RATE = 1e6  # requests per second a client can offer
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a cell's time limit: a week at most
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_s")
OPTION_KEYS = ("stream", "client_processes")
MAX_CLIENT_PROCESSES = 256  # client processes a round of the server backends is sent from
# what a kind whose prompts are not exact ones (its declaration's prompts) does not use
IGNORED_UNLESS_EXACT = ("context_tokens", "prompt_tokens")
TRACE_CONCURRENCY = 256  # a trace's default cap on requests in flight


def fraction(cx: Ctx, value: Any, key: str, example: str) -> float:
    """A fraction strictly between 0 and 0.5 (a precision target, an indifference zone)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 0.5:
        raise cx.err(key, f"expected a fraction between 0 and 0.5, e.g. {example}; got {value!r}")
    return float(value)


def _str_list(cx: Ctx, value: Any, key: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise cx.err(key, "expected a non-empty list of names")
    return tuple(cx.string(v, f"{key}[{i}]") for i, v in enumerate(items))


def _number_axis(cx: Ctx, raw: Any, key: str, what: str, most: float, noun: str) -> tuple[float, ...]:
    """A number or a list of them (an axis): each > 0 and <= ``most``, none twice."""
    vals = raw if isinstance(raw, list) else [raw]
    for i, v in enumerate(vals):
        cx.pos_number(v, f"{key}[{i}]", what, most)
    if len({float(v) for v in vals}) != len(vals):
        raise cx.err(key, f"lists a {noun} twice: {vals!r}")
    return tuple(float(v) for v in vals)


def _workload_axes(cx: Ctx, key: str, kind: str, d: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """request_rate / scenarios / categories+questions: checked against the fixtures now."""
    from ..inputs import prompts

    kw: dict[str, Any] = {}
    spec = kind_of(kind)
    for k, takes in own_keys().items():  # a kind's own keys (its declaration's keys), trace's last
        if k not in TRACE_KEYS and d.get(k) is not None and kind not in takes:
            raise cx.err(f"{key}.{k}", f"only for workload kind {' or '.join(takes)}; this one is {kind!r}")
    if d.get("request_rate") is not None:
        kw["request_rate"] = _number_axis(
            cx, d["request_rate"], f"{key}.request_rate", "requests per second", MAX_REQUEST_RATE, "rate"
        )
    if d.get("temperature") is not None:
        temps = d["temperature"] if isinstance(d["temperature"], list) else [d["temperature"]]
        if not temps:
            raise cx.err(f"{key}.temperature", "expected a non-empty list of temperatures (0 = greedy)")
        for i, t in enumerate(temps):
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 10:
                raise cx.err(
                    f"{key}.temperature[{i}]",
                    f"expected a sampling temperature in [0, 10] (0 = greedy); got {t!r}",
                )
        if len(set(temps)) != len(temps):
            raise cx.err(f"{key}.temperature", f"lists a temperature twice: {temps!r}")
        kw["temperature"] = tuple(float(t) for t in temps)
    if spec.prompts == "scenario":
        names = (
            _str_list(cx, d["scenarios"], f"{key}.scenarios")
            if d.get("scenarios")
            else prompts.scenario_names()
        )
        names = tuple(
            str((base_dir / n).resolve())
            if n.endswith((".yaml", ".yml")) and not Path(n).is_absolute()
            else n
            for n in names
        )
        for i, n in enumerate(names):
            try:
                prompts.load_scenario(n)
            except (OSError, ValueError) as e:
                raise cx.err(
                    f"{key}.scenarios[{i}]", f"{e}; built-in scenarios: {', '.join(prompts.scenario_names())}"
                ) from None
        kw["scenarios"] = names
    if spec.prompts == "questions":
        qpath = None
        if d.get("questions") is not None:
            qpath = cx.string(d["questions"], f"{key}.questions")
            if not Path(qpath).is_absolute():
                qpath = str((base_dir / qpath).resolve())
            kw["questions"] = qpath
        try:
            questions = prompts.load_questions(qpath)
        except (OSError, ValueError) as e:
            raise cx.err(f"{key}.questions", str(e)) from None
        have = tuple(dict.fromkeys(q.category for q in questions))
        cats = _str_list(cx, d["categories"], f"{key}.categories") if d.get("categories") else have
        for i, c in enumerate(cats):
            if c not in have:
                raise cx.err(
                    f"{key}.categories[{i}]",
                    f"{c!r} is not a category of "
                    f"{qpath or 'the built-in prompt set'}; it has: {', '.join(have)}",
                )
        kw["categories"] = cats
    return kw


def workload(cx: Ctx, name: str, raw: Any, methods: dict[str, Method], base_dir: Path) -> Workload:
    key = f"workloads.{name}"
    d = cx.mapping(raw, key, WORKLOAD_KEYS)
    kind = cx.choice(d.get("kind", name), f"{key}.kind", tuple(WORKLOAD_KINDS))
    spec = kind_of(kind)
    kw: dict[str, Any] = {"name": name, "kind": kind}
    for k, why in spec.refuses:
        if d.get(k) is not None:
            raise cx.err(f"{key}.{k}", f"not for workload kind {kind}: {why}")
    for k in ("concurrency", "output_tokens", "context_tokens"):
        if d.get(k) is not None:
            kw[k] = cx.int_list(d[k], f"{key}.{k}")
    for k in ("prompt_tokens", "requests", "waves", "rounds"):
        if d.get(k) is not None:
            kw[k] = cx.pos_int(d[k], f"{key}.{k}")
    if d.get("max_rounds") is not None:
        kw["max_rounds"] = cx.pos_int(d["max_rounds"], f"{key}.max_rounds")
        if kw["max_rounds"] < kw.get("rounds", Workload.rounds):
            raise cx.err(
                f"{key}.max_rounds",
                f"{kw['max_rounds']} is below rounds ({kw.get('rounds', Workload.rounds)}): give "
                "max_rounds >= rounds (rounds run always, then more up to max_rounds until decided)",
            )
    if d.get("precision") is not None:
        kw["precision"] = fraction(cx, d["precision"], f"{key}.precision", "0.02 (a half-width of ±2 %)")
        if kw.get("max_rounds") is None:
            raise cx.err(
                f"{key}.precision",
                "a precision target needs max_rounds (the most rounds a cell may run to reach it), "
                "e.g. max_rounds: 20",
            )
    if "requests" in kw and "waves" in kw:
        raise cx.err(f"{key}.waves", "give requests (per round) or waves (x concurrency per round), not both")
    if d.get("warmup") is not None:
        w = d["warmup"]
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise cx.err(f"{key}.warmup", f"expected an integer >= 0; got {w!r}")
        kw["warmup"] = w
    if d.get("timeout_s") is not None:
        kw["timeout_s"] = cx.pos_number(
            d["timeout_s"], f"{key}.timeout_s", "a number of seconds", MAX_TIMEOUT_S
        )
    if d.get("methods") is not None:
        ms = d["methods"] if isinstance(d["methods"], list) else [d["methods"]]
        for i, m in enumerate(ms):
            if m not in methods:
                raise cx.err(
                    f"{key}.methods[{i}]",
                    f"{m!r} is not defined under methods:{did_you_mean(m, methods)}; "
                    f"defined: {', '.join(methods)}",
                )
        kw["methods"] = tuple(ms)
    if d.get("options") is not None:
        opts = cx.mapping(d["options"], f"{key}.options", OPTION_KEYS)
        if "stream" in opts and not isinstance(opts["stream"], bool):
            raise cx.err(f"{key}.options.stream", f"expected true or false; got {opts['stream']!r}")
        n = opts.get("client_processes")
        if "client_processes" in opts and (
            isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLIENT_PROCESSES
        ):
            raise cx.err(
                f"{key}.options.client_processes",
                f"expected a whole number of client processes from 1 (the engine's own event loop) to "
                f"{MAX_CLIENT_PROCESSES}, for the http and sglang-server backends; got {n!r} (leave it out "
                "for the default: one process up to 8 requests in flight, then one per 8)",
            )
        kw["options"] = freeze(opts)
    for k in IGNORED_UNLESS_EXACT:
        if d.get(k) is not None and not spec.exact:
            raise cx.err(
                f"{key}.{k}",
                f"workload kind {kind!r} does not use it (its prompts come from "
                f"{PROMPT_SOURCES[spec.prompts]}); remove the key",
            )
    kw.update(_workload_axes(cx, key, kind, d, base_dir))
    kw.update(_trace(cx, key, kind, d, base_dir))
    kw.update(_chat(cx, key, kind, d))
    w = Workload(**kw)
    if d.get("slo") is not None:
        w = dataclasses.replace(w, slo=_slo(cx, f"{key}.slo", d["slo"], w))
    return w


def _trace(cx: Ctx, key: str, kind: str, d: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """kind trace: the file (read now: every error before an engine starts), its speed axis,
    cuts, block size and output cap; what the cells need from the file goes into the Workload."""
    import hashlib

    from ..inputs import traces

    if not kind_of(kind).replay:
        takes = own_keys()
        for k in TRACE_KEYS:
            if d.get(k) is not None:
                raise cx.err(
                    f"{key}.{k}", f"only for workload kind {' or '.join(takes[k])}; this one is {kind!r}"
                )
        return {}
    if d.get("trace") is None:
        raise cx.err(f"{key}.trace", "kind trace needs the trace file: trace: PATH.jsonl (Mooncake format)")
    path = cx.string(d["trace"], f"{key}.trace")
    if not Path(path).is_absolute():
        path = str((base_dir / path).resolve())
    kw: dict[str, Any] = {"trace": path}
    if d.get("speed") is not None:
        if d["speed"] == []:
            raise cx.err(f"{key}.speed", "expected a non-empty list of time scales (1 = as recorded)")
        kw["speed"] = _number_axis(
            cx, d["speed"], f"{key}.speed", "a time scale (2 = twice as fast as recorded)", 1e6, "speed"
        )
    if d.get("cut") is not None:
        cut = cx.mapping(d["cut"], f"{key}.cut", ("requests", "seconds"), required=())
        if not cut:
            raise cx.err(f"{key}.cut", "give requests: N (the first N arrivals) and/or seconds: T")
        if cut.get("requests") is not None:
            kw["cut_requests"] = cx.pos_int(cut["requests"], f"{key}.cut.requests")
        if cut.get("seconds") is not None:
            kw["cut_s"] = float(cx.pos_number(cut["seconds"], f"{key}.cut.seconds", "seconds", MAX_TIMEOUT_S))
    for k in ("block_tokens", "max_output_tokens"):
        if d.get(k) is not None:
            kw[k] = cx.pos_int(d[k], f"{key}.{k}")
    try:
        tr = traces.load_trace(path, kw.get("cut_requests"), kw.get("cut_s"))
    except (OSError, ValueError) as e:
        raise cx.err(f"{key}.trace", str(e)) from None
    if tr.rate() <= 0:
        raise cx.err(
            f"{key}.{'cut' if d.get('cut') else 'trace'}",
            f"{len(tr.requests)} request(s) arriving at one time"
            + (" after the cut" if d.get("cut") else "")
            + ": a replay needs arrivals at two times at least (a burst of N requests at once is "
            "kind throughput with requests: N)",
        )
    outs = tr.output_lengths(kw.get("max_output_tokens"))
    kw.update(
        trace_digest=hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16],
        trace_rate=tr.rate(),
        trace_max_tokens=max(r.input_length + o for r, o in zip(tr.requests, outs, strict=True)),
        trace_requests=len(tr.requests),
        prompt_tokens=tr.mean_input(),
        output_tokens=(round(sum(outs) / len(outs)),),
    )
    if d.get("concurrency") is None:
        kw["concurrency"] = (TRACE_CONCURRENCY,)
    return kw


def _chat(cx: Ctx, key: str, kind: str, d: dict[str, Any]) -> dict[str, Any]:
    """chat_template (exact-prompt kinds) and the enable_thinking axis."""
    kw: dict[str, Any] = {}
    if d.get("chat_template") is not None:
        if not isinstance(d["chat_template"], bool):
            raise cx.err(f"{key}.chat_template", f"expected true or false; got {d['chat_template']!r}")
        chat = kind_of(kind).chat
        if chat != "optional":
            *most, last = kinds(lambda k: k.chat == "optional")
            raise cx.err(
                f"{key}.chat_template",
                f"for kinds {', '.join(most)} and {last} (kind {kind!r} "
                + ("always renders its prompts through the template)" if chat == "always" else "does not)"),
            )
        kw["chat_template"] = d["chat_template"]
    if d.get("enable_thinking") is not None:
        vals = d["enable_thinking"] if isinstance(d["enable_thinking"], list) else [d["enable_thinking"]]
        if not vals or not all(isinstance(v, bool) for v in vals) or len(set(vals)) != len(vals):
            raise cx.err(f"{key}.enable_thinking", f"expected a list of true and/or false; got {vals!r}")
        chat = kind_of(kind).chat
        if chat == "never":
            thinking = kinds(lambda k: k.chat != "never")
            raise cx.err(f"{key}.enable_thinking", f"for kinds {', '.join(thinking)}; this one is {kind!r}")
        if chat == "optional" and not kw.get("chat_template"):
            raise cx.err(
                f"{key}.enable_thinking",
                "is passed to the chat template: set chat_template: true "
                "(exact prompts are raw tokens without it)",
            )
        kw["enable_thinking"] = tuple(vals)
    return kw


def _slo(cx: Ctx, key: str, raw: Any, w: Workload) -> tuple[tuple[str, float], ...]:
    d = cx.mapping(raw, key, SLO_KEYS, required=())
    if not d:
        raise cx.err(key, f"expected at least one of {', '.join(SLO_KEYS)}")
    out = []
    for k, v in d.items():
        cx.pos_number(v, f"{key}.{k}", "a number", MAX_TIMEOUT_S * 1e3)
        if k in ("ttft_ms", "tpot_ms") and not w.streamed:
            raise cx.err(
                f"{key}.{k}",
                "needs streamed requests (TTFT is measured only then): set options: {stream: true} "
                f"or use e2e_s; workload kind {w.kind!r} does not stream here",
            )
        out.append((k, float(v)))
    return tuple(sorted(out))
