"""Collection: a bench function ``test_<kind>(engine, cell, specbench)`` becomes one item per
cell of the matrix (readable ids, TP/backend skips and timeouts as marks, a family's drift
sentinel after its groups), items are stable-sorted by engine group (so the session-scoped
``engine`` fixture starts once per group), and ``--specbench-plan`` prints the plan of what was
selected instead of running it. Registered with the entry point (hooks.py, ``pytest_plugins``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..report import summary as report
from . import race, sentinel
from .packed_schedule import plan_schedule
from .runner import cell_timeout
from .runner import item_cell as _item_cell
from .skip_reasons import skip_reason
from .state import DEFAULT_MATRIX, RESULT_PROP, TIMEOUT_GRACE_S, SpecbenchState
from .state import get_state as _state


def _kind(metafunc: pytest.Metafunc) -> str:
    mark = metafunc.definition.get_closest_marker("specbench")
    if mark and mark.args:
        return str(mark.args[0])
    return metafunc.function.__name__.removeprefix("test_")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" not in metafunc.fixturenames or "engine" not in metafunc.fixturenames:
        return
    st = _state(metafunc.config)
    if st.matrix is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: no benchmark matrix; pass "
            f"--specbench-matrix PATH or create {DEFAULT_MATRIX}"
        )
    cells = st.matrix.cells(_kind(metafunc))
    use_timeout = metafunc.config.pluginmanager.hasplugin("timeout") and not metafunc.config.getoption(
        "timeout", None
    )
    params = []
    for c in cells:
        marks: list[Any] = []
        reason = skip_reason(metafunc.config, st, c)
        if reason:
            marks.append(pytest.mark.skip(reason=f"cell {c.id} skipped: {reason}"))
        if use_timeout:  # an outer net: the cell's own limit is enforced in the engine's event
            # loop (CellRunner); engine starts have their own limit (--specbench-start-timeout)
            marks.append(
                pytest.mark.timeout(cell_timeout(metafunc.config, c) + TIMEOUT_GRACE_S, func_only=True)
            )
        params.append(pytest.param(c.group, c, marks=marks, id=c.id))
    by_id = {p.id: p.marks for p in params}  # a sentinel carries its first cell's marks
    params += sentinel.params(metafunc.config, st, _kind(metafunc), lambda c: by_id[c.id])
    metafunc.parametrize(("engine", "cell"), params, indirect=["engine"], scope="session")


def pytest_itemcollected(item: pytest.Item) -> None:
    """A cell's exact ``-k`` tokens (``:c1:``, ``:tp4:``, ``:ngram:``; Cell.tokens): pytest's
    ``-k`` matches substrings, so ``c1`` alone also selects c16."""
    cell = _item_cell(item)
    if cell is not None:
        item.extra_keyword_matches.update(cell.tokens())


@pytest.hookimpl(trylast=True)  # after -k / -m: a shard splits what they selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from . import sharding

    sharding.deselect(config, _state(config), items)
    _group_order(config, items)


def _group_order(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stable-sort bench items by engine group (first appearance order), in place.

    A bench function whose workload kind has no cells in the matrix is deselected (instead
    of pytest's "empty parameter set" skip)."""
    empty = [
        i
        for i in items
        if _item_cell(i) is None
        and "cell" in getattr(i, "fixturenames", ())
        and "engine" in getattr(i, "fixturenames", ())
    ]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]
    st = _state(config)
    for item in items:  # a resumed cell's earlier result travels on its (skipped) reports
        cell = _item_cell(item)
        if cell is not None and cell.id in st.resumed:
            item.user_properties.append((RESULT_PROP, {**st.resumed[cell.id], "nodeid": item.nodeid}))
    # by engine group; a family's groups together, then its drift sentinel (sentinel.py)
    sentinel.order(config, items, _item_cell)
    race.order(items, _item_cell, st)  # --specbench-race: tuned sweeps' deciding cells first


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    st = _state(config)
    _say_empty_selection(session, st)
    want_print = config.getoption("specbench_plan")
    json_path = config.getoption("specbench_plan_json")
    if st.leases is not None and st.lease_dir_owned:  # one process: its items need the window
        from .hook_windows import expect

        expect(st, [(i.nodeid, _item_cell(i)) for i in session.items])
    if st.matrix is None or hasattr(config, "workerinput") or not (want_print or json_path):
        return
    from ..planning import text

    p = st.get_plan()
    cells = [c for i in session.items if (c := _item_cell(i)) is not None and not sentinel.family_of_item(i)]
    resumed = [c.id for c in cells if c.id in st.resumed]  # copied, not run: neither planned nor timed
    cells = [c for c in cells if c.id not in st.resumed]
    selected = [c.id for c in cells]
    sched, sched_lines = plan_schedule(config, st, cells)
    from .plan_race import race_plan

    race_doc, race_lines = race_plan(config, st, cells)
    if json_path:
        doc = {"matrix": st.matrix.path, **p.as_dict(selected), "resumed": resumed}
        if sched is not None:
            doc["schedule"] = sched.as_dict()
        if st.gpu_busy:  # busy GPUs of the pool: a run refuses them, or leases them flagged
            doc["gpus_busy"] = st.gpu_busy
        if race_doc is not None:
            doc["racing"] = race_doc
        Path(json_path).write_text(report.dumps(doc))
    if want_print:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        from ..deciding import tune
        from . import sharding

        lines = [
            f"specbench plan for {st.matrix.path}",
            *text.format_plan(p, selected),
            *sched_lines,
            *race_lines,
            *sharding.plan_lines(st),
            *(
                tune.plan_lines(
                    st.matrix,
                    [c for c in cells if not skip_reason(config, st, c)],  # those that run
                    sentinel.interleaving(config),
                )
                if st.race is not None
                else []
            ),
            *(race_zone_lines(st, cells) if st.race is not None else []),
            *gate_plan_lines(st, cells),
        ]
        if resumed:
            lines.append(
                f"resumed: {len(resumed)} cells measured in {config.getoption('specbench_resume')} are "
                "copied, not run (left out of the plan above)"
            )
        if json_path:
            lines.append(f"wrote {json_path}")
        for line in lines:
            if tr is not None:
                tr.write_line(line)
            else:
                print(line)


def _say_empty_selection(session: pytest.Session, st: SpecbenchState) -> None:
    """-k / -m left no cell: say what the matrix has and which shipped matrices the same -k
    selects cells of (not under xdist, whose controller collects nothing itself)."""
    config = session.config
    from . import sharding

    shard_line = sharding.status_line(st, len(session.items))
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if shard_line and tr is not None and not hasattr(config, "workerinput"):
        tr.write_line(shard_line)
    if sharding.empty_shard(st):  # the selection has cells, on other shards
        return
    if st.matrix is None or session.items or hasattr(config, "workerinput") or not st.matrix.cells():
        return
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        return
    keyword, markexpr = config.getoption("keyword") or "", config.getoption("markexpr") or ""
    if not (keyword or markexpr):
        return
    from .selection import empty_selection_lines

    for line in empty_selection_lines(st.matrix, keyword, markexpr, config.rootpath):
        if tr is not None:
            tr.write_line(line)
        else:
            print(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """--specbench-plan: the plan is the whole job; no cell runs and no engine starts."""
    return True if session.config.getoption("specbench_plan") else None


def _plan_cvs(st: SpecbenchState) -> tuple[list[float], str]:
    """The round CVs a previous run measured (--specbench-plan-from: its lowest, median and
    highest) and where they come from; none without one."""
    prev = getattr(st, "previous_doc", None) or {}
    cvs = sorted(
        {
            round(float(b["extra_info"]["rounds_cv"]), 3)
            for b in prev.get("benchmarks") or []
            if (b.get("extra_info") or {}).get("rounds_cv")
        }
    )
    if not cvs:
        return [], ""
    return sorted({cvs[0], cvs[len(cvs) // 2], cvs[-1]}), "measured by " + str(
        st.config.getoption("specbench_plan_from")
    )


def gate_plan_lines(st: SpecbenchState, cells: list[Any]) -> list[str]:
    """The gate's rounds at the round CVs a previous run measured, else at assumed ones."""
    from ..deciding import selection

    if not cells:
        return []
    cvs, src = _plan_cvs(st)
    return selection.gate_lines(cvs or selection.DEFAULT_CVS, len(cells), src)


def race_zone_lines(st: SpecbenchState, cells: list[Any]) -> list[str]:
    """The race's indifference zone and the rounds it needs at the round CVs a previous run
    measured (--specbench-plan-from), else at assumed ones (deciding/selection.py)."""
    from ..deciding import selection
    from ..stats.sequential import Looks

    racing = [c for c in cells if st.race is not None and st.race.races(c)]
    if not racing or st.race is None:
        return []
    c = max(racing, key=lambda c: c.workload.round_cap)
    w = c.workload
    looks = Looks(min(3, w.rounds), w.round_cap, st.race.family(c))
    cvs, src = _plan_cvs(st)
    if cvs:
        return selection.plan_lines(st.race.delta, looks, cvs, src)
    return selection.plan_lines(st.race.delta, looks)
