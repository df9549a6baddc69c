#!/usr/bin/env python3
"""Fidelity: the plugin's throughput path vs a bare ``engine.generate`` loop, one engine.

Starts the engine of one method of a matrix (sglang backend), then alternates: the plugin's
throughput workload (streamed async requests, closed loop at concurrency C) and a bare
batch ``engine.generate(input_ids=[...C prompts...])`` with the same prompts and lengths.
Prints tok/s of each and the ratio plugin / bare (the plugin's overhead: it should be >= 0.98).

    python3 scripts/fidelity.py --matrix benches/gpu/h200.yaml --method ar --concurrency 32 \
        --output-tokens 256 --reps 3 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pytest_specbench.engines.base import Request, run_requests  # noqa: E402
from pytest_specbench.engines.sglang import SGLangEngine  # noqa: E402
from pytest_specbench.inputs import prompts
from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.schema import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stream", action="store_true", help="stream the plugin's requests (as TTFT cells do)")
    ap.add_argument("--json")
    a = ap.parse_args()

    m = load(a.matrix)
    eng = SGLangEngine(EngineGroup(m.method(a.method), 1))
    tok = eng.tokenizer()
    sp = {"temperature": 0.0, "max_new_tokens": a.output_tokens, "ignore_eos": True}
    plugin_tokens = plugin_s = bare_tokens = bare_s = 0.0
    rows = []
    for rep in range(a.reps + 1):  # rep 0 warms both paths up, untimed
        ps = prompts.make_prompts(tok, a.prompt_tokens, a.concurrency, seed=1000 + rep)
        eng.flush_cache()
        t = time.perf_counter()
        recs = run_requests(eng, [Request(p, a.output_tokens, stream=a.stream) for p in ps], a.concurrency)
        dt_p = time.perf_counter() - t
        ps = prompts.make_prompts(tok, a.prompt_tokens, a.concurrency, seed=2000 + rep)
        eng.flush_cache()
        t = time.perf_counter()
        outs = eng.engine.generate(input_ids=[list(p) for p in ps], sampling_params=sp)
        dt_b = time.perf_counter() - t
        n_p = sum(r.output_tokens for r in recs)
        n_b = sum(o["meta_info"]["completion_tokens"] for o in outs)
        rows.append({"rep": rep, "plugin_tok_s": n_p / dt_p, "bare_tok_s": n_b / dt_b})
        print(f"rep {rep}: plugin {n_p / dt_p:9.1f} tok/s   bare {n_b / dt_b:9.1f} tok/s", flush=True)
        if rep:
            plugin_tokens += n_p
            plugin_s += dt_p
            bare_tokens += n_b
            bare_s += dt_b
    eng.close()
    ratio = (plugin_tokens / plugin_s) / (bare_tokens / bare_s)
    res = {
        "method": a.method,
        "stream": a.stream,
        "concurrency": a.concurrency,
        "prompt_tokens": a.prompt_tokens,
        "output_tokens": a.output_tokens,
        "reps": a.reps,
        "plugin_tok_s": plugin_tokens / plugin_s,
        "bare_tok_s": bare_tokens / bare_s,
        "ratio": ratio,
        "rows": rows,
        "engine": eng.info,
    }
    print(f"fidelity ratio (plugin / bare, stream={a.stream}) = {ratio:.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2, default=str)


if __name__ == "__main__":
    main()
