"""The same method on two backends, cell by cell: tok/s of B over A with its 95 % interval over
paired rounds (both got the same requests: request_digests), TTFT p50 and accept length of each.

    python scripts/backend_ratio.py RUN.json ar=ar-server ngram=ngram-server [...]
"""

from __future__ import annotations

import json
import sys

from pytest_specbench.report.decide import compare, fmt_interval


def main(argv: list[str]) -> int:
    doc = json.loads(open(argv[0]).read())
    by_method: dict[tuple[str, tuple], dict] = {}
    for b in doc["benchmarks"]:
        p = b["params"]
        shape = tuple(sorted((k, str(v)) for k, v in p.items() if k != "method"))
        by_method[(p["method"], shape)] = b
    print("| cell shape | A | B | A tok/s | B tok/s | B / A [95%] | verdict | TTFT ms A / B | accept A / B |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pair in argv[1:]:
        a_name, b_name = pair.split("=")
        for (m, shape), a in sorted(by_method.items()):
            if m != a_name or (b_name, shape) not in by_method:
                continue
            b = by_method[(b_name, shape)]
            c = compare(b, a)
            ea, eb = a["extra_info"], b["extra_info"]
            label = ", ".join(f"{k}={v}" for k, v in shape if k != "workload")

            def f(v: float | None, spec: str = ".1f") -> str:
                return "-" if v is None else format(v, spec)

            print(
                f"| {label} | {a_name} | {b_name} | {f(ea.get('output_tokens_per_s'))} | "
                f"{f(eb.get('output_tokens_per_s'))} | {f(c.get('speedup_vs_ar'), '.3f')}"
                f"{fmt_interval(c.get('speedup_vs_ar_ci95'))} | {c.get('speedup_verdict', '-')} | "
                f"{f(ea.get('ttft_ms_p50'))} / {f(eb.get('ttft_ms_p50'))} | "
                f"{f(ea.get('accept_length'), '.2f')} / {f(eb.get('accept_length'), '.2f')} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
