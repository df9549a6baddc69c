"""The benchmark matrix as frozen typed objects: models, methods (a speculative method's settings:
speculative.py), workloads, the matrix, its expansion into cells and engine groups, and their
readable ids (``ngram-tp1-c4-out256``).

Reading and validating the YAML file is schema.py (which imports this module, never the other
way). No pytest, no I/O, no heavy imports.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .names import SWEEP_LABELS, axis_label, fmt_tokens, setting_name
from .speculative import Speculative
from .workload_kinds import DEFAULT_WAVES, WORKLOAD_KINDS, kind_of

# also read from here by schema, plots and tests
__all__ = ["DEFAULT_WAVES", "SWEEP_LABELS", "WORKLOAD_KINDS", "fmt_tokens", "setting_name"]
LOAD_FORMATS = ("auto", "dummy")
DEFAULT_BASELINE = "ar"


def freeze(value: Any) -> Any:
    """Turn YAML values (dicts, lists) into hashable tuples, recursively."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze` for the pairs-of-tuples form produced from dicts."""
    if (
        isinstance(value, tuple)
        and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value)
        and value
    ):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Model:
    name: str
    path: str
    tokenizer: str | None = None
    load_format: str = "auto"
    context_length: int | None = None


@dataclass(frozen=True)
class Method:
    name: str
    backend: str
    model: Model
    speculative: Speculative | None = None
    draft_model: Model | None = None
    tp: tuple[int, ...] = ()
    engine_args: tuple[tuple[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    sweep: str = ""  # a setting of a swept method: the method's name in the YAML
    setting: tuple[tuple[str, Any], ...] = ()  # the swept knobs' values of this setting
    labels: tuple[tuple[str, str], ...] = ()  # swept key -> its label in the setting's name
    # backend http: the endpoint, its API (sglang | openai) and the variable holding its key
    url: str | None = None
    api: str | None = None
    api_key_env: str | None = None
    # shell commands around the method's engine groups: (before_group | after_group, command)
    hooks: tuple[tuple[str, str], ...] = ()
    tune: Any = None  # tune.Tune of a swept method (racing decides it), or None

    @property
    def is_speculative(self) -> bool:
        return self.speculative is not None

    @property
    def forced_family(self) -> str:
        """The name without the forced accept-length label: the method whose cost curve a forced
        setting is a point of (``eagle3-s3-a2`` -> ``eagle3-s3``; ``eagle3-a2`` -> ``eagle3``)."""
        if not self.sweep:
            return self.name
        rest = tuple((k, v) for k, v in self.setting if k != "simulate_accept_length")
        return setting_name(self.sweep, rest, self.labels)


def default_waves(kind: str) -> int:
    """The waves a round of this kind has when the workload sets neither requests nor waves
    (its declaration's, workload_kinds.py: 4, a long context round 1)."""
    return kind_of(kind).default_waves


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    concurrency: tuple[int, ...] = (1,)
    output_tokens: tuple[int, ...] = (64,)
    context_tokens: tuple[int, ...] = ()
    prompt_tokens: int = 128
    requests: int | None = None
    waves: int | None = None  # requests per round = waves x concurrency (instead of requests)
    rounds: int = 5  # enough paired rounds for a speedup interval to mean something (paired.py)
    # more timed rounds, up to this many, while the cell's interval is not decided (rounds.timed)
    max_rounds: int | None = None
    # a precision target: more rounds (up to max_rounds) until the cell's interval's half-width is
    # within this fraction (deciding/stopping.py); None: the verdict alone decides
    precision: float | None = None
    warmup: int = 1
    timeout_s: float = 900.0
    methods: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    request_rate: tuple[float, ...] = ()  # open loop (Poisson arrivals, req/s); concurrency caps in-flight
    scenarios: tuple[str, ...] = ()  # agentic: scenario files (fixtures/agentic/NAME.yaml or paths)
    categories: tuple[str, ...] = ()  # categories: prompt categories of the question file
    questions: str | None = None  # categories: question.jsonl (Spec-Bench / MT-Bench format)
    temperature: tuple[float, ...] = ()  # sampling temperatures (an axis; () = greedy only)
    # service-level objectives per request (ttft_ms, tpot_ms, e2e_s): attainment and goodput
    slo: tuple[tuple[str, float], ...] = ()
    # trace: a timestamped JSONL replayed at its times (inputs/traces.py), ``speed`` its time scale
    # (an axis: 2 = twice as fast), cut to its first ``cut_requests`` or ``cut_s`` seconds; what the
    # schema read from the file: its digest, mean arrival rate, longest request and mean lengths
    trace: str | None = None
    speed: tuple[float, ...] = ()
    cut_requests: int | None = None
    cut_s: float | None = None
    block_tokens: int = 512
    max_output_tokens: int | None = None  # caps the trace's output lengths
    trace_digest: str = ""
    trace_rate: float = 0.0
    trace_max_tokens: int = 0
    trace_requests: int = 0  # requests a round replays (after the cut)
    # prompts through the target tokenizer's chat template (categories and agentic always are);
    # enable_thinking: an axis, passed to the template (Qwen3-style templates take it)
    chat_template: bool = False
    enable_thinking: tuple[bool, ...] = ()

    @property
    def streamed(self) -> bool:
        """Whether requests are streamed (TTFT, TPOT and ITL are measured only then)."""
        default = kind_of(self.kind).stream  # options.stream's default; throughput's is off
        if default is not None:
            return bool(dict(self.options).get("stream", default))
        return True  # ttft, long_context, agentic, trace

    @property
    def round_cap(self) -> int:
        """The most timed rounds a cell of this workload may run."""
        return max(self.rounds, self.max_rounds or 0)

    def requests_per_round(self, concurrency: int) -> int:
        if kind_of(self.kind).replay:
            return self.trace_requests
        if self.requests:
            return self.requests
        # default: default_waves(kind), so that a closed loop's steady-state window (every slot
        # busy, slots refilled as requests finish) holds most of the round
        return (self.waves or default_waves(self.kind)) * concurrency

    def extra_axes(self) -> list[tuple[tuple[str, Any], ...]]:
        """The workload's own axes beyond concurrency/context/output, as Cell.extra tuples
        (a temperature only when > 0: greedy cells keep their ids)."""
        axis = kind_of(self.kind).axis  # the kind's own: a trace's speed, scenario, category
        if axis is not None:
            field_, key = axis
            vals = getattr(self, field_) or kind_of(self.kind).axis_default
            base: list[tuple[tuple[str, Any], ...]] = [((key, v),) for v in vals]
        elif self.request_rate:
            base = [(("request_rate", r),) for r in self.request_rate]
        else:
            base = [()]
        temps = self.temperature or (0.0,)
        base = [e + ((("temperature", t),) if t else ()) for e in base for t in temps]
        return [e + (("thinking", th),) for e in base for th in self.enable_thinking] or base


@dataclass(frozen=True)
class EngineGroup:
    """One engine start: a method at one TP size. Every cell of a group shares its engine."""

    method: Method
    tp: int
    context_needed: int = 0  # the longest prompt + output of its cells (engine context length)

    @property
    def id(self) -> str:
        return f"{self.method.name}-tp{self.tp}"

    def __repr__(self) -> str:  # shows up in pytest's fixture error messages
        return f"EngineGroup({self.id})"


@dataclass(frozen=True)
class Cell:
    workload: Workload
    group: EngineGroup
    concurrency: int
    output_tokens: int
    context_tokens: int
    id_prefix: str = ""
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def method(self) -> Method:
        return self.group.method

    @property
    def tp(self) -> int:
        return self.group.tp

    @property
    def temperature(self) -> float:
        """Sampling temperature of the cell's requests (0: greedy)."""
        return float(dict(self.extra).get("temperature", 0.0))

    @property
    def id(self) -> str:
        return "-".join(([self.id_prefix] if self.id_prefix else []) + self._id_parts())

    def _id_parts(self) -> list[str]:
        parts = [self.method.name, f"tp{self.tp}", f"c{self.concurrency}"]
        if self.workload.context_tokens:
            parts.append(f"ctx{fmt_tokens(self.context_tokens)}")
        if not kind_of(self.workload.kind).replay:  # a trace's lengths are its own, per request
            parts.append(f"out{fmt_tokens(self.output_tokens)}")
        return parts + [axis_label(k, v) for k, v in self.extra]

    def tokens(self) -> tuple[str, ...]:
        """Keywords ``-k`` can match exactly: each part of the id, the workload's name and a
        sweep's name, between colons (``:c1:``, ``:tp4:``, ``:ngram:``). pytest's ``-k`` matches
        substrings, so ``-k c1`` also selects c16 and ``-k ngram`` ngram-d8; ``-k :c1:`` only c1."""
        names = [self.workload.name, *([self.method.sweep] if self.method.sweep else []), *self._id_parts()]
        return tuple(dict.fromkeys(f":{n}:" for n in names))

    @property
    def request_key(self) -> tuple[Any, ...]:
        """What a cell's requests depend on: its shape without method and TP (workload,
        concurrency, prompt/context tokens, output tokens, rate, temperature, scenario,
        category). Every method of a shape, at every TP size, gets the same prompts, arrival
        times, sampling seeds and request order."""
        return (self.workload.name, self.concurrency, self.context_tokens, self.output_tokens, self.extra)

    @property
    def request_rate(self) -> float | None:
        """Arrival rate of an open-loop cell (req/s): Poisson arrivals at the workload's rate, or
        a trace's mean rate at the cell's speed; None for a closed loop."""
        if kind_of(self.workload.kind).replay:
            return self.workload.trace_rate * float(dict(self.extra).get("speed", 1.0))
        rate = dict(self.extra).get("request_rate")
        return float(rate) if rate else None

    @property
    def axes_key(self) -> tuple[Any, ...]:
        """Everything but the method: cells with equal keys are comparable (speedup vs ar)."""
        return (
            self.workload.name,
            self.tp,
            self.concurrency,
            self.context_tokens,
            self.output_tokens,
            self.extra,
        )

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {
            "method": self.method.name,
            "tp": self.tp,
            "workload": self.workload.name,
            "concurrency": self.concurrency,
            "context_tokens": self.context_tokens,
            "output_tokens": self.output_tokens,
        }
        kind = kind_of(self.workload.kind)
        if not kind.exact:  # prompts from elsewhere (a scenario, a question file, a trace)
            del p["context_tokens"]
        p.update({k: Path(str(v)).stem if k == "scenario" else v for k, v in self.extra})
        if kind.replay:  # lengths per request: output_tokens is the trace's mean
            p.update(
                trace=Path(str(self.workload.trace)).name, request_rate=float(f"{self.request_rate or 0:.4g}")
            )
        return p

    def fingerprint(self) -> str:
        """What defines how the cell is measured, hashed: the fields of FINGERPRINT_FIELDS (method
        with its model, draft and engine args, workload with rounds, requests and timeouts), the
        cell's TP size and axes, and the workload's SLOs and the method's endpoint when set. A
        resumed run copies an earlier result only when this is unchanged."""
        from .fingerprint import fingerprint_text

        return hashlib.sha256(fingerprint_text(self.fingerprint_key()).encode()).hexdigest()[:16]

    def fingerprint_key(self) -> tuple[Any, ...]:
        """What :meth:`fingerprint` hashes. A workload of a kind with rounds of exact prompts that
        sets neither ``requests`` nor ``waves`` runs default_waves(kind) x concurrency requests a round
        (one wave before metrics version 2): that default is the key's last element, so results
        measured under the former one are measured again, not resumed."""
        key: tuple[Any, ...] = (
            self.method,
            self.workload,
            self.tp,
            self.concurrency,
            self.context_tokens,
            self.output_tokens,
            self.extra,
        )
        if self.workload.slo:
            key += (("slo", self.workload.slo),)
        if self.method.url:
            key += (("endpoint", self.method.url, self.method.api),)
        w = self.workload
        kind = kind_of(w.kind)
        if kind.exact and w.requests is None and w.waves is None:
            key += (("default_waves", kind.default_waves),)
        if w.max_rounds is not None:
            key += (("max_rounds", w.max_rounds),)
        if w.precision is not None:
            key += (("precision", w.precision),)
        if kind.replay:
            key += (("trace", w.trace_digest, w.cut_requests, w.cut_s, w.block_tokens, w.max_output_tokens),)
        if w.chat_template:
            key += (("chat_template", True),)
        spec = self.method.speculative
        if spec is not None and spec.simulate_accept_length is not None:
            key += (("forced", spec.simulate_accept_length, spec.simulate_accept_method),)
        return key

    @property
    def tokens_per_request(self) -> int:
        """KV tokens one request may hold: prompt + output (agentic: the history it grows to)."""
        return request_tokens(self.workload.kind, self.context_tokens, self.output_tokens)

    def __repr__(self) -> str:
        return f"Cell({self.id})"


@dataclass(frozen=True)
class Matrix:
    path: str
    models: tuple[Model, ...]
    methods: tuple[Method, ...]
    tp: tuple[int, ...]
    workloads: tuple[Workload, ...]
    baseline: str = DEFAULT_BASELINE
    # top-level exclude: / include: (selectors.Selector / selectors.Override) and run hooks
    exclude: tuple[Any, ...] = ()
    include: tuple[Any, ...] = ()
    hooks: tuple[tuple[str, str], ...] = ()
    compare: tuple[tuple[str, str], ...] = ()  # method pairs the report compares (matrix/compare.py)
    # the race's indifference zone (``race: {delta: 0.03}``; deciding/selection.py); None: its default
    race_delta: float | None = None

    def baselines(self) -> dict[str, str | None]:
        """Method -> the method its "vs ar" speedup divides by: ``baseline`` when it runs the same
        target model, else the first non-speculative method on that model, else none (a
        speedup against another model would mean nothing)."""
        base = self.method(self.baseline) if any(m.name == self.baseline for m in self.methods) else None
        out: dict[str, str | None] = {}
        for m in self.methods:
            if base is not None and base.model == m.model:
                out[m.name] = base.name
            else:
                ar = next((o for o in self.methods if o.model == m.model and not o.is_speculative), None)
                out[m.name] = ar.name if ar else None
        return out

    def controls(self, separate: Callable[[str], bool] | None = None) -> dict[str, str]:
        """Method -> its baseline, for each method that is a twin of its baseline (the A/A
        control, report/control.py): the same backend, model, engine_args, env, endpoint and
        hooks, neither speculative; only its name differs. ``separate(backend)``: whether that
        backend's engines are instances of their own (a launched server, a GPU engine) whose
        speed a twin checks; two engines of one process (the embedded CPU model) are not."""

        def engine(m: Method) -> tuple[Any, ...]:
            return (m.backend, m.model, m.engine_args, m.env, m.url, m.api, m.hooks, m.tp)

        out: dict[str, str] = {}
        for m, b in self.baselines().items():
            if b is None or b == m:
                continue
            me, base = self.method(m), self.method(b)
            if separate is not None and not separate(me.backend):
                continue
            if not me.is_speculative and not base.is_speculative and engine(me) == engine(base):
                out[m] = b
        return out

    def twins(self, separate: Callable[[str], bool] | None = None) -> dict[str, str]:
        """Method -> the first method (in matrix order) with the same engine, for each method
        that is another start of an earlier one (the same backend, model, speculative settings,
        draft, engine_args, env, endpoint and hooks; only its name differs) and not an A/A control
        of its baseline (``controls``): pairs of starts that read the start-to-start variance
        (stats/instances.py). ``separate`` as in ``controls``."""

        def engine(m: Method) -> tuple[Any, ...]:
            spec = m.speculative
            return (
                m.backend,
                m.model,
                spec,
                m.draft_model,
                m.engine_args,
                m.env,
                m.url,
                m.api,
                m.hooks,
                m.tp,
            )

        controls = self.controls(separate)
        first: dict[tuple[Any, ...], str] = {}
        out: dict[str, str] = {}
        for m in self.methods:
            if m.name in controls or (separate is not None and not separate(m.backend)):
                continue
            key = engine(m)
            if key in first:
                out[m.name] = first[key]
            else:
                first[key] = m.name
        return out

    def method(self, name: str) -> Method:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)

    def groups(self) -> list[EngineGroup]:
        """One per method and TP size, with the include entries' settings for it; a group an
        exclude entry removes whole (one naming only method and TP) is left out."""
        from .selectors import apply_includes, drops_group

        out = []
        for m in self.methods:
            need = max((_tokens_needed(w, m.sweep or m.name) for w in self.workloads), default=0)
            out += [
                EngineGroup(apply_includes(m, tp, self.include), tp, need)
                for tp in m.tp or self.tp
                if not drops_group(self.exclude, m, tp)
            ]
        return out

    def group(self, method: str, tp: int) -> EngineGroup:
        """The engine group of method ``method`` at ``tp`` (include settings applied)."""
        return next(g for g in self.groups() if g.method.name == method and g.tp == tp)

    def cells(self, kind: str | None = None) -> list[Cell]:
        out: list[Cell] = []
        groups = self.groups()
        for w in self.workloads:
            if kind is not None and w.kind != kind:
                continue
            # every id is unique across workloads: only a lone throughput workload goes unprefixed
            alone = w.kind == "throughput" and sum(1 for o in self.workloads if o.kind == w.kind) == 1
            prefix = "" if alone else w.name
            ctxs = w.context_tokens or (w.prompt_tokens,)
            for g in groups:
                if w.methods and g.method.name not in w.methods and g.method.sweep not in w.methods:
                    continue
                for c, ctx, out_t, extra in itertools.product(
                    w.concurrency, ctxs, w.output_tokens, w.extra_axes()
                ):
                    cell = Cell(w, g, c, out_t, ctx, id_prefix=prefix, extra=extra)
                    if not any(s.matches(cell) for s in self.exclude):
                        out.append(cell)
        return out


AGENTIC_TOKENS_GUESS = 8192  # context an agentic scenario may grow to (history + replies)


def _tokens_needed(w: Workload, method: str) -> int:
    """The longest prompt + output a workload gives a method's engine (0: not its cells)."""
    if w.methods and method not in w.methods:
        return 0
    if kind_of(w.kind).replay:
        return w.trace_max_tokens
    return request_tokens(w.kind, max(w.context_tokens or (w.prompt_tokens,)), max(w.output_tokens))


def request_tokens(kind: str, context: int, output: int) -> int:
    """KV tokens one request may hold: prompt + output; agentic: the history it grows to."""
    if kind_of(kind).prompts == "scenario":
        return AGENTIC_TOKENS_GUESS + output * 8
    return context + output
