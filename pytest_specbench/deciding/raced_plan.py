"""What racing and tuning save, planned: the cells a run with ``tune`` and ``--specbench-race``
runs, as expected and at worst, beside the full factorial.

A swept method with ``tune: {at: {AXIS: VALUE or [VALUES], ...}, keep: K}`` decides its sweep on the
cells matching ``at`` (every setting runs them in full), then runs only the best K settings on its
other cells. Which K win is not known before the run, so:
- expected: the deciding cells in full, elsewhere K settings of median cost (the settings ranked
  by the planned time of their other cells, the K around the middle), or, where the caller
  predicts which settings the decision cannot tell apart (``carry``), those;
- worst case: the K most expensive settings elsewhere (with the predicted ones), and every cell
  of a workload with ``max_rounds`` running to that cap (a race that never settles);
- full factorial: every setting everywhere, fixed rounds.
Early stopping, expected: under ``--specbench-race`` a cell stops at its first look (deciding/race.py
``first_look``) once its verdict is settled. The expected figure stops there every cell the caller
says settles (``settles``: the plugin's rule is a planned speed at least 10 % away from its
baseline's at that shape, and the baseline's own cells; their rounds' spread is assumed small enough
to settle in three rounds), the others run to their cap; the worst case never stops early.
A TP size the plan's own times say is dominated (``skips``: slower per user than a smaller TP
size at a cheaper shape beyond what deciding/race.py's rule allows) skips its costlier shapes in
the expected figure, never in the worst case. Racing's drops of losing methods are not predicted
(nothing is known of the losers before the run): a method without ``tune`` counts in every cell
in all three. The deciding cells run first, so
a group with cells on both sides of the decision starts twice: those extra starts are counted.
Pure: no pytest; the ``tune`` keys as the matrix parsed them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..matrix.cells import Cell, Matrix
from ..matrix.tune import Tune as MatrixTune


@dataclass(frozen=True)
class Tune:
    """A tuned sweep as the planner reads it: the sweep's name and the ``tune`` the matrix parsed
    (matrix/tune.py), so the plan decides on the same cells as the run (deciding/tune.py)."""

    method: str  # the swept method's name in the YAML
    tune: MatrixTune

    @property
    def keep(self) -> int:
        return self.tune.keep

    def deciding(self, cell: Cell) -> bool:
        """Whether ``cell`` (a setting of this sweep) is one the sweep is decided on."""
        return self.tune.matches(cell.params())


def tunes(matrix: Matrix) -> dict[str, Tune]:
    """The matrix's tuned sweeps, by name (one entry however many settings the sweep has)."""
    out: dict[str, Tune] = {}
    for m in matrix.methods:
        if m.tune is not None:
            name = m.sweep or m.name
            out[name] = Tune(name, m.tune)
    return out


@dataclass(frozen=True)
class Variant:
    name: str  # full factorial | expected | worst case
    cells: dict[str, float]  # cell id -> planned seconds
    phase1: frozenset[str]  # cells that run before the tuned settings are carried (deciding, untuned)
    extra_starts: tuple[str, ...]  # groups started again after the decision


def _setting_costs(cells: list[Cell], eta: Callable[[Cell], float], tune: Tune) -> dict[str, float]:
    costs: dict[str, float] = {}
    for c in cells:
        if (c.method.sweep or c.method.name) == tune.method and not tune.deciding(c):
            costs[c.method.name] = costs.get(c.method.name, 0.0) + eta(c)
    return costs


def _kept(costs: dict[str, float], keep: int, worst: bool) -> set[str]:
    ranked = sorted(costs, key=lambda s: (costs[s], s))
    if worst:
        return set(ranked[-keep:])
    mid = max(0, (len(ranked) - keep) // 2)
    return set(ranked[mid : mid + keep])


def first_look_share(cell: Cell) -> float:
    """The part of a cell's planned rounds (warm-up included) run when it stops at its first look."""
    from .race import first_look

    w = cell.workload
    warm = w.warmup + 1 if w.warmup else 0
    first = min(first_look(w.round_cap), w.rounds)
    return (warm + first) / (warm + w.rounds)


def variants(
    cells: list[Cell],
    eta: Callable[[Cell], float],
    tuned: dict[str, Tune],
    settles: Callable[[Cell], bool] | None = None,
    skips: Callable[[Cell], bool] | None = None,
    carry: Callable[[Tune], set[str]] | None = None,
) -> list[Variant]:
    """The full factorial, expected and worst-case cell sets of ``cells`` (the runnable selected
    ones), each cell at its planned seconds (``eta``); in the expected set a cell ``settles`` says
    settles at its first look runs that part of its rounds (``first_look_share``), and a cell
    ``skips`` says the race skips (a dominated TP size's costlier shape) does not run; where
    ``carry`` names a tuned sweep's settings the decision cannot separate (at least ``keep``),
    the expected set carries those, the worst case those and the ``keep`` most expensive."""

    def capped(c: Cell) -> float:  # a race that never settles runs every cell to its max_rounds
        w = c.workload
        if not w.max_rounds or w.max_rounds <= w.rounds:
            return eta(c)
        warm = w.warmup + 1 if w.warmup else 0
        return eta(c) * (warm + w.max_rounds) / (warm + w.rounds)

    full = Variant("full factorial", {c.id: eta(c) for c in cells}, frozenset(c.id for c in cells), ())
    out = [full]

    def early(c: Cell) -> float:
        return eta(c) * (first_look_share(c) if settles is not None and settles(c) else 1.0)

    for worst in (False, True):
        cost = capped if worst else early
        keep: set[str] = set()
        carried: set[str] = set()
        for t in tuned.values():
            sure = carry(t) if carry is not None else set()  # never separated: all carried
            costs = _setting_costs(cells, cost, t)
            if sure and not worst:
                keep |= sure
            elif sure:
                keep |= sure | _kept(costs, t.keep, True)
            else:
                keep |= _kept(costs, t.keep, worst)
        chosen: dict[str, float] = {}
        phase1: set[str] = set()
        for c in cells:
            t = tuned.get(c.method.sweep or c.method.name)
            if not worst and skips is not None and skips(c):  # expected out of the race unrun
                continue
            if t is None or t.deciding(c):
                phase1.add(c.id)
            elif c.method.name in keep:
                carried.add(c.id)
            else:
                continue
            chosen[c.id] = cost(c)
        groups1 = {c.group.id for c in cells if c.id in phase1}
        again = tuple(sorted({c.group.id for c in cells if c.id in carried and c.group.id in groups1}))
        out.append(Variant("worst case" if worst else "expected", chosen, frozenset(phase1), again))
    return out
