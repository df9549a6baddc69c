"""A drift family spread over the GPU sets of its TP size (docs/metrics.md "Drift sentinel").

A family (deciding/families.py) runs its members apart from its baseline. Kept on one GPU set, a
TP size's members wait for each other there while the other sets of that size idle. Spread, each
GPU set that runs members gets a baseline of its own: the set the baseline's group runs on has
the baseline's cells, every other set opens with a bracket (a re-run of the baseline's first
shape on that set) before its first member, and each set closes with one after its last member
(or after each member, in a bracketed family). Every member then sits between two measurements
of its baseline on its own GPUs, and its interval is widened by the levels they bound
(report/brackets.py): what a GPU set differs by from another, and the drift over the set's run,
are both inside that range.

Which member runs on which set: longest first, each on the set where it would end first (LPT),
the set of the baseline's group loaded with that group, an empty set with the brackets it would
add. Pure: the plugin (plugin/sentinel.py) gives the planned durations and how many GPU sets of
each size the run has, so every process (the xdist controller, each worker, the plan) splits a
family the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from .families import Family


def spread(
    fams: Sequence[Family],
    duration_s: Mapping[str, float],
    sets: Callable[[Family], int],
    bracket_s: Callable[[Family], float],
    rank: Mapping[str, int] | None = None,
) -> list[Family]:
    """``fams`` with each family whose TP size has more than one GPU set (``sets``: how many the
    run can use at once) split into one Family per set it uses (``gpu_set`` 0: the baseline's
    group's). ``duration_s``: a group's planned seconds (engine start and cells; 0 for a group
    without a cell to run); ``bracket_s``: a bracket's (the baseline's restart and rounds). A
    family all of whose members land on the baseline's set stays as it is (a sentinel family
    keeps its sentinel). Equal durations and each set's members go by ``rank`` (group id -> its
    place in the matrix; else the id), never by the order ``fams`` lists them in: every process
    splits a family alike, whatever order its items were collected in."""
    out: list[Family] = []

    def key(g: str) -> tuple[int, str]:
        return ((rank or {}).get(g, 0), g)

    for f in fams:
        n = min(sets(f), len(f.members) + 1)
        if n <= 1:
            out.append(f)
            continue
        b = bracket_s(f)
        loads = [duration_s.get(f.baseline, 0.0)] + [0.0] * (n - 1)
        on: list[list[str]] = [[] for _ in range(n)]
        for m in sorted(f.members, key=lambda m: (-duration_s.get(m, 0.0), key(m))):
            ends = [_ends(loads[k], bool(on[k]), k, duration_s.get(m, 0.0), b, f.brackets) for k in range(n)]
            k = min(range(n), key=lambda k: (ends[k], k))
            loads[k] = ends[k]
            on[k].append(m)
        used = [0] + [k for k in range(1, n) if on[k]]
        if len(used) == 1:
            out.append(f)
            continue
        for i, k in enumerate(used):
            members = tuple(sorted(on[k], key=key))
            out.append(dataclasses.replace(f, members=members, gpu_set=i, gpu_sets=len(used)))
    return out


def _ends(load: float, busy: bool, k: int, d: float, b: float, brackets: bool) -> float:
    """When GPU set ``k`` (0: the baseline's group's), loaded ``load`` so far, would end with a
    member of ``d`` seconds added: its bracket after it (bracketed), and for a set with no member
    yet its opening bracket (k > 0) and its closing one (a set bracketed at its end)."""
    add = d + (b if brackets else 0.0)
    if not busy:
        add += (b if k > 0 else 0.0) + (0.0 if brackets else b)
    return load + add


def choose(
    fams: Sequence[Family],
    duration_s: Mapping[str, float],
    sets: Callable[[Family], int],
    bracket_s: Callable[[Family], float],
    makespan_s: Callable[[list[Family]], float],
    rank: Mapping[str, int] | None = None,
    passes: int = 4,
) -> list[Family]:
    """``spread`` with, for each family, the number of GPU sets (at most ``sets``) whose packed
    schedule (``makespan_s`` of the families as split) ends first, the fewer sets among equals: a
    set that would only run after another of its family on the same GPUs buys nothing but its
    brackets. Each family in turn (by baseline id) tries every count with the others as they
    stand, from each at its most, and the turns repeat until none changes (at most ``passes``);
    deterministic, whatever order ``fams`` are in."""
    most = {f.baseline: sets(f) for f in fams}
    cap = dict(most)

    def split(c: Mapping[str, int]) -> list[Family]:
        return spread(fams, duration_s, lambda f: c[f.baseline], bracket_s, rank)

    best = makespan_s(split(cap))
    for _ in range(passes):
        changed = False
        for f in sorted(fams, key=lambda f: f.baseline):
            for n in range(1, most[f.baseline] + 1):  # the fewest first: it wins ties
                if n == cap[f.baseline]:
                    continue
                trial = {**cap, f.baseline: n}
                m = makespan_s(split(trial))
                if m < best - 1e-6 or (m <= best + 1e-6 and n < cap[f.baseline]):
                    best, cap, changed = min(best, m), trial, True
        if not changed:
            break
    return split(cap)
