"""What one request did: the record every backend returns and every metric reads. Pure: no
pytest, no I/O; a frozen dataclass so a round's records can be shared and hashed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """What one request did. Times are seconds on the client's perf_counter clock.

    ``chunks`` holds (seconds since submission, cumulative output tokens) per streamed chunk
    that carried tokens; ``verify_steps`` is the number of target forward passes in decode
    (SGLang's spec_verify_ct), ``None`` for engines that do not speculate.
    """

    prompt_tokens: int
    output_tokens: int
    latency_s: float
    ttft_s: float | None = None
    queue_s: float = 0.0
    verify_steps: int | None = None
    accept_histogram: tuple[int, ...] = ()
    # prompt tokens the engine's prefix cache served (SGLang's meta_info.cached_tokens, the OpenAI
    # usage's prompt_tokens_details.cached_tokens, the hf engine's own cache); None: not reported
    cached_tokens: int | None = None
    chunks: tuple[tuple[float, int], ...] = ()
    output_ids: tuple[int, ...] = ()
    output_text: str = ""  # when the engine returns text but no ids (agentic history only)
    tag: str = ""
    error: str | None = None
    meta: tuple[tuple[str, Any], ...] = field(default=())
    # the prompt length as the engine itself counted it (SGLang's meta_info.prompt_tokens; hf: the
    # tokens its prefill put into the KV cache); None when the engine does not say
    engine_prompt_tokens: int | None = None
    # submission and completion, seconds since the round's clock started (closed and open loop
    # set them): what the steady-state window of a closed-loop round is cut from
    start_s: float | None = None
    end_s: float | None = None
    client_late_s: float = 0.0  # open loop: how late the client's event loop woke for the arrival
    # drafts: verify steps that carried at least one draft token, draft tokens proposed, and per
    # draft position p (1-based, index p - 1) the steps that proposed a token at p after accepting
    # every position before it; None / () where the engine does not say (acceptance by position
    # then counts a step without a draft as one that rejected position 1)
    draft_steps: int | None = None
    draft_tokens: int | None = None
    position_reached: tuple[int, ...] = ()
