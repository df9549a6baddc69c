"""Paired comparisons between the methods of one cell shape. Pure functions, no pytest, no I/O.

Every method of a shape gets the same requests at the same times (workloads.request_seed;
the rounds' ``request_digests`` in the JSON show it), so round i of method M and round i of
its AR baseline did the same work and can be compared pair by pair:

- closed loop: the speedup is the geometric mean over paired rounds of M's round tok/s ÷ the
  baseline's, with a 95 % t-interval on the log ratios (n - 1 degrees of freedom);
- open loop (``request_rate``): tok/s follows the offered load, so the speedup is the ratio of
  median E2E latencies (baseline p50 ÷ M p50; > 1: M is faster), per paired round (every round
  replays the same arrival schedule for both), with the same t-interval over rounds. Requests of
  one round share a queue (a slow moment delays everything behind it), so they are not
  independent draws and an interval over them is far too narrow; rounds are. A cell that
  saturated (its client queue grew) gets no verdict;
- acceptance between two speculative methods: the mean per-request difference of accept
  lengths over the requests both ran, with a 95 % t-interval.

A ratio is "faster" / "slower" only when its whole interval lies beyond 1 ± 2 % (EQUIVALENCE,
the drift between groups that run one after the other, which the rounds' spread does not hold);
one whose whole interval lies within 1 ± 2 % is "within ±2%"; anything else is "not separated". A
difference (null 0.0) is "higher" / "lower" when its interval excludes 0. One pair gives a point
estimate and no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .sequential import Looks, union

# two-sided 95 % quantiles of Student's t, by degrees of freedom (1..30); above 30: 1.96
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
CV_WARN = 0.05  # the summary warns about cells whose round-to-round CV is above this
# Ratios whose whole interval lies within 1 ± this are reported as a tie ("within ±2%"): methods
# run one after the other (one engine per group), so slow drift of the machine between groups is
# not in the rounds' spread. Two identical engines (tests/test_paired.py) differed by up to 1.3%.
EQUIVALENCE = 0.02
# The drift allowed between two engine groups measured apart (two TP sizes, two settings of a sweep
# each in its own group): an H200 raced run drifted -12.6 % over 5 groups (docs/results/h200-race).
TP_DRIFT = 0.13
# A cell disturbed by other processes' CPU keeps the verdict of a comparison whose baseline ran
# interleaved with it when the load fell alike on both halves of every pair: the share of the
# cores others took during the cell's round and during the baseline's round of the same pair
# differ by at most LOAD_GAP (the share that disturbs a quiet cell), and the paired ratios vary
# by at most PAIR_CV_MAX. Load also shifts the ratio itself (methods that spend more compute per
# token lose more of it: draft = target read x0.78-0.82 beside two busy loops, x0.91-1.09 quiet),
# so such a verdict is "faster" / "slower" only beyond the largest shift load alone was measured to
# give a ratio, LOAD_BIAS, and its inverse: x0.78..x1.28 (docs/metrics.md "Verdicts under load" has
# the evidence; a pure load bias of x0.78 then keeps a verdict at most 2.5 % of the time).
LOAD_GAP = 0.10
PAIR_CV_MAX = 0.10
LOAD_BIAS = 0.78


def t975(df: int) -> float:
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1; got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Interval:
    point: float
    lo: float | None  # None: one pair, no interval
    hi: float | None
    n: int  # pairs (rounds or requests) it rests on
    t: float | None = None  # the multiplier its half-width was read with (pooled figures reuse it)
    df: int | None = None  # its degrees of freedom

    def verdict(self, null: float = 1.0) -> str:
        """For a ratio (null 1.0): "within ±2%" when the whole interval lies inside
        [1 - EQUIVALENCE, 1 + EQUIVALENCE], else "faster" / "slower" when it excludes 1.0, else
        "not separated". For a difference (null 0.0): "higher" / "lower" / "not separated"."""
        if self.lo is None or self.hi is None:
            return "one pair: no interval"
        if null == 1.0:
            if 1 - EQUIVALENCE <= self.lo and self.hi <= 1 + EQUIVALENCE:
                return f"within ±{EQUIVALENCE:.0%}"
            if self.lo > 1 + EQUIVALENCE:
                return "faster"
            if self.hi < 1 - EQUIVALENCE:
                return "slower"
            return "not separated"
        if self.lo > null:
            return "higher"
        if self.hi < null:
            return "lower"
        return "not separated"


def _sd(v: Sequence[float]) -> float:
    """Sample standard deviation in floats (statistics.stdev's exact arithmetic costs ~40x more,
    which the sequential rules' simulations pay at every look)."""
    m = math.fsum(v) / len(v)
    return math.sqrt(math.fsum((x - m) ** 2 for x in v) / (len(v) - 1))


def _t(n: int, looks: Looks | None) -> float:
    """The interval's t multiplier after n pairs: 95 % for one look, else the sequential
    boundary of the looks the rounds' count was chosen at (stats/sequential.py)."""
    return t975(n - 1) if looks is None or looks.one else looks.critical(n)


def ratio_interval(num: Sequence[float], den: Sequence[float], looks: Looks | None = None) -> Interval | None:
    """Paired ratios num[i] / den[i]: their geometric mean with a 95 % t-interval on the logs
    (``looks``: 95 % over every look of a sequential rule)."""
    logs = [math.log(a / b) for a, b in zip(num, den, strict=False) if a > 0 and b > 0]
    if not logs:
        return None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Interval(math.exp(mean), None, None, 1)
    t = _t(len(logs), looks)
    half = t * _sd(logs) / math.sqrt(len(logs))
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs), t, len(logs) - 1)


def unpaired_ratio_interval(
    num: Sequence[float], den: Sequence[float], looks: Looks | None = None
) -> Interval | None:
    """The ratio of two geometric means from independent samples (each a cell's rounds against
    the baseline beside it): Welch's t-interval on the difference of the mean logs, every round
    of both used (pairing by index would stop at the shorter one's count). A sample of one value
    with no spread (the baseline's 1.0 against itself) reduces it to the other's own interval."""
    la = [math.log(x) for x in num if x > 0]
    lb = [math.log(x) for x in den if x > 0]
    if not la or not lb:
        return None
    mean = statistics.fmean(la) - statistics.fmean(lb)
    if len(la) < 2:
        return Interval(math.exp(mean), None, None, 1)
    w = welch(la, lb)
    assert w is not None
    _, var, df = w
    if var == 0:
        return Interval(math.exp(mean), math.exp(mean), math.exp(mean), len(la))
    t = _t(df + 1, looks)
    half = t * math.sqrt(var)
    return Interval(
        math.exp(mean), math.exp(mean - half), math.exp(mean + half), min(len(la), len(lb)), t, df
    )


def welch(a: Sequence[float], b: Sequence[float], extra_var: float = 0.0) -> tuple[float, float, int] | None:
    """(mean(a) - mean(b), its variance, Welch-Satterthwaite degrees of freedom rounded down, which
    is wider) of two independent samples of logs; a sample of one value counts as a constant (its
    variance 0: the baseline against itself); None when neither has two values. ``extra_var`` is
    added to the variance (a known component, with no degrees of freedom of its own)."""
    if not a or not b or (len(a) < 2 and len(b) < 2):
        return None
    va = _sd(a) ** 2 / len(a) if len(a) > 1 else 0.0
    vb = _sd(b) ** 2 / len(b) if len(b) > 1 else 0.0
    d = math.fsum(a) / len(a) - math.fsum(b) / len(b)
    parts = (va**2 / (len(a) - 1) if len(a) > 1 else 0.0) + (vb**2 / (len(b) - 1) if len(b) > 1 else 0.0)
    df = max(1, int((va + vb) ** 2 / parts)) if parts > 0 else max(len(a), len(b)) - 1
    return d, va + vb + extra_var, df


def pooled_log_interval(
    parts: Sequence[tuple[float, float, int]], level: float, df: int | None = None
) -> tuple[float, float, float]:
    """The mean of several independent log-ratio estimates, each (mean log, its variance, its
    degrees of freedom): (ratio, lo, hi), the interval at two-sided ``level`` from the standard
    error sqrt(sum of variances) / N with the fewest degrees of freedom (conservative), or ``df``
    where given (``satterthwaite_df``)."""
    from .sequential import t_quantile

    n = len(parts)
    mean = sum(p[0] for p in parts) / n
    se = math.sqrt(sum(p[1] for p in parts)) / n
    if df is None:
        t = t_quantile(level, max(1, min(p[2] for p in parts)))
    else:
        t = t_quantile(level, max(1, df))
    return math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se)


def log_se(lo: float, hi: float, t: float) -> float:
    """The standard error of a ratio's mean log that its interval [lo, hi] was read with at
    multiplier ``t``: half the interval's log width over t."""
    return (math.log(hi) - math.log(lo)) / (2 * t)


def satterthwaite_df(parts: Sequence[tuple[float, float, int]]) -> int:
    """The Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates, each
    (mean, variance, degrees of freedom): (sum v)^2 / sum(v^2 / df), rounded down (wider). Never
    fewer than the fewest of the parts' nor more than their sum; the fewest where no part varies."""
    fewest = max(1, min(p[2] for p in parts))
    den = sum(p[1] ** 2 / max(1, p[2]) for p in parts)
    if den <= 0:
        return fewest
    return max(fewest, int(sum(p[1] for p in parts) ** 2 / den))


def mean_interval(values: Sequence[float], looks: Looks | None = None) -> Interval | None:
    """The mean of paired differences with a 95 % t-interval (``looks``: over every look)."""
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, None, None, 1)
    half = _t(len(values), looks) * _sd(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def looks_of(*cells: Mapping[str, Any] | None) -> Looks | None:
    """The looks at which the cells' round counts were chosen (extra_info.sequential), together."""
    return union(*(Looks.of(c.get("extra_info")) for c in cells if c is not None))


# Cells measured apart (no baseline beside them) stop on their own rounds' spread (deciding/stopping.py:
# their interval within ±2 %, a rule on the variance, never on the comparison's mean): a fixed-width
# stop in the manner of Chow and Robbins, whose interval covers less than its level at few rounds
# (91-92 % at 95 % over looks 3..10-30, tests/test_race_power.py). Their comparison reads a 97.5 %
# interval (94-97 % covered there) rather than paying for every look as a stop on the mean must.
APART_LOOKS = Looks(2, 2, 2)


def apart_looks(*cells: Mapping[str, Any] | None) -> Looks | None:
    """The looks a comparison of cells measured apart reads at: none where both ran fixed rounds
    (the ordinary 95 %), a race's (a family of comparisons: stops on means) where one raced, else
    ``APART_LOOKS`` (rounds chosen by their own spread)."""
    lk = looks_of(*cells)
    if lk is None or lk.family > 1:
        return lk
    return APART_LOOKS


def _median(v: Sequence[float]) -> float:
    return statistics.median(v)


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample standard deviation ÷ mean); None below two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


# ------------------------------------------------------------------------- over results


def round_rates(m: Mapping[str, Any], round_times: Sequence[float]) -> list[float]:
    """A cell's tok/s per timed round: ``round_tokens_per_s`` when recorded, else (older JSONs)
    the cell's output tokens spread evenly over its rounds."""
    rates = m.get("round_tokens_per_s")
    if rates:
        return [float(x) for x in rates]
    tokens = m.get("output_tokens")
    if not tokens or not round_times or not all(t > 0 for t in round_times):
        return []
    return [tokens / len(round_times) / t for t in round_times]


def _paired_rounds(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[int], str]:
    """Indices of the timed rounds of two cells that got the same requests, and how that is
    known: "digest" (request digests agree), "unverified" (an older JSON without digests: rounds
    paired by index), or "unpaired" (digests differ: the cells did not get the same requests)."""
    da, db = a["metrics"].get("request_digests"), b["metrics"].get("request_digests")
    if da and db:
        same = [i for i, (x, y) in enumerate(zip(da, db, strict=False)) if x == y]
        return same, "digest" if same else "unpaired"
    return list(range(min(len(a.get("rates", [])), len(b.get("rates", []))))), "unverified"


def _accepts(m: Mapping[str, Any]) -> dict[str, float]:
    pr = m.get("per_request") or {}
    out = {}
    for tag, n, v in zip(
        pr.get("tag") or [], pr.get("output_tokens") or [], pr.get("verify_steps") or [], strict=False
    ):
        if v:
            out[tag] = n / v
    return out


def compare(cell: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """``cell`` against ``base`` (each a cell's result: "params", "round_times" and "metrics",
    with its "request_digests"):
    the speedup of cell over base with its interval, the metric it rests on and the verdict."""
    ref, bref = cell["metrics"].get("reference"), base["metrics"].get("reference")
    if ref and ref.get("method") == base["params"]["method"]:
        return _interleaved(cell, ref)
    if ref and bref and ref.get("method") == bref.get("method"):  # two methods, one baseline each
        return _interleaved(cell, ref, base)
    if bref and bref.get("method") == cell["params"]["method"]:  # the baseline against a method
        return _inverse(_interleaved(base, bref))
    a = {**cell, "rates": round_rates(cell["metrics"], cell.get("round_times") or [])}
    b = {**base, "rates": round_rates(base["metrics"], base.get("round_times") or [])}
    idx, how = _paired_rounds(a, b)
    out: dict[str, Any] = {"speedup_pairing": how}
    if how == "unpaired":
        out["speedup_verdict"] = "unpaired: the two cells got different requests (request_digests differ)"
        return out
    if cell["params"].get("request_rate"):
        pa, pb = round_p50s(cell["metrics"]), round_p50s(base["metrics"])
        iv = ratio_interval(
            [pb[i] for i in idx if i < len(pb)], [pa[i] for i in idx if i < len(pa)], apart_looks(cell, base)
        )
        out["speedup_metric"] = "latency_s_p50 ratio (open loop; paired rounds' p50 latency, t-interval)"
        if iv is None:  # an older JSON without per-request latencies
            la, lb = cell["metrics"].get("latency_s_p50"), base["metrics"].get("latency_s_p50")
            iv = Interval(lb / la, None, None, 0) if la and lb else None
    elif (
        len(a["rates"]) != len(b["rates"])
        and min(len(a["rates"]), len(b["rates"])) >= 2
        and idx == list(range(min(len(a["rates"]), len(b["rates"]))))
    ):
        # measured apart and stopped at different rounds: every round of both, unpaired (Welch);
        # pairing would keep only the shorter one's rounds (the baseline often stops first)
        iv = unpaired_ratio_interval(a["rates"], b["rates"], apart_looks(cell, base))
        out["speedup_pairing"] = "all rounds"
        out["speedup_metric"] = "output tok/s ratio (every round of both, unpaired: Welch t-interval)"
    else:
        ra, rb = a["rates"], b["rates"]
        iv = ratio_interval(
            [ra[i] for i in idx if i < len(ra)], [rb[i] for i in idx if i < len(rb)], apart_looks(cell, base)
        )
        out["speedup_metric"] = "output tok/s ratio (paired rounds; t-interval)"
    if iv is None:
        return out
    out.update(_speedup_fields(iv))
    withheld = no_verdict_reason(cell["metrics"], "the cell") or no_verdict_reason(
        base["metrics"], "its baseline"
    )
    if withheld:
        out["speedup_verdict"] = f"no verdict: {withheld}"
    return out


def _speedup_fields(iv: Interval) -> dict[str, Any]:
    out = {
        "speedup_vs_ar": iv.point,
        "speedup_vs_ar_ci95": None if iv.lo is None else [iv.lo, iv.hi],
        "speedup_pairs": iv.n,
        "speedup_verdict": iv.verdict(),
    }
    if iv.t is not None and iv.lo is not None:  # what a pooled figure reads its standard error with
        out.update(speedup_t=round(iv.t, 6), speedup_df=iv.df)
    return out


def _speeds(cell: Mapping[str, Any], ref: Mapping[str, Any]) -> list[float | None]:
    """Per timed round, the cell's speed relative to its interleaved baseline round: tok/s ÷ the
    baseline's (closed loop) or the baseline's p50 latency ÷ the cell's (open loop); None where
    a round has no figure."""
    m = cell["metrics"]
    if cell["params"].get("request_rate"):
        own, theirs = round_p50s(m), list(ref.get("round_latency_s_p50") or [])
        return [b / a if a and b else None for a, b in zip(own, theirs, strict=False)]
    own = round_rates(m, cell.get("round_times") or [])
    return [
        a / b if a and b else None for a, b in zip(own, ref.get("round_tokens_per_s") or [], strict=False)
    ]


def _interleaved(
    cell: Mapping[str, Any], ref: Mapping[str, Any], other: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``cell`` against its baseline's rounds interleaved with its own (``metrics.reference``):
    round k of the cell with round k of the baseline, run within seconds of each other on the
    same requests, so the pairs share the machine's state; the t-interval is over those pairs.
    ``other``: a second cell with its own interleaved rounds of the same baseline (two methods
    of a shape): round k's speed relative to its baseline, the cell's ÷ the other's."""
    s = _speeds(cell, ref)
    o = _speeds(other, other["metrics"]["reference"]) if other is not None else [1.0] * len(s)
    pairs = [(a, b) for a, b in zip(s, o, strict=False) if a and b]
    m = cell["metrics"]
    open_loop = bool(cell["params"].get("request_rate"))
    out: dict[str, Any] = {
        "speedup_pairing": "interleaved",
        "speedup_metric": (
            "latency_s_p50 ratio (open loop; the baseline's rounds interleaved with the cell's, "
            "paired rounds' p50 latency, t-interval)"
            if open_loop
            else "output tok/s ratio (the baseline's rounds interleaved with the cell's; "
            "paired rounds, t-interval)"
        ),
    }
    if other is not None and len({len([a for a in s if a]), len([b for b in o if b])} - {0, 1}) == 2:
        # two cells that stopped at different rounds, each against its own baseline beside it:
        # independent samples, every round of both (pairing by index would drop the longer one's)
        iv = unpaired_ratio_interval([a for a in s if a], [b for b in o if b], looks_of(cell, other))
        out["speedup_metric"] += "; every round of both, unpaired (Welch)"
    else:
        iv = ratio_interval([p[0] for p in pairs], [p[1] for p in pairs], looks_of(cell, other))
    if iv is None:
        return out
    out.update(_speedup_fields(iv))
    withheld = None
    kept = []
    halves = [(m, ref, "the cell", s)]
    if other is not None:
        halves.append((other["metrics"], other["metrics"]["reference"], "the other cell", o))
    for mm, r, who, speeds in halves:
        why = no_verdict_reason(mm, who)
        if why and _cpu_load_only(mm):
            spread = load_spread(mm.get("round_other_cpu_share"), r.get("round_other_cpu_share"), speeds)
            if spread.startswith("kept: "):
                kept.append(spread.removeprefix("kept: ") if other is None else f"{who}: {spread[6:]}")
                why = None
            else:
                why = f"{who} was disturbed and {spread}"
        withheld = withheld or why
    if kept and not withheld:
        out["speedup_under_load"] = "; ".join(kept) + (
            f"; faster or slower only beyond x{LOAD_BIAS:.2f}..x{1 / LOAD_BIAS:.2f} "
            "(what load alone shifted a ratio)"
        )
        lo, hi = iv.lo or 0.0, iv.hi or 0.0
        if (out["speedup_verdict"] == "faster" and lo <= 1 / LOAD_BIAS) or (
            out["speedup_verdict"] == "slower" and hi >= LOAD_BIAS
        ):
            out["speedup_verdict"] = "not separated"
    for r in (ref, other["metrics"]["reference"] if other is not None else None):
        if not withheld and r and r.get("errors"):
            withheld = f"a baseline's interleaved rounds had {r['errors']} failed requests"
        if not withheld and r and r.get("saturated"):
            withheld = "a baseline's interleaved rounds saturated (requests waited for a free slot)"
    if withheld:
        out["speedup_verdict"] = f"no verdict: {withheld}"
    return out


def _cpu_load_only(m: Mapping[str, Any]) -> bool:
    """Disturbed by other processes' CPU time alone (not saturated, no process on its GPUs)."""
    d = str(m.get("disturbed") or "")
    return d.startswith("other processes took") and "GPU" not in d and not m.get("saturated")


def load_spread(
    cell: Sequence[float | None] | None, base: Sequence[float | None] | None, speeds: Sequence[float | None]
) -> str:
    """Whether the pairs of an interleaved comparison bore a load alike: ``cell`` and ``base``
    are the shares of the cores others took in each timed round of the cell and of its
    baseline, ``speeds`` the pairs' ratios. "kept: ..." when every pair's two shares are within
    LOAD_GAP and the ratios' CV is at most PAIR_CV_MAX, else why not."""
    n = len(speeds)
    if not cell or not base or len(cell) < n or len(base) < n or n < 2:
        return "its rounds' load was not measured per round for both halves of every pair"
    if any(cell[k] is None or base[k] is None for k in range(n)):
        return "its rounds' load was not measured per round for both halves of every pair"
    a = [float(cell[k]) for k in range(n)]  # type: ignore[arg-type]
    b = [float(base[k]) for k in range(n)]  # type: ignore[arg-type]
    gaps = [abs(x - y) for x, y in zip(a, b, strict=True)]
    k = max(range(n), key=gaps.__getitem__)
    if gaps[k] > LOAD_GAP:
        return (
            f"the load differed between the halves of a pair (round {k + 1}: others took {a[k]:.0%} "
            f"of the cores in its round, {b[k]:.0%} in the baseline's; more than {LOAD_GAP:.0%} apart)"
        )
    ratios = [x for x in speeds if x]
    spread = cv(ratios)
    if spread is None or spread > PAIR_CV_MAX:
        return f"its paired ratios vary by {spread or 0:.0%} (CV, more than {PAIR_CV_MAX:.0%})"
    return (
        f"kept: others took {min(a + b):.0%}-{max(a + b):.0%} of the cores, alike in both halves of "
        f"every pair (at most {gaps[k]:.0%} apart; paired ratios' CV {spread:.1%})"
    )


def _inverse(c: dict[str, Any]) -> dict[str, Any]:
    """A comparison of A against B as one of B against A: 1/x, the interval flipped."""
    out = dict(c)
    if c.get("speedup_vs_ar"):
        out["speedup_vs_ar"] = 1 / c["speedup_vs_ar"]
    if c.get("speedup_vs_ar_ci95"):
        lo, hi = c["speedup_vs_ar_ci95"]
        out["speedup_vs_ar_ci95"] = [1 / hi, 1 / lo]
    flip = {"faster": "slower", "slower": "faster"}
    if c.get("speedup_verdict") in flip:
        out["speedup_verdict"] = flip[c["speedup_verdict"]]
    return out


def no_verdict_reason(m: Mapping[str, Any], who: str) -> str | None:
    """Why a comparison with this cell gets no faster/slower verdict: a saturated open loop (the
    engine did not keep up with the offered rate) or a run disturbed by other processes."""
    if m.get("saturated"):
        offered = m.get("offered_request_rate")
        got = m.get("achieved_request_rate")
        at = f" at {got:.2f} of {offered:.2f} req/s offered" if got is not None and offered else ""
        return f"{who} saturated{at}"
    if m.get("disturbed"):
        return f"{who} was disturbed ({m['disturbed']})"
    return None


def round_p50s(m: Mapping[str, Any]) -> list[float]:
    """Per timed round (in order), the median E2E latency of its requests (from per_request tags
    ``roundN/...``); empty for an older JSON without them."""
    pr = m.get("per_request") or {}
    by: dict[int, list[float]] = {}
    for tag, lat in zip(pr.get("tag") or [], pr.get("latency_s") or [], strict=False):
        head = str(tag).split("/", 1)[0]
        if head.startswith("round") and head[5:].isdigit():
            by.setdefault(int(head[5:]), []).append(float(lat))
    return [statistics.median(by[r]) for r in sorted(by)]


def accept_difference(cell: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per-request accept length of ``cell`` minus ``other`` over the requests both ran."""
    a, b = _accepts(cell["metrics"]), _accepts(other["metrics"])
    tags = sorted(set(a) & set(b))
    iv = mean_interval([a[t] - b[t] for t in tags])
    if iv is None:
        return None
    return {
        "diff": iv.point,
        "ci95": None if iv.lo is None else [iv.lo, iv.hi],
        "requests": iv.n,
        "verdict": iv.verdict(0.0),
    }


def axes(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """A cell's shape: every param but the method, as sorted (name, str(value)) pairs."""
    return tuple(sorted((k, str(v)) for k, v in params.items() if k != "method"))


def compare_all(
    results: Sequence[Mapping[str, Any]], baseline: str | Mapping[str, str | None]
) -> dict[int, dict[str, Any]]:
    """Index -> the cell's comparison fields: speedup over its baseline method at the same shape
    (``compare``) and, for a speculative cell, ``accept_vs`` every other speculative method of
    the same shape and baseline. ``baseline``: one name, or method -> its baseline."""

    def base_of(method: str) -> str | None:
        return baseline if isinstance(baseline, str) else baseline.get(method)

    speculative = {r["params"]["method"] for r in results if r["metrics"].get("accept_length") is not None}
    by: dict[tuple[Any, str], Mapping[str, Any]] = {}
    for r in results:
        by[(axes(r["params"]), r["params"]["method"])] = r
    out: dict[int, dict[str, Any]] = {}
    for i, r in enumerate(results):
        method, shape = r["params"]["method"], axes(r["params"])
        name = base_of(method)
        fields: dict[str, Any] = {}
        base = by.get((shape, name)) if name else None
        if name == method and r["metrics"].get("output_tokens_per_s"):  # the baseline itself
            fields.update(speedup_vs_ar=1.0, speedup_verdict="baseline")
        elif base is None and name and (r["metrics"].get("reference") or {}).get("method") == name:
            fields.update(_interleaved(r, r["metrics"]["reference"]))  # its own cell not in this run
        elif base is not None and r["metrics"].get("output_tokens_per_s"):
            fields.update(compare(r, base))
            ra = (r.get("extra_info") or {}).get("resumed_from")
            rb = (base.get("extra_info") or {}).get("resumed_from")
            interleaved = fields.get("speedup_pairing") == "interleaved"  # within the cell: one run
            if ra != rb and "speedup_verdict" in fields and not interleaved:  # one copied from another run
                fields["speedup_across_runs"] = True
                fields["speedup_verdict"] += " (across runs: the baseline or the cell was resumed)"
        if method in speculative:
            vs = {}
            for (s, other), o in by.items():
                if s == shape and other != method and other in speculative and base_of(other) == name:
                    d = accept_difference(r, o)
                    if d is not None:
                        vs[other] = d
            if vs:
                fields["accept_vs"] = vs
        out[i] = fields
    return out
