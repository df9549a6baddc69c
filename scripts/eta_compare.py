#!/usr/bin/env python3
"""Planned against measured, per cell: a plan's JSON (--specbench-plan-json) and the run's JUnit XML
written with `-o junit_duration_report=call` (each cell's own time, its engine start excluded).

    python3 scripts/eta_compare.py PLAN.json RUN.xml

Prints each cell's planned eta, its measured time and their ratio, then the totals of the
speculative cells (those whose group plans an accept length) and of the others."""

import json
import sys
import xml.etree.ElementTree as ET


def main(plan_path: str, xml_path: str) -> int:
    plan = json.load(open(plan_path))
    spec_groups = {g["group"] for g in plan["groups"] if g.get("accept_length") is not None}
    measured = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("name", "")
        if "[" in name and case.find("skipped") is None:
            measured[name[name.index("[") + 1 : -1]] = float(case.get("time", "0"))
    totals = {True: [0.0, 0.0], False: [0.0, 0.0]}
    print(f"{'cell':40} {'planned s':>10} {'measured s':>11} {'planned/measured':>17}")
    for c in plan["cells"]:
        if not c["feasible"] or c["cell"] not in measured or c["eta_s"] is None:
            continue
        got = measured[c["cell"]]
        spec = c["group"] in spec_groups
        totals[spec][0] += c["eta_s"]
        totals[spec][1] += got
        print(
            f"{c['cell']:40} {c['eta_s']:10.1f} {got:11.1f} {c['eta_s'] / got if got else float('nan'):17.3f}"
        )
    for spec, (p, m) in totals.items():
        if m:
            what = "speculative cells" if spec else "other cells"
            off = 100 * (p / m - 1)
            print(
                f"{what}: planned {p:.1f} s, measured {m:.1f} s, planned/measured {p / m:.3f} ({off:+.1f} %)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
