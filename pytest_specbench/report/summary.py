"""Cell results -> one pytest-benchmark-format JSON document and a terminal table.

Each cell becomes one entry of ``benchmarks``: ``stats`` from the timed rounds' wall
times (pytest-benchmark's own Stats class, so ``pytest-benchmark compare`` reads it),
``params`` from the cell's axes, ``extra_info`` with throughput, acceptance, latency
percentiles and speedup vs the baseline method. Run-level facts (engine starts, failed
cells, provenance) go under ``machine_info["specbench"]`` and a top-level ``specbench`` key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..stats.paired import compare_all
from . import brackets, control, decide, drift, instances
from .celltable import _columns, _fmt, _md_value, legend, table  # noqa: F401
from .gate import failure_headline
from .gate import redefined as _redefined
from .mdtext import one_line, safe_doc

EXTRA_KEYS_FIRST = (
    "output_tokens_per_s",
    "accept_length",
    "speedup_vs_ar",
    "requests",
    "output_tokens",
    "latency_s_p50",
    "latency_s_p99",
)


def _stats(round_times: Sequence[float]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    s = Stats()
    for t in round_times:
        s.update(t)
    d = s.as_dict()
    d["data"] = list(round_times)
    d["iterations"] = 1
    return d


SPEEDUP_KEYS = (
    "speedup_vs_ar",
    "speedup_vs_ar_ci95",
    "speedup_verdict",
    "speedup_metric",
    "speedup_pairs",
    "speedup_t",
    "speedup_df",
    "speedup_pairing",
    "speedup_under_load",
    "accept_vs",
    "speedup_drift",
    "speedup_verdict_before_drift",
    "speedup_brackets",
    "speedup_verdict_before_brackets",
)


def benchmark_entry(
    result: dict[str, Any], comparison: dict[str, Any] | None = None, baseline: str | None = None
) -> dict[str, Any]:
    """One cell as a pytest-benchmark entry; ``comparison``: paired.compare_all's fields for it
    (speedup over ``baseline``, the AR method of the same target model, with its interval)."""
    m = {k: v for k, v in result["metrics"].items() if k not in SPEEDUP_KEYS}
    comparison = comparison or {}
    extra = {k: m.get(k) for k in EXTRA_KEYS_FIRST if k != "speedup_vs_ar"}
    extra["speedup_vs_ar"] = comparison.get("speedup_vs_ar")
    extra["speedup_baseline"] = baseline
    extra.update({k: v for k, v in comparison.items() if k != "speedup_vs_ar"})
    extra.update({k: v for k, v in m.items() if k not in extra})
    extra["engine_group"] = result["group"]
    extra.update(result.get("extra_info") or {})
    return {
        "group": result["params"]["workload"],
        "name": result["name"],
        "fullname": result["nodeid"],
        "params": result["params"],
        "param": result["cell_id"],
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(result["round_times"]),
            "max_time": 0,
            "min_time": 0,
            "warmup": result.get("warmup", 0),
        },
        "stats": _stats(result["round_times"]),
    }


def result_of_entry(b: dict[str, Any], group: str, extra_info: dict[str, Any]) -> dict[str, Any]:
    """``benchmark_entry`` backwards: a cell's result from its JSON entry (``--specbench-resume``).
    The speedup and its baseline are left out: the run that copies the entry recomputes them."""
    metrics = dict(b.get("extra_info") or {})
    group = metrics.pop("engine_group", group)
    for k in (*SPEEDUP_KEYS, "speedup_baseline"):
        metrics.pop(k, None)
    return {
        "nodeid": b.get("fullname", ""),
        "name": b.get("name", ""),
        "cell_id": b["param"],
        "group": group,
        "params": b["params"],
        "round_times": list((b.get("stats") or {}).get("data") or []),
        "warmup": (b.get("options") or {}).get("warmup", 0),
        "metrics": metrics,
        "extra_info": extra_info,
    }


def judged(
    ordered: Sequence[dict[str, Any]], baseline: str | Mapping[str, str | None], specbench: dict[str, Any]
) -> dict[int, dict[str, Any]]:
    """Each cell's comparison with its baseline (stats/paired.py) and the verdict the run's checks
    leave it: first widened by the start-to-start variance (engines started apart), so that what a
    family's drift, a bracketed member's brackets and an A/A control's band then judge is the
    widened interval."""
    sp = compare_all(ordered, baseline)
    instances.apply(ordered, sp, specbench)  # engines started apart: widened by tau
    drift.apply(ordered, sp, specbench)  # a family's sentinel: its drift withholds smaller verdicts
    brackets.apply(ordered, sp, specbench)  # a bracketed member: verdicts on the widened interval
    control.apply(ordered, sp, specbench, baseline)  # a twin of the baseline: an instance effect withholds
    return sp


def build(
    results: Sequence[dict[str, Any]],
    *,
    baseline: str | Mapping[str, str | None],
    machine_info: dict[str, Any],
    commit_info: dict[str, Any],
    specbench: dict[str, Any],
    version: str,
) -> dict[str, Any]:
    ordered = sorted(results, key=lambda r: r["nodeid"])
    sp = judged(ordered, baseline, specbench)
    return {
        "machine_info": machine_info,
        "commit_info": commit_info,
        "benchmarks": [
            benchmark_entry(
                r, sp[i], baseline if isinstance(baseline, str) else baseline.get(r["params"]["method"])
            )
            for i, r in enumerate(ordered)
        ],
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": version,
        "specbench": specbench,
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str, sort_keys=False)


def planned_vs_engine(event: dict[str, Any]) -> str | None:
    """The planner's KV capacity and memory fraction next to what the engine sized at start."""
    planned = event.get("planned") or {}
    info = event.get("info") or {}
    engine_tokens = (info.get("scheduler_info") or {}).get("max_total_num_tokens")
    if not planned.get("kv_tokens_capacity") or not engine_tokens:
        return None
    frac = (info.get("server_args") or {}).get("mem_fraction_static")
    line = (
        f"{event['group']}: KV tokens planned {planned['kv_tokens_capacity']:,} (mem_fraction_static "
        f"{planned.get('mem_fraction_static')}), engine {engine_tokens:,} (mem_fraction_static {frac}): "
        f"planned/engine = {planned['kv_tokens_capacity'] / engine_tokens:.3f}"
    )
    after, before = event.get("gpu_used_mib_after_start") or {}, event.get("gpu_used_mib_before") or {}
    if after and planned.get("budget_bytes_per_gpu"):
        held = max(after[k] - before.get(k, 0) for k in after)
        line += (
            f"; GPU memory held after start {held:,} MiB per GPU (NVML), planned static "
            f"{planned['budget_bytes_per_gpu'] >> 20:,} MiB (weights + KV + state; the rest is "
            "CUDA graphs, context, activations)"
        )
    return line


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["param"]: b["extra_info"] for b in doc.get("benchmarks", [])}


def failed_line(f: Any) -> str:
    """A failed_cells entry as a list item; one without a name (or not an entry at all, from an
    edited or foreign JSON) is shown unnamed with what it has."""
    if not isinstance(f, dict):
        return f"- failed, unnamed: {f!r}"
    if f.get("cell"):
        name = f"`{f['cell']}`"
    else:
        params = f.get("params")
        axes = ", ".join(f"{k}={v}" for k, v in params.items()) if isinstance(params, dict) else ""
        name = f"an unnamed cell ({axes})" if axes else "an unnamed cell"
    phase = f" ({f['phase']})" if f.get("phase") else ""
    return f"- failed {name}{phase}: {failure_headline(f) or 'no error recorded'}"


def hook_lines(spec: dict[str, Any]) -> list[str]:
    """The run's failed hooks (``specbench.hook_failures``) as a section: they failed the run (and
    fail a gate on it), and what an after-hook was to restore may be left stopped."""
    got = spec.get("hook_failures") or []
    if not got:
        return []
    out = ["", f"Hooks that failed: {len(got)} (the run failed; a gate on it fails):"]
    for f in got:
        if not isinstance(f, dict):
            out.append(f"- a hook failed: {f!r}")
            continue
        who = f" of `{f['group']}`" if f.get("group") else ""
        left = f"; may be left stopped: {f['may_be_left']}" if f.get("may_be_left") else ""
        out.append(f"- {f.get('hook') or 'a'} hook{who}: {f.get('error') or 'no error recorded'}{left}")
    return [*out, ""]


def markdown(doc: dict[str, Any]) -> list[str]:
    """One results JSON as a Markdown table, then its failed cells (with the engine's reason).
    Every string from the JSON is escaped (mdtext): a name or reason cannot break a table."""
    return one_line(_markdown(safe_doc(doc)))


def _markdown(doc: dict[str, Any]) -> list[str]:
    columns = _columns(doc, terminal=False)
    lines = [
        "| cell | " + " | ".join(h for h, _, _, _ in columns) + " | err |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for cell, e in _rows(doc).items():
        cols = [cell, *(_md_value(e, k, f) for _, k, f, _ in columns), str(e.get("errors", 0))]
        lines.append(f"| {' | '.join(cols)} |")
    lines += ["", *legend(doc), ""] if legend(doc) else []
    spec = doc.get("specbench") or {}
    lines += [failed_line(f) for f in spec.get("failed_cells") or []]
    for m in spec.get("missing_cells") or []:  # a partial merge: cells of the split not measured
        lines.append(f"- missing `{m.get('cell') or '?'}`: {m.get('why')}")
    lines += hook_lines(spec)
    if "engine_starts" in spec:
        lines.append(f"- engine starts: {spec['engine_starts']}")
    from .withheld import load_counts

    lines += load_counts(doc)
    lines += [f"- {ln}" for ln in drift.lines(doc)]
    lines += [f"- {ln}" for ln in control.lines(doc)]
    from .provenance import markdown as settings_table
    from .tuning import section as tuning_section
    from .versus import section as versus_section

    views = decide.best_methods(doc) + tuning_section(doc) + versus_section(doc)
    # the views' own "<" (a ranking's sign, "[< 1, > 4]") escaped as the JSON's strings are
    return lines + [re.sub(r"(?<!\\)<", r"\\<", ln) for ln in views] + settings_table(doc)


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Two results JSONs cell by cell: throughput (and new/old) and acceptance length, which
    ``pytest-benchmark compare`` (round times only) does not show."""
    old, new = safe_doc(old), safe_doc(new)
    a, b = _rows(old), _rows(new)
    redefined = _redefined(old, new)
    lines = [
        "| cell | tok/s old | tok/s new | new/old | accept old | accept new |",
        "|---|---|---|---|---|---|",
    ]
    for cell in list(a) + [c for c in b if c not in a]:
        ea, eb = a.get(cell, {}), b.get(cell, {})
        ta, tb = ea.get("output_tokens_per_s"), eb.get("output_tokens_per_s")
        ratio = tb / ta if ta and tb else None
        cols = [
            cell,
            _fmt(ta, ".1f") if cell in a else "absent",
            _fmt(tb, ".1f") if cell in b else "absent",
            "other work" if cell in redefined else _fmt(ratio, ".3f"),
            _fmt(ea.get("accept_length"), ".3f"),
            _fmt(eb.get("accept_length"), ".3f"),
        ]
        lines.append(f"| {' | '.join(cols)} |")
    for cell, why in redefined.items():
        lines.append(f"- `{cell}` measured other work in the two runs ({why}): not compared")
    return one_line(lines)


def write_plots(
    doc: dict[str, Any], out_dir: Any, not_made: list[tuple[str, str]] | None = None
) -> list[Any]:
    """The run's pictures and index.md (the Markdown report above them, the plots not made and
    why below) in ``out_dir``; ``not_made`` gets each plot not drawn with its reason."""
    from .plots import index_page, plot_run

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        import sys

        print("plots need matplotlib: pip install -e '.[plots]' (no plots written)", file=sys.stderr)
        return []
    from .plots_breakeven import plot_map
    from .plots_pareto import plot_pareto
    from .plots_versus import plot_versus

    skipped = not_made if not_made is not None else []
    pngs = plot_run(doc, out_dir, skipped) + plot_pareto(doc, Path(out_dir), skipped)
    pngs += plot_map(doc, Path(out_dir), skipped) + plot_versus(doc, Path(out_dir), skipped)
    index_page(doc, pngs, out_dir, markdown(doc), skipped)
    return pngs


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_specbench.report RUN.json`` (a Markdown table) or
    ``python -m pytest_specbench.report OLD.json NEW.json`` (cell by cell; with
    ``--max-tok-s-drop`` / ``--max-accept-drop`` it exits 1 when a cell got worse than allowed, 3
    when the gate was inconclusive: docs/gate.md)."""
    import argparse
    import sys
    from pathlib import Path

    def fraction(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = -1.0
        if not 0 <= v < 1:
            raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), e.g. 0.05 for 5%; got {text!r}")
        return v

    ap = argparse.ArgumentParser(
        prog="python -m pytest_specbench.report",
        description=main.__doc__,
        epilog="subcommand: python -m pytest_specbench.report merge SHARD.json ... -o RUN.json merges the "
        "shard JSONs of one sharded run (--specbench-shard I/N) into one results JSON "
        "(python -m pytest_specbench.report merge --help).",
    )
    ap.add_argument("json", nargs="+", help="one results JSON, or two to compare (old, new)")
    ap.add_argument(
        "--max-tok-s-drop",
        type=fraction,
        metavar="F",
        help="with two JSONs: exit 1 when a cell's new/old tok/s interval (both runs' rounds) lies "
        "wholly below 1 - F, or a cell failed or is missing in the new run; a cell disturbed or "
        "saturated in either run is listed as not gated (docs/gate.md)",
    )
    ap.add_argument(
        "--max-accept-drop",
        type=fraction,
        metavar="F",
        help="with two JSONs: exit 1 when a cell's acceptance length is below old x (1 - F)",
    )
    ap.add_argument(
        "--max-latency-rise",
        type=fraction,
        metavar="F",
        help="with two JSONs: exit 1 when an open-loop cell's (poisson, trace) new/old p50 latency "
        "interval lies wholly above 1 + F (default: the --max-tok-s-drop fraction; docs/gate.md)",
    )
    ap.add_argument(
        "--run-spread",
        type=fraction,
        metavar="S",
        help="with the gate: one run's run-to-run spread of a cell's tok/s (sd, e.g. 0.01 for 1%%, from "
        "repeat runs of the same code), counted in every cell; default: read from the cells (4 or "
        "more with rounds in both runs), else 5%% assumed (docs/gate.md)",
    )
    ap.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="with the gate: exit 0 instead of 3 when it is inconclusive (no cell gated on tok/s, every "
        "one disturbed, saturated, of other work, or with too little power); still said on its last line",
    )
    ap.add_argument(
        "--plots",
        metavar="DIR",
        help="also write PNGs (with the data of each as CSV) and an index.md that embeds them; with two "
        "JSONs, the new/old comparison per cell with the gate's thresholds",
    )
    ap.add_argument(
        "--html",
        metavar="FILE",
        help="with one JSON: a self-contained HTML report (tables, decision view, failed cells, "
        "provenance, every plot embedded) in FILE",
    )
    ap.add_argument(
        "--versus",
        metavar="METHOD",
        help="compare every method of each shape with METHOD (a swept method: its best setting), "
        "paired rounds as for the baseline; with several JSONs (runs of one machine), only those "
        "comparisons, across the runs",
    )
    ap.add_argument(
        "--screen",
        action="store_true",
        help="with one JSON: print the end-of-run screen (the decision per shape, what was withheld and "
        "why, about 40 lines) instead of the Markdown report",
    )
    args = ap.parse_args(argv)
    if args.screen and (len(args.json) != 1 or args.html or args.plots or args.versus):
        ap.error(
            "--screen prints one results JSON's screen; give one JSON, without --html, --plots or --versus"
        )
    if args.versus and len(args.json) > 1:
        thresholds = (args.max_tok_s_drop, args.max_accept_drop, args.max_latency_rise)
        if args.html or args.plots or any(x is not None for x in thresholds):
            ap.error(
                "--versus with several JSONs prints their comparisons only; --html, --plots and the gate "
                "take one JSON (or old new without --versus)"
            )
        from .versus_read import read_several

        return read_several(args.json, args.versus, ap.error)
    if args.html and len(args.json) != 1:
        ap.error("--html reports one results JSON")
    if len(args.json) > 2:
        ap.error(f"give one results JSON or two (old new); got {len(args.json)}")
    gated = any(x is not None for x in (args.max_tok_s_drop, args.max_accept_drop, args.max_latency_rise))
    if gated and len(args.json) != 2:
        ap.error(
            "--max-tok-s-drop / --max-accept-drop / --max-latency-rise compare two results JSONs (old new)"
        )
    docs = []
    for p in args.json:
        try:
            doc = json.loads(Path(p).read_text())
            doc["benchmarks"]  # noqa: B018 - a results JSON has it
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"{p}: not a results JSON ({type(e).__name__}: {e})")
        docs.append(doc)
    if len(docs) == 1:
        if args.versus:
            from .versus_read import set_versus

            set_versus(docs[0], args.versus, ap.error)
        if args.screen:
            from .screen import lines as screen_lines

            print("\n".join(screen_lines(docs[0], args.json[0])))
            return 0
        if not args.html:  # the page holds the report; the terminal gets where it went
            print("\n".join(markdown(docs[0])))
        if args.plots:
            from .plots import not_made_lines

            not_made: list[tuple[str, str]] = []
            for png in write_plots(docs[0], Path(args.plots), not_made):
                print(f"wrote {png}", file=sys.stderr)
            for ln in not_made_lines(not_made):  # also under "Plots not made" in its index.md
                print(f"not made: {ln}", file=sys.stderr)
        if args.html:
            from .html import write_html

            page = write_html(docs[0], Path(args.html), markdown(docs[0]), write_plots)
            print(f"wrote {page}", file=sys.stderr)
        return 0
    print("\n".join(compare(docs[0], docs[1])))
    if args.plots:
        from .plots import plot_compare

        for png in plot_compare(
            docs[0], docs[1], Path(args.plots), args.max_tok_s_drop, args.max_accept_drop
        ):
            print(f"wrote {png}")
    from .gate_text import cli

    said, status = cli(
        docs[0],
        docs[1],
        args.json[0],
        args.max_tok_s_drop,
        args.max_accept_drop,
        args.max_latency_rise,
        args.allow_inconclusive,
        args.run_spread,
    )
    print("\n".join(said))
    return status
