"""The end-of-run screen on the terminal: report/screen.py's lines for the run's document, with the
run's own facts (engine starts, resumed cells, crashes, an interruption, settings that differ
between groups, wall time against the plan, where the JSON went) before its pointers, each on one
line of at most screen.WIDTH characters. The long summary (``--specbench-summary full``) stays in
results.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..report import provenance, screen
from ..report.screen_text import counted
from .state import SpecbenchState


def screen_lines(st: SpecbenchState, config: pytest.Config, wall: str) -> list[str]:
    """The screen, with ``wall`` (results.wall_vs_plan's line) among the run's facts."""
    assert st.doc is not None
    target = config.getoption("benchmark_json", None)
    name = None if not target else str(target.name if hasattr(target, "write") else target)
    spec = st.doc["specbench"]
    facts = [screen.engine_starts_line(spec)]
    if spec.get("resumed_cells"):
        facts.append(
            f"resumed: {counted(len(spec['resumed_cells']), 'cell')} copied from "
            f"{config.getoption('specbench_resume')} (not run again)"
        )
    if st.resume_refused:
        facts += screen.wrap(
            f"resume refused {counted(len(st.resume_refused), 'cell')} (they ran again; "
            "--specbench-resume-any-machine copies them): ",
            st.resume_refused,
        )
    keys, _ = provenance.differences(st.doc)
    if keys:
        facts.append(
            f"engine settings that differ between groups ({', '.join(keys)}): per group in the report"
        )
    crashed = spec.get("crashed_workers") or []
    if crashed:
        facts += screen.wrap(
            f"CRASHED: {counted(len(crashed), 'xdist worker')} died mid-cell "
            "(xdist replaced them and ran the rest): ",
            [f"{c['cell']} ({'measured again' if c['measured_again'] else 'not measured'})" for c in crashed],
        )
    if spec.get("interrupted"):
        stop = spec["interrupted"]
        facts.append(
            f"INTERRUPTED ({stop['why']}) in cell {stop.get('cell') or '-'}: "
            f"{counted(len(st.doc['benchmarks']), 'cell')} measured are kept"
        )
        kept = st.written_to or name  # a rescue path where --benchmark-json could not be written
        if kept:  # a command to copy: never cut, however long its path
            facts.append(
                f"  the same command (same -k) with --specbench-resume {Path(kept).resolve()} runs the rest"
            )
    facts.append(_wall_of_the_run(wall, spec, config.getoption("specbench_resume", None)))
    if name and (hasattr(target, "write") or st.written_to == name):
        facts.append(f"wrote {name} ({counted(len(st.doc['benchmarks']), 'cell')})")
    elif st.written_to:
        facts.append(f"wrote {st.written_to} ({counted(len(st.doc['benchmarks']), 'cell')}), not {name}")
    return screen.lines(
        st.doc,
        st.written_to or name,
        [ln if " --specbench-resume " in ln else screen.clip(ln) for ln in facts],
    )


_ETA_CELLS = re.compile(r" for (\d+) of (\d+) cells and (\d+) engine starts")


def _wall_of_the_run(wall: str, spec: dict, resumed_from: str | None) -> str:
    """long_summary.wall_vs_plan's line, whose ETA counts only the cells run here, its counts in
    the number they take; after a resume the run's own count beside them ("for 12 of 12 cells run
    here (19 cells in the run, 7 of them copied from old.json)"), never 12 of 12 for a run of 19."""
    m = _ETA_CELLS.search(wall)
    if m is None:
        return wall
    known, ran, starts = (int(g) for g in m.groups())
    copied = len(spec.get("resumed_cells") or [])
    cells = f"{known} of {counted(ran, 'cell')}" + (
        f" run here ({counted(ran + copied, 'cell')} in the run, {copied} of them copied from "
        f"{resumed_from or 'the resumed JSON'})"
        if copied
        else ""
    )
    return f"{wall[: m.start()]} for {cells} and {counted(starts, 'engine start')}{wall[m.end() :]}"
