"""Prompts with exact token counts for the model's own tokenizer.

Prompts are built from real text in ``fixtures/text`` (written for the project), encoded
once per tokenizer, and cut into windows of exactly N token ids. Every request gets a
different window (seeded offsets into a per-request shuffle of the passages), so no two
requests share a long prefix and no prefix cache makes prefill free. Engines receive token
ids, so the count the engine sees is the count asked for.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES_ENV = "SPECBENCH_FIXTURES"


def fixtures_dir() -> Path:
    env = os.environ.get(FIXTURES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / "fixtures"


@cache
def passages(text_dir: str | None = None) -> tuple[str, ...]:
    """Paragraphs of the corpus, in a stable order."""
    d = Path(text_dir) if text_dir else fixtures_dir() / "text"
    files = sorted(p for p in d.iterdir() if p.is_file())
    if not files:
        raise FileNotFoundError(f"{d}: no text files for prompts (set {FIXTURES_ENV} to the fixtures dir)")
    out: list[str] = []
    for f in files:
        out += [p.strip() for p in f.read_text().split("\n\n") if p.strip()]
    return tuple(out)


# id(tokenizer) -> (tokenizer, encoded passages). The tokenizer is kept with its entry: an id is
# only unique while its object lives, and a collected tokenizer's id can come back for another
# one (CI once got a byte-level test tokenizer's encodings for the embedded model's tokenizer).
_ENCODED: dict[int, tuple[Any, list[list[int]]]] = {}


def _encoded_passages(tokenizer: Any) -> list[list[int]]:
    hit = _ENCODED.get(id(tokenizer))
    if hit is None or hit[0] is not tokenizer:
        hit = (tokenizer, [tokenizer.encode(p + "\n\n", add_special_tokens=False) for p in passages()])
        _ENCODED[id(tokenizer)] = hit
    return hit[1]


def exact_prompt(tokenizer: Any, n_tokens: int, seed: int) -> tuple[int, ...]:
    """Exactly ``n_tokens`` ids: passages in a seed-specific order, from a seed-specific offset.

    The window of ids is decoded to text and re-encoded, so the prompt is text that encodes
    to exactly ``n_tokens`` ids (a cut can split a merge: the window is resized until the
    re-encoded text has the right length).
    """
    enc = _encoded_passages(tokenizer)
    rng = random.Random(seed)
    ids: list[int] = []
    order = list(range(len(enc)))
    offset = rng.randrange(sum(len(e) for e in enc))
    while len(ids) < n_tokens + offset + 64:
        rng.shuffle(order)
        for i in order:
            ids.extend(enc[i])
    want = n_tokens
    for _ in range(16):
        text = tokenizer.decode(ids[offset : offset + want])
        out = tokenizer.encode(text, add_special_tokens=False)
        if len(out) == n_tokens:
            return tuple(out)
        want += n_tokens - len(out)
    # a tokenizer that never round-trips: the ids themselves (the engine still gets exactly N)
    return tuple(ids[offset : offset + n_tokens])


def make_prompts(tokenizer: Any, n_tokens: int, count: int, seed: int = 0) -> list[tuple[int, ...]]:
    """``count`` distinct prompts of exactly ``n_tokens`` ids each."""
    return [exact_prompt(tokenizer, n_tokens, seed * 1_000_003 + i) for i in range(count)]


# ------------------------------------------------------------------ chat, scenarios, questions

_SENTINEL = "\u2063specbench-body\u2063"


def _render(
    tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool, thinking: bool | None
) -> str:
    """The messages as text through the tokenizer's chat template, ``enable_thinking`` passed when
    ``thinking`` is not None."""
    kw = {} if thinking is None else {"enable_thinking": thinking}
    return str(
        tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kw
        )
    )


def chat_frame(tokenizer: Any, thinking: bool | None = None) -> tuple[list[int], list[int]]:
    """The ids the chat template puts before and after one user message (generation prompt
    included, ``enable_thinking`` passed when ``thinking`` is not None)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template: true, but the target's tokenizer has no chat template")
    pre, post = _render(tokenizer, [{"role": "user", "content": _SENTINEL}], True, thinking).split(_SENTINEL)
    enc = tokenizer.encode
    return list(enc(pre, add_special_tokens=False)), list(enc(post, add_special_tokens=False))


def check_thinking(tokenizer: Any, where: str) -> None:
    """Refuses a template that renders the same with enable_thinking true and false (an axis
    that would measure one prompt twice)."""
    if chat_frame(tokenizer, True) == chat_frame(tokenizer, False):
        raise ValueError(
            f"{where}: enable_thinking is an axis, but the target's chat template renders the same "
            "prompt with it true and false (it does not take enable_thinking; Qwen3-style templates do)"
        )


def make_chat_prompts(
    tokenizer: Any, n_tokens: int, count: int, seed: int, thinking: bool | None = None
) -> list[tuple[int, ...]]:
    """``count`` prompts of exactly ``n_tokens`` ids each: one user message of real text in the
    chat template's frame (the frame's ids counted in the ``n_tokens``)."""
    pre, post = chat_frame(tokenizer, thinking)
    body = n_tokens - len(pre) - len(post)
    if body < 1:
        raise ValueError(
            f"a {n_tokens}-token prompt cannot hold the chat template's {len(pre) + len(post)} tokens "
            "and a message; give more prompt tokens"
        )
    return [tuple(pre + list(p) + post) for p in make_prompts(tokenizer, body, count, seed)]


def chat_ids(
    tokenizer: Any,
    messages: list[dict[str, str]],
    add_generation_prompt: bool = False,
    thinking: bool | None = None,
) -> list[int]:
    """Token ids of chat messages through the tokenizer's chat template (plain text without one);
    ``thinking`` (when not None) is the template's ``enable_thinking``.

    Rendered as text, then encoded without special-token insertion: the ids the engine gets
    are the ids counted.
    """
    if getattr(tokenizer, "chat_template", None):
        text = _render(tokenizer, messages, add_generation_prompt, thinking)
    else:
        text = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages)
        if add_generation_prompt:
            text += "assistant: "
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class Turn:
    name: str
    user: str


@dataclass(frozen=True)
class Scenario:
    """An agentic multi-turn scenario: each turn's user message is appended to the history
    that already holds every earlier turn and the model's own replies."""

    name: str
    system: str
    turns: tuple[Turn, ...]
    path: str


def scenario_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (fixtures_dir() / "agentic").glob("*.yaml")))


@cache
def load_scenario(name: str) -> Scenario:
    """A built-in scenario by name (fixtures/agentic/NAME.yaml) or a YAML file path (the matrix
    resolves paths relative to its own file before they get here).

    ``{file:NAME}`` in a turn is replaced by that file's text (relative to the scenario file).
    """
    import yaml

    p = Path(name)
    if p.suffix not in (".yaml", ".yml"):
        p = fixtures_dir() / "agentic" / f"{name}.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such scenario file")
    d = yaml.safe_load(p.read_text())
    if not isinstance(d, dict) or not isinstance(d.get("turns"), list) or not d["turns"]:
        raise ValueError(
            f"{p}: expected a mapping with 'system' and a non-empty list 'turns' of {{name, user}}"
        )
    turns = []
    for i, t in enumerate(d["turns"]):
        if not isinstance(t, dict) or not isinstance(t.get("user"), str):
            raise ValueError(f"{p}: turns[{i}]: expected a mapping with a string 'user' (and a 'name')")
        text = t["user"]
        while "{file:" in text:
            start = text.index("{file:")
            end = text.index("}", start)
            fname = text[start + 6 : end]
            fpath = p.parent / fname
            if not fpath.is_file():
                raise ValueError(f"{p}: turns[{i}]: {{file:{fname}}}: {fpath} does not exist")
            text = text[:start] + fpath.read_text() + text[end + 1 :]
        turns.append(Turn(str(t.get("name", f"turn{i + 1}")), text))
    return Scenario(str(d.get("name", p.stem)), str(d.get("system", "")), tuple(turns), str(p))


def json_lines(p: Path, what: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file; errors name the file
    (``no such {what} file``) and the line."""
    import json

    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such {what} file")
    for n, raw in enumerate(p.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{p}:{n}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                "JSON lines must be UTF-8"
            ) from None
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n}: not valid JSON: {e.msg}") from None


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    turns: tuple[str, ...]
    sub_category: str = ""  # SPEED-Bench's, where given


# SPEED-Bench ships some rows without their text; its own scripts fetch it from the source
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED"


@cache
def load_questions(path: str | None = None) -> tuple[Question, ...]:
    """Spec-Bench / MT-Bench ``question.jsonl`` or SPEED-Bench rows as JSON lines: one object per
    line with ``question_id``, ``category`` and ``turns`` (a list of user messages); SPEED-Bench's
    ``sub_category`` is kept, its other fields (source, src_id, difficulty, multiturn) are read
    past. Its qualitative split's categories are topics (coding, math, ...), its throughput
    splits' are entropy tiers (low_entropy, mixed, high_entropy); its input-length buckets are
    separate files (throughput_1k ... _32k). Default: the project's own prompt set."""

    p = Path(path) if path else fixtures_dir() / "prompts" / "question.jsonl"
    if p.suffix == ".parquet":
        raise ValueError(
            f'{p}: a Parquet file; give its rows as JSON lines, e.g. python -c "import pandas; '
            f"pandas.read_parquet('{p.name}').to_json('{p.stem}.jsonl', orient='records', lines=True)\""
        )
    out: list[Question] = []
    seen: dict[str, int] = {}  # question id -> its line
    for n, d in json_lines(p, "question"):
        turns = d.get("turns") if isinstance(d, dict) else None
        if (
            not isinstance(turns, list)
            or not turns
            or not all(isinstance(t, str) for t in turns)
            or not isinstance(d.get("category"), str)
        ):
            raise ValueError(
                f"{p}:{n}: expected keys question_id, category (a string) and turns "
                "(a non-empty list of strings)"
            )
        if any(t.startswith(SPEED_BENCH_PLACEHOLDER) for t in turns):
            raise ValueError(
                f"{p}:{n}: question {d.get('question_id', n)!r} holds SPEED-Bench's placeholder, not its "
                "text; fetch the rows' text from their sources first (SPEED-Bench's own preparation "
                "script), or leave those rows out"
            )
        sub = d.get("sub_category")
        qid = str(d.get("question_id", n))
        if qid in seen:
            raise ValueError(
                f"{p}:{n}: question_id {qid!r} is also on line {seen[qid]}; every question needs an id "
                "of its own (a repeated question would count twice in its category)"
            )
        seen[qid] = n
        out.append(Question(qid, d["category"], tuple(turns), str(sub or "")))
    if not out:
        raise ValueError(f"{p}: no questions")
    return tuple(out)
