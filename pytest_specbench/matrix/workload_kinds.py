"""One declaration per workload kind (:class:`WorkloadKind`) and their registry: where its prompts
come from, the schema keys of its own it takes (and the common ones it refuses), its own axis,
whether its requests are streamed, and the waves a round has by default. The matrix (cells.py,
workload_schema.py, selectors.py) and the planner (planning/eta.py) read the declaration; how a
cell of the kind drives an engine is its runner, registered beside it in workloads/kinds.py
(``register_runner``). A new kind is one :func:`register_kind` call and one runner. No pytest, no
I/O, no heavy imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# requests a round in waves of C when a workload sets neither requests nor waves (kinds with
# rounds of exact prompts): with 4 waves the steady window holds most of the round; a long
# context round is one wave (C prefills of 30k-100k tokens a round are its cost, not its steady
# decode: four of them would quadruple the round for little more steady window)
DEFAULT_WAVES = 4

# where a kind's prompts come from, and how a message names that source
PROMPT_SOURCES = {
    "exact": "",  # made to exactly context_tokens / prompt_tokens tokens, in waves of C a round
    "scenario": "the scenario",  # multi-turn sessions of an agentic scenario (history grows)
    "questions": "the question file",  # a question file's prompts, through the chat template
    "trace": "the trace",  # a recorded trace: its requests, lengths and arrival times
}
CHAT = ("optional", "always", "never")  # chat_template: its key; rendered always; never


@dataclass(frozen=True)
class WorkloadKind:
    name: str
    prompts: str = "exact"  # a key of PROMPT_SOURCES
    default_waves: int = DEFAULT_WAVES  # a round's waves when the workload gives neither requests nor waves
    stream: bool | None = None  # options.stream's default (False: not streamed); None: always streamed
    chat: str = "optional"  # the chat template (CHAT): optional (chat_template: true), always, never
    keys: tuple[str, ...] = ()  # the workload keys of its own it takes (others' own keys are refused)
    refuses: tuple[tuple[str, str], ...] = ()  # common workload keys it refuses, and why
    axis: tuple[str, str] | None = None  # its own axis: (Workload field, Cell.extra key)
    axis_default: tuple[Any, ...] = ()  # the axis' values when the workload gives none

    @property
    def exact(self) -> bool:
        """Rounds of exact prompts in waves (WAVE_KINDS): context_tokens is an axis, the engine is
        warmed at the cells' shapes, a default of waves enters the fingerprint."""
        return self.prompts == "exact"

    @property
    def replay(self) -> bool:
        """A recorded trace: a round replays its requests, their lengths and arrival times."""
        return self.prompts == "trace"


WORKLOAD_KINDS: dict[str, WorkloadKind] = {}


def register_kind(kind: WorkloadKind) -> WorkloadKind:
    """Declare a workload kind (or replace the declaration of its name): with its runner
    (workloads/kinds.py register_runner), the one place a new kind is added. Returns it."""
    if kind.prompts not in PROMPT_SOURCES:
        raise ValueError(
            f"workload kind {kind.name!r}: prompts {kind.prompts!r}; one of {', '.join(PROMPT_SOURCES)}"
        )
    if kind.chat not in CHAT:
        raise ValueError(f"workload kind {kind.name!r}: chat {kind.chat!r}; one of {', '.join(CHAT)}")
    WORKLOAD_KINDS[kind.name] = kind
    return kind


def kind_of(name: str) -> WorkloadKind:
    """The declaration of a kind (one of exact prompts for a name not registered)."""
    return WORKLOAD_KINDS.get(name) or WorkloadKind(name)


def kinds(pred: Any = None) -> tuple[str, ...]:
    """The registered kinds' names in registration order, those ``pred(kind)`` holds for."""
    return tuple(n for n, k in WORKLOAD_KINDS.items() if pred is None or pred(k))


def own_keys() -> dict[str, tuple[str, ...]]:
    """Each kind-specific workload key -> the kinds that take it, in registration order."""
    out: dict[str, tuple[str, ...]] = {}
    for n, k in WORKLOAD_KINDS.items():
        for key in k.keys:
            out[key] = (*out.get(key, ()), n)
    return out


# ------------------------------------------------------------------------------ the built-in kinds

TRACE_KEYS = ("trace", "speed", "cut", "block_tokens", "max_output_tokens")
WHOLE_TRACE = "a round replays the whole trace; cut it with cut: {requests: N} or cut: {seconds: T}"
register_kind(WorkloadKind("throughput", stream=False, keys=("request_rate",)))
register_kind(WorkloadKind("ttft", keys=("request_rate",)))
register_kind(WorkloadKind("long_context", default_waves=1))
register_kind(
    WorkloadKind(
        "agentic", prompts="scenario", chat="always", keys=("scenarios",), axis=("scenarios", "scenario")
    )
)
register_kind(
    WorkloadKind(
        "categories",
        prompts="questions",
        stream=True,
        chat="always",
        keys=("categories", "questions"),
        axis=("categories", "category"),
    )
)
register_kind(
    WorkloadKind(
        "trace",
        prompts="trace",
        chat="never",
        keys=TRACE_KEYS,
        refuses=(
            ("output_tokens", "a trace gives each request's output length; cap them with max_output_tokens"),
            ("requests", WHOLE_TRACE),
            ("waves", WHOLE_TRACE),
            ("request_rate", "a trace's arrivals are its timestamps; scale them with speed: [0.5, 1, 2]"),
        ),
        axis=("speed", "speed"),
        axis_default=(1.0,),
    )
)
