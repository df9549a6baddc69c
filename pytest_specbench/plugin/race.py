"""--specbench-race in a run: the race set up (one per process, sharing one decision state under
-n), cells out of the race or tuned out skipped before their engines start, the deciding cells
ordered first, and the summary's lines for what was dropped. The deciding itself is
pytest_specbench/deciding/ (no pytest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ..deciding.race import Race, out_text
from ..matrix.cells import Cell


def setup(config: pytest.Config, st: Any) -> None:
    """--specbench-race: one Race per process; under -n the controller creates the run's decision
    store and every worker opens it (``xdist_sched.RACE_STORE_KEY``), so all of them decide on one state."""
    if not config.getoption("specbench_race", False) or st.matrix is None:
        given = config.getoption("specbench_race_delta", None) is not None or (
            st.matrix is not None and st.matrix.race_delta is not None
        )
        if given:  # a race's setting without a race: said, not silently ignored
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    "the race's δ (race: {delta} or --specbench-race-delta) applies only under "
                    "--specbench-race; this run does not race"
                ),
                stacklevel=2,
            )
        return
    from ..deciding.store import Store, StoreError
    from .xdist_sched import RACE_STORE_KEY, workers

    store = None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        try:  # a worker that cannot reach the controller's store is refused at start
            store = Store(workerinput[RACE_STORE_KEY]) if workerinput.get(RACE_STORE_KEY) else None
        except StoreError as e:
            raise pytest.UsageError(f"--specbench-race: {e}") from None
    elif workers(config) > 1:
        store = Store.create()
        st.race_store_owned = True
    drift = config.getoption("specbench_race_drift", None)
    if drift is not None and not 0 < drift < 1:
        raise pytest.UsageError(f"--specbench-race-drift {drift}: give a fraction between 0 and 1, e.g. 0.15")
    delta = config.getoption("specbench_race_delta", None)
    if delta is not None and not 0 < delta < 0.5:
        raise pytest.UsageError(
            f"--specbench-race-delta {delta}: give a fraction between 0 and 0.5, e.g. 0.03"
        )
    st.race = Race(st.matrix, drift, store)
    from .sentinel import interleaving

    st.race.interleaving = interleaving(config)
    if delta is not None or st.matrix.race_delta is not None:
        st.race.delta = delta if delta is not None else st.matrix.race_delta
    if store is not None:
        st.race.before_wait = lambda cell: st.stop_other_engine(cell.group)


def skip_if_out(st: Any, cell: Cell, item: pytest.Item) -> None:
    """Skip a bench item whose cell is out of the race or tuned out (before its engine starts)."""
    why = st.race.skip_reason(cell) if st.race is not None and not item.get_closest_marker("skip") else None
    if why:
        pytest.skip(f"cell {cell.id} skipped: {why}")


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The summary's lines for dropped and tuned-out cells (never among the measured)."""
    race = (doc.get("specbench") or {}).get("race")
    if not race:
        return []
    out = []
    for d in race.get("dropped_cells") or ():
        info = d["extra_info"]["race"]
        ran = d["extra_info"].get("rounds_run", 0)
        out.append(
            f"{d['cell_id']}: {out_text(d['cell_id'], info)}"
            + (f" (after {ran} rounds; not a measured result)" if ran else " (not run)")
        )
    for t in race.get("tuned_out") or ():
        out.append(f"{t['cell_id']}: {t['reason']} (not run)")
    if not out:
        return []
    return [f"racing: {len(out)} cells out of the race or tuned out (none of them ranked or a baseline):"] + [
        f"  {ln}" for ln in out
    ]


def order(items: list[pytest.Item], cell_of: Callable[[pytest.Item], Cell | None], st: Any) -> None:
    """The groups that need a hooked GPU last (hook_windows.hooked_window_last); with the race,
    the A/A controls' cells first, then tuned sweeps' deciding cells (and the baseline's cells at
    their shapes), in place, keeping the order within each phase."""
    from ..deciding.tune import first_phase
    from .hook_windows import hooked_window_last

    hooked_window_last(items, cell_of, st)  # hooked GPU's groups last, in one window (any run)
    if st.race is None:
        return
    first = first_phase([c for c in map(cell_of, items) if c is not None], st.matrix)
    st.race.deciding_ids = set(first)
    # the A/A controls' groups before every member's: a drop needs the instance effect they read
    controls = set(st.race.controls)
    if not first and not controls:
        return
    cells = [cell_of(i) for i in items]

    def phase(c: Cell | None) -> int:
        return 0 if c is None else 1 if c.method.name in controls else 2 if c.id in first else 3

    items[:] = [i for _, i in sorted(enumerate(items), key=lambda t: (phase(cells[t[0]]), t[0]))]


def finished(st: Any, cell: Cell | None) -> None:
    """After a bench item's teardown, in the process that ran it: its cell's outcome is final."""
    if st.race is not None and cell is not None:
        st.race.finished(cell.id)
