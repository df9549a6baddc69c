"""A ``compare`` pair simulated over its shapes and pooled through the project's own code: each
cell's rounds stop under its stopping rule (deciding/stopping.py, looks 3..10), the cells are
written as results-JSON entries, a family's drift is read from its sentinel (stats/drift.py), and
the pooled figure is report/pooled.py's. Not a test module: tests/test_pooled_sim.py and
scripts/pooled_power.py use it.

A shape is one of three kinds:
- ``quiet``: A and B each with AR's rounds interleaved with their own;
- ``load``: the same, beside other processes that took the cores alike in both halves of every
  pair (the cells ``disturbed``), and the load shifts A over B by ``load_shift`` (a method that
  spends more compute per token loses more to it; measured x0.78-x0.82, docs/metrics.md);
- ``drift``: measured apart in one family (AR's cells first, then B's, then A's) while the
  machine's level moves by ``drift`` over the family, monotonically; its sentinel re-runs the
  first drift shape's AR at the end, and each member carries the family's measured drift.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

from pytest_specbench.deciding.stopping import Stopping
from pytest_specbench.report import pooled
from pytest_specbench.stats.drift import band_of, drift_interval, sentinel_rounds
from pytest_specbench.stats.sequential import Looks

LOOKS = Looks(3, 10)
B_OVER_AR = 1.3  # B's true speed over AR at every shape
SHARE = 0.45  # others' share of the cores in a pair's two halves, under load


def _rounds(
    rng: random.Random, level: float, ref_level: float | None, cv: float, looks: Looks = LOOKS
) -> tuple[list[float], list[float] | None, dict[str, Any]]:
    """A cell's rounds at ``level`` (tok/s over AR's 100) under its stopping rule: with AR's rounds
    interleaved at ``ref_level`` (each engine's rounds with log noise cv / sqrt(2): their paired
    ratio's CV is ``cv``), or measured apart (``ref_level`` None: its own rounds, noise cv / sqrt(2));
    ``looks``: when it may stop (one look: a fixed count of rounds)."""
    rule = Stopping(looks)
    own: list[float] = []
    ref: list[float] | None = [] if ref_level is not None else None
    e = cv / math.sqrt(2)
    answer = None
    for _ in range(looks.last):
        own.append(100 * level * math.exp(rng.gauss(0, e)))
        if ref is not None and ref_level is not None:
            ref.append(100 * ref_level * math.exp(rng.gauss(0, e)))
        answer = rule.after_round(own, ref, True)
        if answer.stops:
            break
    return own, ref, rule.finish(own, ref, True, answer, looks.last)


def _entry(
    method: str, shape: int, own: list[float], ref: list[float] | None, extra: dict[str, Any]
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "output_tokens_per_s": math.exp(statistics.fmean(math.log(x) for x in own)),
        "round_tokens_per_s": own,
        "request_digests": [f"s{shape}-r{i}" for i in range(len(own))],
        "speedup_baseline": "ar",
        **extra,
    }
    if ref is not None:
        e["reference"] = {"method": "ar", "round_tokens_per_s": ref}
    return {
        "param": f"{method}-tp1-c{shape}",
        "params": {"method": method, "tp": 1, "concurrency": shape},
        "extra_info": e,
    }


def run(
    rng: random.Random,
    effects: Sequence[float],
    kinds: Sequence[str],
    cv: float = 0.03,
    load_shift: float = 0.80,
    drift: float = -0.10,
) -> dict[str, Any]:
    """One run's results document: per shape i, A truly ``effects[i]`` times B, of ``kinds[i]``."""
    cells: list[dict[str, Any]] = []
    drifted = [i for i, k in enumerate(kinds) if k == "drift"]
    family: dict[str, Any] = {}
    if drifted:  # AR's cells, then B's, then A's: the level at each third of the family
        ar = {i: _rounds(rng, 1.0, None, cv) for i in drifted}
        first = ar[drifted[0]][0]
        sentinel = [
            100 * (1 + drift) * math.exp(rng.gauss(0, cv / math.sqrt(2)))
            for _ in range(sentinel_rounds(len(first)))
        ]
        logs, later = [math.log(x) for x in first], [math.log(x) for x in sentinel]
        d = statistics.fmean(later) - statistics.fmean(logs)
        iv = drift_interval(logs, later)
        family = {
            "family": "ar-tp1",
            "drift": math.exp(d) - 1,
            "drift_ci95": None if iv is None else [math.exp(iv[0]) - 1, math.exp(iv[1]) - 1],
            "band": band_of(d, iv)[1],
        }
    for i, (x, kind) in enumerate(zip(effects, kinds, strict=True)):
        shape = i + 1
        if kind == "drift":
            level_b, level_a = 1 + drift / 3, 1 + 2 * drift / 3
            for method, speed, level in (("b", B_OVER_AR, level_b), ("a", B_OVER_AR * x, level_a)):
                own, _, extra = _rounds(rng, speed * level, None, cv)
                cells.append(_entry(method, shape, own, None, {**extra, "speedup_drift": dict(family)}))
            continue
        shift = load_shift if kind == "load" else 1.0
        for method, speed in (("b", B_OVER_AR), ("a", B_OVER_AR * x * shift)):
            own, ref, extra = _rounds(rng, speed, 1.0, cv)
            if kind == "load":
                extra["disturbed"] = f"other processes took {SHARE:.0%} of the cores"
                extra["round_other_cpu_share"] = [SHARE] * len(own)
            cell = _entry(method, shape, own, ref, extra)
            if kind == "load":
                cell["extra_info"]["reference"]["round_other_cpu_share"] = [SHARE] * len(own)
            cells.append(cell)
    return {"benchmarks": cells, "specbench": {"compare": [["a", "b"]]}}


def outcome(doc: dict[str, Any], effects: Sequence[float]) -> dict[str, Any]:
    """The pooled figure of ``doc``'s one pair and what it says of the truth: whether its interval
    covers the true mean (the geometric mean of ``effects``) and whether it excludes 1."""
    (f,) = pooled.figures(doc)
    truth = math.exp(statistics.fmean(math.log(x) for x in effects))
    if not f["shapes"]:
        return {"figure": False, "covered": False, "excludes_1": False, "shapes": 0}
    return {
        "figure": True,
        "shapes": f["shapes"],
        "covered": f["lo"] <= truth <= f["hi"],
        "excludes_1": f["lo"] > 1 or f["hi"] < 1,
        "half_width": (math.log(f["hi"]) - math.log(f["lo"])) / 2,
    }


def rates(
    runs: int, seed: int, effects: Sequence[float], kinds: Sequence[str], **kw: Any
) -> dict[str, float]:
    """Over ``runs`` seeded runs: the share with a figure, whose interval covers the true mean,
    and that excludes 1; the mean half-width (log)."""
    rng = random.Random(seed)
    got = [outcome(run(rng, effects, kinds, **kw), effects) for _ in range(runs)]
    with_figure = [g for g in got if g["figure"]]
    return {
        "figure": len(with_figure) / runs,
        "covered": sum(g["covered"] for g in got) / runs,
        "excludes_1": sum(g["excludes_1"] for g in got) / runs,
        "half_width": statistics.fmean(g["half_width"] for g in with_figure) if with_figure else float("nan"),
    }
