"""What the pooled sentence (report/pooled.py) says over a compare pair's shapes, simulated through
the project's own code (tests/pooled_sim.py: cells stopped by their stopping rule, a family's
drift from its sentinel, report/pooled.py's figure): per configuration, how often its interval
covers the true mean effect, how often it excludes 1 where every shape is truly 5-20 % faster,
and how often it excludes 1 where the two methods are equal. Beside the rule, three others read
from the same runs: a widened shape's bound as a variance (its widened half-width over its own t
multiplier, in quadrature), the widened shapes' intervals as measured (no bound), and only the
shapes with a verdict (the rule before every shape was pooled). Prints a Markdown table
(docs/metrics.md "Pooled comparisons").

    python scripts/pooled_power.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pooled_sim import run  # noqa: E402

from pytest_specbench.report import decide, pooled  # noqa: E402
from pytest_specbench.report.sides import _shapes, side  # noqa: E402
from pytest_specbench.stats import paired  # noqa: E402


def effects(n: int) -> list[float]:
    return [1.05 + 0.15 * i / (n - 1) for i in range(n)]


CONFIGS = (
    # (label, kinds in order of the shapes' true effect, smallest first; the family's drift)
    ("8 shapes, quiet", ["quiet"] * 8, -0.06),
    (
        "10 shapes: 1 under load, 2 inside a drift of -6 %",
        ["drift", "load"] + ["quiet"] * 3 + ["drift"] + ["quiet"] * 4,
        -0.06,
    ),
    (
        "10 shapes: 1 under load, 2 inside a drift of -10 %",
        ["drift", "load"] + ["quiet"] * 3 + ["drift"] + ["quiet"] * 4,
        -0.10,
    ),
    (
        "8 shapes: 2 under load, 2 inside a drift of -6 %",
        ["drift", "load", "drift", "load"] + ["quiet"] * 4,
        -0.06,
    ),
    ("4 shapes: 2 under load", ["load", "quiet", "load", "quiet"], -0.06),
)


def _interval(parts: list[tuple[float, float, int]], level: float, bias: float = 0.0) -> tuple[float, float]:
    _, lo, hi = paired.pooled_log_interval(parts, level, paired.satterthwaite_df(parts))
    return lo * math.exp(-bias), hi * math.exp(bias)


def _verdicts_only(doc: dict[str, Any]) -> tuple[float, float] | None:
    """The shapes whose verdict was drawn or not separated, as measured; those withheld left out."""
    est = []
    for cells in _shapes(doc).values():
        ca, cb = side("a", cells)[None], side("b", cells)[None]
        if str(decide.compare(ca, cb).get("speedup_verdict") or "").startswith("no verdict"):
            continue
        (e,), _ = pooled._estimates({"benchmarks": [ca, cb], "specbench": doc["specbench"]}, "a", "b")
        est.append(e)
    if not est:
        return None
    return _interval([(e["log"], e["se"] ** 2, e["df"]) for e in est], min(e["level"] for e in est))


def figures(doc: dict[str, Any]) -> dict[str, tuple[float, float] | None]:
    """One run's interval by each rule."""
    (f,) = pooled.figures(doc)
    est, _ = pooled._estimates(doc, "a", "b")
    level = min(e["level"] for e in est)
    raw = [(e["log"], e["se"] ** 2, e["df"]) for e in est]
    var = [(e["log"], ((e["t"] * e["se"] + e["band"]) / e["t"]) ** 2, e["df"]) for e in est]
    return {
        "the rule (bounds in full)": (f["lo"], f["hi"]),
        "bounds as a variance": _interval(var, level),
        "no bound": _interval(raw, level),
        "verdicts only": _verdicts_only(doc),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args(argv)
    print("| shapes | rule | covers the true mean | excludes 1 (5-20 % faster) | excludes 1 (equal) |")
    print("|---|---|---|---|---|")
    for label, kinds, drift in CONFIGS:
        eff = effects(len(kinds))
        truth = math.exp(statistics.fmean(math.log(x) for x in eff))
        counts: dict[str, list[int]] = {}
        for seed, (xs, true) in enumerate(((eff, truth), ([1.0] * len(kinds), 1.0))):
            rng = random.Random(seed)
            for _ in range(args.runs):
                for rule, iv in figures(run(rng, xs, kinds, drift=drift)).items():
                    c = counts.setdefault(rule, [0, 0, 0])
                    if iv is None:
                        continue
                    lo, hi = iv
                    if seed == 0:
                        c[0] += lo <= true <= hi
                        c[1] += lo > 1 or hi < 1
                    else:
                        c[2] += lo > 1 or hi < 1
        for rule, (cov, power, false) in counts.items():
            n = args.runs
            print(f"| {label} | {rule} | {cov / n:.1%} | {power / n:.1%} | {false / n:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
