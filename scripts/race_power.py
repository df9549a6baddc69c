"""What racing with an indifference zone decides, simulated through the project's own deciding code
(tests/race_sim.py: Race, the stopping protocol, deciding/selection.py): per configuration, how
often a member is dropped and by which round, how often one within δ/2 is, and the rounds the
shape's cells ran. Prints a Markdown table (docs/metrics.md "Racing with an indifference zone").

    python scripts/race_power.py [--runs 1000]

Round CV is that of the figure a comparison reads (a member's paired ratio over the baseline
beside it); ``per engine`` rows give each engine's own rounds that CV instead (the ratio's is
then sqrt(2) times larger)."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from race_sim import shape  # noqa: E402

CONFIGS = (
    # (label, speeds, who, round CV of the ratio)
    ("10 % behind, CV 3 %", {"lead": 1.30, "m10": 1.17, "near": 1.30 * 0.995, "m20": 1.04}, "m10", 0.03),
    (
        "10 % behind, CV 3 % per engine",
        {"lead": 1.30, "m10": 1.17, "near": 1.30 * 0.995, "m20": 1.04},
        "m10",
        0.03 * math.sqrt(2),
    ),
    ("5 % behind, CV 0.5 %", {"lead": 1.30, "m5": 1.30 * 0.95, "near": 1.30 * 0.99}, "m5", 0.005),
    (
        "5 % behind, CV 0.5 % per engine",
        {"lead": 1.30, "m5": 1.30 * 0.95, "near": 1.30 * 0.99},
        "m5",
        0.005 * math.sqrt(2),
    ),
    ("6 % behind, CV 3 %", {"lead": 1.30, "m6": 1.30 * 0.94}, "m6", 0.03),
    ("20 % behind, CV 3 %", {"lead": 1.30, "m20": 1.04}, "m20", 0.03),
    # the rule's boundary: exactly δ behind two equal leaders (the crowned one biased upward)
    (
        "exactly δ behind, CV 3 %",
        {"lead": 1.30, "lead2": 1.30, "near": 1.30 * 0.98, "b2": 1.30 * 0.98},
        "b2",
        0.03,
    ),
    (
        "exactly δ behind, CV 0.5 %",
        {"lead": 1.30, "lead2": 1.30, "near": 1.30 * 0.98, "b2": 1.30 * 0.98},
        "b2",
        0.005,
    ),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    a = ap.parse_args(argv)
    print(
        "| configuration | dropped | by round 3 | by round 6 | within δ/2 (or at δ) dropped | any false drop "
        "| rounds (leader, member) |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, speeds, who, cv in CONFIGS:
        runs = [shape(speeds, seed, cv) for seed in range(a.runs)]
        n = len(runs)
        drop = sum(o[who]["dropped"] for o in runs) / n
        by3 = sum(o[who]["dropped"] and o[who]["rounds"] <= 3 for o in runs) / n
        by6 = sum(o[who]["dropped"] and o[who]["rounds"] <= 6 for o in runs) / n
        near = sum(o["near"]["dropped"] for o in runs) / n if "near" in speeds else float("nan")
        false = sum(o["lead"]["dropped"] or ("near" in o and o["near"]["dropped"]) for o in runs) / n
        if label.startswith("exactly"):  # every drop there is within δ: false
            false = sum(any(o[k]["dropped"] for k in speeds) for o in runs) / n
        lead_r = statistics.fmean(o["lead"]["rounds"] for o in runs)
        mem_r = statistics.fmean(o[who]["rounds"] for o in runs)
        print(
            f"| {label} | {drop:.1%} | {by3:.1%} | {by6:.1%} | "
            f"{'-' if math.isnan(near) else f'{near:.1%}'} | {false:.1%} | {lead_r:.1f}, {mem_r:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
