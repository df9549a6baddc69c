"""A raced shape simulated through the project's own deciding code (deciding/race.py's Race, the
stopping protocol of deciding/stopping.py, the decision store's events): each method's cell runs
its rounds as workloads/rounds.py runs them, asking the cell's stopping rule after every round.
Not a test module: tests/test_race_power.py and scripts/race_power.py use it."""

from __future__ import annotations

import math
import random
from typing import Any

from pytest_specbench.deciding.race import Race
from pytest_specbench.matrix.schema import parse
from pytest_specbench.stats import paired


def matrix(
    methods: list[str],
    rounds: int = 3,
    max_rounds: int | None = 10,
    extra: dict[str, Any] | None = None,
    backend: str = "hf",
    method_keys: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """AR and n-gram members on the embedded model, one throughput workload at c1 (``extra``
    overrides or adds workload keys); ``max_rounds`` None: fixed rounds. ``backend`` "sglang": engines
    that are instances of their own (a start-to-start level); ``method_keys``: keys added to a
    method (``starts: 2``)."""
    model = "embedded:tiny" if backend == "hf" else "Qwen/Qwen3-1.7B"
    keys = method_keys or {}
    doc = {
        "models": {"m": model},
        "methods": {
            "ar": {"backend": backend, "model": "m", **keys.get("ar", {})},
            **{
                n: {
                    "backend": backend,
                    "model": "m",
                    "speculative": {"algorithm": "ngram"},
                    **keys.get(n, {}),
                }
                for n in methods
            },
        },
        "workloads": {
            "throughput": {
                "concurrency": [1],
                "output_tokens": [8],
                "rounds": rounds,
                "max_rounds": max_rounds,
                "warmup": 0,
                **(extra or {}),
            }
        },
    }
    return parse(doc, "m.yaml")


def result(cell: Any, own: list[float], ref: list[float] | None, extra: dict[str, Any]) -> dict[str, Any]:
    metrics: dict[str, Any] = {"round_tokens_per_s": own}
    if ref is not None:
        metrics["reference"] = {"round_tokens_per_s": ref}
    return {
        "cell_id": cell.id,
        "group": cell.group.id,
        "params": cell.params(),
        "metrics": metrics,
        "extra_info": extra,
        "round_times": [1.0] * len(own),
    }


def run_cell(
    race: Race,
    cell: Any,
    speed: float,
    rng: random.Random,
    cv: float,
    relative: bool = True,
    offset: float = 1.0,
    ref_offset: float = 1.0,
) -> dict[str, Any]:
    """One cell's rounds under the race's stopping rule: per round the member's tok/s and, when
    ``relative``, its interleaved baseline's, each with log noise ``cv`` / sqrt(2) so that their
    paired ratio's round CV is ``cv`` (measured apart: its own tok/s with noise ``cv``). ``offset``:
    this engine start's own level (an instance effect); ``ref_offset``: its baseline instance's.
    Returns the cell's record: dropped, rounds, verdict against the baseline, the race's info."""
    rule = race.rule(cell)
    own: list[float] = []
    ref: list[float] | None = [] if relative else None
    e = cv / math.sqrt(2) if relative else cv
    answer = None
    for _ in range(rule.looks.last):
        own.append(100 * speed * offset * math.exp(rng.gauss(0, e)))
        if ref is not None:
            ref.append(100 * ref_offset * math.exp(rng.gauss(0, e)))
        answer = rule.after_round(own, ref, True)
        if answer.stops:
            break
    extra: dict[str, Any] = {"rounds_run": len(own), **rule.finish(own, ref, True, answer, rule.looks.last)}
    dropped = race.record(cell, result(cell, own, ref, extra)) is not None
    verdict = "none"
    if ref is not None and not dropped:
        iv = paired.ratio_interval(own, ref, rule.looks)
        verdict = iv.verdict() if iv is not None else "none"
    return {"dropped": dropped, "rounds": len(own), "verdict": verdict, "race": extra.get("race")}


def shape(
    speeds: dict[str, float],
    seed: int,
    cv: float,
    rounds: int = 3,
    max_rounds: int = 10,
    delta: float | None = None,
    relative: bool = True,
    drift: float | None = None,
    cvs: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """One raced shape: AR, then each method of ``speeds`` (its true speed over AR) in that order;
    ``cvs``: a method's own round CV where it differs from ``cv``."""
    rng = random.Random(seed)
    m = matrix(list(speeds), rounds, max_rounds)
    race = Race(m, drift=drift)
    if delta is not None:
        race.delta = delta
    cells = {c.method.name: c for c in m.cells()}
    out = {"ar": run_cell(race, cells["ar"], 1.0, rng, cv, relative=False)} if not relative else {}
    if relative:  # AR's own cell (measured: every member's verdict reads the one beside it)
        out["ar"] = run_cell(race, cells["ar"], 1.0, rng, cv, relative=False)
    for name, s in speeds.items():
        out[name] = run_cell(race, cells[name], s, rng, (cvs or {}).get(name, cv), relative)
    return out


def tuned_matrix(
    keep: int, at: dict[str, Any] | None = None, rounds: int = 3, max_rounds: int | None = None
) -> Any:
    """AR and a swept n-gram knob (num_draft_tokens 1-4) tuned at ``at`` (default c1) with
    ``keep``, at c1 and c4."""
    w: dict[str, Any] = {"concurrency": [1, 4], "output_tokens": [8], "rounds": rounds, "warmup": 0}
    if max_rounds is not None:
        w["max_rounds"] = max_rounds
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "m"},
            "knob": {
                "backend": "hf",
                "model": "m",
                "speculative": {"algorithm": "ngram", "num_draft_tokens": [1, 2, 3, 4]},
                "tune": {"at": at or {"concurrency": 1}, "keep": keep},
            },
        },
        "workloads": {"throughput": w},
    }
    return parse(doc, "m.yaml")


def instance_shape(
    speeds: dict[str, float],
    seed: int,
    cv: float,
    tau: float,
    offsets: dict[str, float] | None = None,
    starts: int = 2,
    rounds: int = 3,
    max_rounds: int = 10,
    configs: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """One raced shape on engines that are instances of their own (sglang): AR with ``starts``
    starts (the 2nd.. its A/A controls), each method of ``speeds`` with ``starts`` starts; every start
    its own level (log sd ``tau``, times ``offsets[name]`` where given), one baseline instance beside
    every member; ``configs``: keys a method's YAML gets (methods of one config are starts of one
    engine). Controls run first, as the plugin orders them."""
    rng = random.Random(seed)
    keys = {
        n: {**({"starts": starts} if starts > 1 else {}), **(configs or {}).get(n, {})}
        for n in ["ar", *speeds]
    }
    m = matrix(list(speeds), rounds, max_rounds, backend="sglang", method_keys=keys)
    race = Race(m)
    cells = {c.method.name: c for c in m.cells()}
    base = math.exp(rng.gauss(0, tau))
    order = [n for n in cells if n in race.controls] + [
        n for n in cells if n not in race.controls and n != "ar"
    ]
    out = {}
    for name in order:
        true = speeds.get(name.split("-start")[0], 1.0)
        own = math.exp(rng.gauss(0, tau)) * (offsets or {}).get(name, 1.0)
        if race.skip_reason(cells[name]) is not None:
            out[name] = {"dropped": True, "skipped": True, "rounds": 0}
            continue
        out[name] = run_cell(race, cells[name], true, rng, cv, offset=own, ref_offset=base)
    return out
