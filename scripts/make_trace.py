"""Write a request trace in Mooncake's JSONL format (timestamp in ms, input_length,
output_length, hash_ids), with prefixes shared the way chat traffic shares them: a few system
prompts, each opening many conversations, and conversations whose every turn repeats the whole
history before it.

    python scripts/make_trace.py OUT.jsonl --requests 300 --rate 10 --block 512 --seed 0

Block ids follow Mooncake's rule: an id stands for one block of ``--block`` tokens together with
everything before it (the same prefix gets the same id; a new prefix a new id), and
len(hash_ids) = ceil(input_length / block). Arrivals are Poisson at ``--rate`` req/s; a
conversation's next turn arrives after its previous one. Seeded: the same arguments write the
same file. The file is read back by the plugin's own loader before it is written: arguments
that would give a trace ``kind: trace`` refuses (one request, arrivals all in one millisecond,
lengths beyond its bounds) are refused here with the reason. fixtures/traces/README.md lists the
commands that wrote the shipped traces.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import tempfile
from pathlib import Path

from pytest_specbench.inputs import traces

MAX_RATE = 1e6  # arrivals per second (the matrix's bound on request_rate)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rate", type=float, default=10.0, help="mean arrivals per second")
    ap.add_argument("--block", type=int, default=512, help="tokens per hash id")
    ap.add_argument("--system-prompts", type=int, default=4)
    ap.add_argument("--system-blocks", type=int, default=2, help="blocks of each system prompt")
    ap.add_argument("--turns", type=int, default=4, help="most turns of a conversation")
    ap.add_argument("--user-blocks", type=int, nargs=2, default=(1, 2), help="blocks a user turn adds")
    ap.add_argument("--output", type=int, nargs=2, default=(32, 256), help="output length range")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in ("requests", "block", "system_prompts", "system_blocks", "turns"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.requests < 2:
        ap.error(
            f"--requests must be >= 2: a replay needs arrivals at two times at least; got {args.requests} "
            "(one request, or a burst at once, is kind throughput)"
        )
    if not (math.isfinite(args.rate) and 0 < args.rate <= MAX_RATE):
        ap.error(f"--rate must be a number of arrivals per second in (0, {MAX_RATE:g}]; got {args.rate}")
    for name in ("user_blocks", "output"):
        lo, hi = getattr(args, name)
        if not 1 <= lo <= hi:
            ap.error(f"--{name.replace('_', '-')} LO HI needs 1 <= LO <= HI; got {lo} {hi}")
    # the longest prompt: the system prompt, every turn's longest message and every reply but the last
    longest = args.block * (
        args.system_blocks
        + args.turns * args.user_blocks[1]
        + (args.turns - 1) * -(-args.output[1] // args.block)
    )
    if max(longest, args.output[1]) > traces.MAX_TOKENS:
        ap.error(
            f"a request could reach {max(longest, args.output[1]):,} tokens; a trace allows at most "
            f"{traces.MAX_TOKENS:,}: give fewer --turns, --system-blocks or --user-blocks, "
            "or a smaller --block or --output"
        )
    rng = random.Random(args.seed)
    ids: dict[tuple[int, ...], int] = {}  # a prefix (its parent's id, this block's key) -> its id

    def block_id(parent: int, key: tuple[int, ...]) -> int:
        return ids.setdefault((parent, *key), len(ids))

    systems = []
    for s in range(args.system_prompts):
        chain, parent = [], -1
        for b in range(args.system_blocks):
            parent = block_id(parent, (0, s, b))
            chain.append(parent)
        systems.append(chain)
    t = 0.0
    live: list[dict] = []  # conversations with turns left: chain, turns left, next earliest time
    rows = []
    conv = 0
    while len(rows) < args.requests:
        t += rng.expovariate(args.rate)
        ready = [c for c in live if c["at"] <= t]
        if ready and rng.random() < 0.6:  # a conversation's next turn
            c = rng.choice(ready)
        else:
            conv += 1
            c = {
                "chain": list(rng.choice(systems)),
                "left": rng.randint(1, args.turns),
                "id": conv,
                "turn": 0,
            }
            live.append(c)
        c["turn"] += 1
        for b in range(rng.randint(*args.user_blocks)):  # the user's message
            c["chain"].append(block_id(c["chain"][-1], (1, c["id"], c["turn"], b)))
        n_in = len(c["chain"]) * args.block - rng.randrange(args.block)
        n_out = rng.randint(*args.output)
        rows.append(
            {
                "timestamp": round(t * 1000),
                "input_length": n_in,
                "output_length": n_out,
                "hash_ids": list(c["chain"]),
            }
        )
        # the reply joins the history: its blocks (rounded up) before the next user message
        for b in range(-(-n_out // args.block)):
            c["chain"].append(block_id(c["chain"][-1], (2, c["id"], c["turn"], b)))
        c["left"] -= 1
        c["at"] = t + 1.0  # the user reads the reply before the next turn
        if c["left"] <= 0:
            live.remove(c)
    problem = _write_checked(Path(args.out), rows)
    if problem:
        ap.error(f"not written: {problem}")
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    print(f"{args.out}: {len(rows)} requests over {span:.1f} s from the first, {conv} conversations")
    return 0


def _write_checked(out: Path, rows: list[dict]) -> str | None:
    """Writes ``rows`` to ``out`` when the plugin's loader accepts them as a replayable trace;
    else leaves ``out`` alone and returns why not."""
    span_s = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    if span_s > 86400 * 365:
        return (
            f"the arrivals span {span_s / 86400:,.0f} days, more than the year a trace may span: raise --rate"
        )
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        try:
            tr = traces.load_trace.__wrapped__(tmp)
        except ValueError as e:
            return str(e).replace(tmp, str(out))
        if tr.rate() <= 0:
            return (
                f"all {len(rows)} arrivals fall in one millisecond (timestamps are whole ms): a replay "
                "needs arrivals at two times at least; lower --rate or give more --requests"
            )
        os.replace(tmp, out)
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


if __name__ == "__main__":
    raise SystemExit(main())
