"""The fewest pairs a verdict kept under load may rest on, simulated through the project's own rule
(tests/load_sim.py: paired.compare_all with the load gate, the paired ratios' CV, the t-interval
and the x0.78..x1.28 bar): a cell whose ratio load alone shifts to the bar's edge (x0.78, or
x1.28 the other way; the methods equal when quiet), its pairs spread as load spread real pairs
(the committed busy runs' residuals, at their own spread and at others), keeps "faster" or
"slower" how often, per number of pairs. The nominal rate at the bar's edge is 2.5 % (one side
of a 95 % interval); the fewest pairs is the smallest count from which on no configuration's rate
lies above it by more than its simulation error (1.96 standard errors). Then how far a busy
cell's mean lay from the same cell's quiet runs, against how far quiet runs lay from each other:
the part of a run's reading that no count of pairs within it narrows.

    python scripts/load_pairs.py [--trials 20000]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from load_sim import RESULTS, Spread, busy_cells, false_rate, residuals  # noqa: E402

from pytest_specbench.report.summary import result_of_entry  # noqa: E402
from pytest_specbench.stats import paired  # noqa: E402

NOMINAL = 0.025
PAIRS = (2, 3, 4, 5, 6)
# the busy runs with quiet runs of the same matrix committed beside them
RUN_SETS = (
    (
        ("cpu-default-tour/fresh-busy.json", "cpu-default-tour/fresh-busy5.json"),
        tuple(f"cpu-default-tour/{n}.json" for n in ("fresh-quiet", "fresh-quiet2", "fresh-quiet3"))
        + tuple(f"cpu-default-tour/{n}.json" for n in ("fresh-quiet4", "fresh-quiet5", "tour", "tour2")),
    ),
    (("cpu-race-n2/race-n2.json",), ("cpu-race-n2/race.json", "cpu-race/full.json", "cpu-race/race.json")),
)


def _cell_means(name: str, disturbed: bool) -> dict[str, tuple[float, float, int]]:
    """Per interleaved cell of a run, disturbed or quiet as asked: (mean log ratio, its pairs' sd,
    pairs), the pairs that bore the load alike where disturbed."""
    import json

    out = {}
    for b in json.loads((RESULTS / name).read_text())["benchmarks"]:
        r = result_of_entry(b, b.get("group", ""), {})
        m, ref = r["metrics"], r["metrics"].get("reference")
        if not ref or m.get("saturated") or bool(m.get("disturbed")) != disturbed:
            continue
        if disturbed and not paired._cpu_load_only(m):
            continue
        speeds = paired._speeds(r, ref)
        a, b2 = m.get("round_other_cpu_share") or [], ref.get("round_other_cpu_share") or []
        logs = [
            math.log(x)
            for k, x in enumerate(speeds)
            if x
            and (
                not disturbed
                or (
                    k < len(a)
                    and k < len(b2)
                    and a[k] is not None
                    and b2[k] is not None
                    and abs(a[k] - b2[k]) <= paired.LOAD_GAP
                )
            )
        ]
        if len(logs) >= 2:
            out[b["param"]] = (statistics.fmean(logs), statistics.stdev(logs), len(logs))
    return out


def run_shift() -> tuple[float, int, float, int, list[float]]:
    """(busy, busy cells, quiet, quiet readings, each busy cell's shift as a ratio): the variance
    of a run's cell mean around the cell's value that its own pairs do not account for, as a
    multiple of one pair's variance (E[(mean - value)^2] - s^2/n over s^2, summed): busy cells
    against the mean of the same cells' quiet runs (that mean's own error taken off), and quiet
    runs against each other."""
    bn = bd = qn = qd = 0.0
    nb = nq = 0
    shifts = []
    for busy, quiet in RUN_SETS:
        runs = [_cell_means(q, disturbed=False) for q in quiet]
        cells = {k for r in runs for k in r}
        ref = {}
        for k in cells:
            got = [r[k] for r in runs if k in r]
            if len(got) < 2:
                continue
            grand = statistics.fmean(g[0] for g in got)
            j = len(got)
            for mean, s, n in got:  # E[(m - grand)^2] = (j - 1) / j * (tau^2 + s^2 / n)
                qn += (mean - grand) ** 2 * j / (j - 1) - s * s / n
                qd += s * s
                nq += 1
            between = sum((g[0] - grand) ** 2 for g in got) / (j - 1)
            ref[k] = (grand, between / j)
        for name in busy:
            for k, (mean, s, n) in _cell_means(name, disturbed=True).items():
                if k in ref:
                    shifts.append(math.exp(mean - ref[k][0]))
                    bn += (mean - ref[k][0]) ** 2 - s * s / n - ref[k][1]
                    bd += s * s
                    nb += 1
    return bn / bd, nb, qn / qd, nq, shifts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20000)
    args = ap.parse_args(argv)
    cells = busy_cells()
    pool = residuals(cells)
    spread = Spread(pool)
    sd = spread.sd
    skew = sum(x**3 for x in pool) / len(pool) / sd**3
    kurt = sum(x**4 for x in pool) / len(pool) / sd**4
    print(
        f"{len(pool)} residuals from {len(cells)} disturbed cells kept alike: sd {sd:.3f}, "
        f"skewness {skew:+.2f}, kurtosis {kurt:.2f}\n"
    )
    sigmas = (0.03, 0.06, round(sd, 3), 0.28)
    print("| load's shift | pairs' sd | " + " | ".join(f"{n} pairs" for n in PAIRS) + " |")
    print("|---|---|" + "---|" * len(PAIRS))
    worst = dict.fromkeys(PAIRS, 0.0)
    for bias in (paired.LOAD_BIAS, 1 / paired.LOAD_BIAS):
        for sigma in sigmas:
            row = []
            for n in PAIRS:
                p = false_rate(spread, n, bias, sigma, args.trials, seed=n * 1000 + int(sigma * 1000))
                se = math.sqrt(p * (1 - p) / args.trials)
                worst[n] = max(worst[n], p - 1.96 * se)
                row.append(f"{p:.2%} ± {1.96 * se:.2%}")
            print(f"| x{bias:.2f} | {sigma:.3f} | " + " | ".join(row) + " |")
    fewest = next((n for n in PAIRS if all(worst[m] <= NOMINAL for m in PAIRS if m >= n)), None)
    print(f"\nfewest pairs at which every rate is within its error of {NOMINAL:.1%}: {fewest}")
    busy, nb, quiet, nq, shifts = run_shift()
    print(
        f"a run's shift from the cell's value, in pairs' variances: busy {busy:.2f} ({nb} cells), "
        f"quiet {quiet:.2f} ({nq} readings)"
    )
    lo, hi = paired.LOAD_BIAS, 1 / paired.LOAD_BIAS
    beyond = [x for x in shifts if not lo <= x <= hi]
    print(
        f"busy cells' shifts from their quiet runs' mean: x{min(shifts):.3f}..x{max(shifts):.3f}; "
        f"beyond x{lo:.2f}..x{hi:.2f}: {len(beyond)} ({', '.join(f'x{x:.3f}' for x in beyond) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
