"""Computes stats/sequential.py's LEVELS table: per (first look, last look) the constant per-look
level alpha' at which a t-interval looked at after every round from the first look to the last
keeps its simultaneous coverage at 95 % (Pocock's boundary on the nominal-significance scale).

Under normally distributed paired log ratios the joint law of the t-statistics (T_first, ...,
T_last), each centred at the true mean, depends on neither the mean nor the variance, so it is
simulated once: alpha' is the 5 % quantile of the smallest two-sided p-value over the looks.
Run: python scripts/sequential_levels.py [PATHS]  (numpy; about a minute)."""

from __future__ import annotations

import sys

import numpy as np

FIRST = range(2, 11)
LAST = 30
ALPHA = 0.05


def t_two_sided_p(t: np.ndarray, df: int) -> np.ndarray:
    """stats.sequential.t_two_sided_p over an array (the same series)."""
    x = np.arctan(np.abs(t) / np.sqrt(df))
    c2, s, c = np.cos(x) ** 2, np.sin(x), np.cos(x)
    if df % 2:
        total = np.zeros_like(x)
        if df > 1:
            term, total = np.ones_like(x), np.ones_like(x)
            for k in range(1, (df - 3) // 2 + 1):
                term = term * c2 * (2 * k) / (2 * k + 1)
                total = total + term
            total = total * c
        inside = 2 / np.pi * (x + s * total)
    else:
        term, total = np.ones_like(x), np.ones_like(x)
        for k in range(1, (df - 2) // 2 + 1):
            term = term * c2 * (2 * k - 1) / (2 * k)
            total = total + term
        inside = s * total
    return np.clip(1.0 - inside, 0.0, 1.0)


def main(paths: int = 400_000, seed: int = 20261202) -> None:
    rng = np.random.default_rng(seed)
    mins: dict[int, list[np.ndarray]] = {f: [] for f in FIRST}
    chunk = 50_000
    for _ in range(paths // chunk):
        x = rng.standard_normal((chunk, LAST))
        n = np.arange(1, LAST + 1)
        s1 = np.cumsum(x, axis=1)
        s2 = np.cumsum(x * x, axis=1)
        mean = s1 / n
        var = np.where(n > 1, (s2 - n * mean**2) / np.maximum(n - 1, 1), np.nan)
        t = mean / np.sqrt(var / n)
        p = np.full_like(t, 1.0)
        for k in range(2, LAST + 1):
            p[:, k - 1] = t_two_sided_p(t[:, k - 1], k - 1)
        for f in FIRST:
            mins[f].append(np.minimum.accumulate(p[:, f - 1 :], axis=1))
    print("LEVELS = {")
    for f in FIRST:
        m = np.concatenate(mins[f])
        levels = np.quantile(m, ALPHA, axis=0)
        vals = [f"{lv:.5f}" for lv in levels]
        print(f"    {f}: (")
        for i in range(0, len(vals), 10):
            print("        " + ", ".join(vals[i : i + 10]) + ",")
        print("    ),")
    print("}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
