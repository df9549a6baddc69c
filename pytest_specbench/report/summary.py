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

from . import brackets, decide, drift
from .gate import failure_headline
from .gate import redefined as _redefined
from .mdtext import one_line, safe_doc
from .paired import compare_all

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
    sp = compare_all(ordered, baseline)
    drift.apply(ordered, sp, specbench)  # a family's sentinel: its drift withholds smaller verdicts
    brackets.apply(ordered, sp, specbench)  # a bracketed member: verdicts on the widened interval
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


def _fmt(v: Any, spec: str) -> str:
    """``v`` formatted, or "-" (right-aligned to the spec's width) when it is None."""
    if v is None:
        width = spec[: len(spec) - len(spec.lstrip("0123456789"))]
        return format("-", f">{width}") if width else "-"
    if spec == "ci":  # a [lo, hi] interval
        return f"[{v[0]:.2f}, {v[1]:.2f}]"
    return format(v, spec)


# per-cell columns of the terminal table and the Markdown report: (header, extra_info key,
# format, terminal width; None: Markdown only)
COLUMNS = (
    ("tok/s", "output_tokens_per_s", ".1f", 10),
    ("accept", "accept_length", ".3f", 7),
    ("vs ar", "speedup_vs_ar", ".2f", 6),
    ("vs ar 95% CI", "speedup_vs_ar_ci95", "ci", None),
    ("rounds CV", "rounds_cv", ".1%", None),
    ("ttft p50 ms", "ttft_ms_p50", ".1f", 12),
    ("tpot p50 ms", "tpot_ms_p50", ".2f", None),
    ("lat p50 s", "latency_s_p50", ".3f", 10),
)


# shown only when a cell of the run has service-level objectives (workload key slo)
SLO_COLUMNS = (
    ("slo met", "slo_attainment", ".0%", 8),
    ("goodput tok/s", "goodput_tokens_per_s", ".1f", 14),
)


# shown only when a cell of the run has GPU energy (NVML counters)
ENERGY_COLUMNS = (("J/token", "joules_per_output_token", ".4f", 9), ("power W", "power_w_avg", ".0f", 8))


def _columns(doc: dict[str, Any], terminal: bool) -> list[tuple[str, str, str, int | None]]:
    cols = list(COLUMNS)
    for key, more in (("slo_attainment", SLO_COLUMNS), ("joules_per_output_token", ENERGY_COLUMNS)):
        if any(key in b["extra_info"] for b in doc.get("benchmarks", [])):
            cols += more
    return [c for c in cols if c[3] is not None or not terminal]


def table(doc: dict[str, Any]) -> list[str]:
    """Rows for the terminal summary: one per cell, grouped by workload."""
    cols = _columns(doc, terminal=True)
    head = f"{'cell':<48} " + " ".join(f"{h:>{w}}" for h, _, _, w in cols) + f" {'err':>4}"
    lines = [head, "-" * len(head)]
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        vals = " ".join(_fmt(e.get(k), f"{w}{f}") for _, k, f, w in cols)
        lines.append(f"{b['param']:<48} {vals} {e.get('errors', 0):>4}")
    return lines + legend(doc)


def legend(doc: dict[str, Any]) -> list[str]:
    """What tok/s and "vs ar" are, and the tok/s estimators the run's cells used."""
    from .metrics import ESTIMATORS

    used: dict[str, int] = {}
    for b in doc.get("benchmarks", []):
        est = b["extra_info"].get("tok_s_estimator")
        if est:
            used[est] = used.get(est, 0) + 1
    if not used:
        return []
    out = [
        "tok/s: the geometric mean of a cell's timed rounds' tok/s; vs ar: the geometric mean of its "
        "paired rounds' ratios to AR's (the ratio of the two tok/s shown, where every round pairs and "
        "AR's rounds were not interleaved with the cell's: see below); "
        "open loop: AR's p50 latency ÷ the cell's, per paired round (its tok/s follows the offered load)"
    ]
    out += [f"  {n} cells, {est}: {ESTIMATORS.get(est, est)}" for est, n in sorted(used.items())]
    benches = doc.get("benchmarks", [])
    inter = sum(1 for b in benches if b["extra_info"].get("speedup_pairing") == "interleaved")
    if inter:
        out.append(
            f"  {inter} cells, vs ar interleaved: AR's rounds ran between the cell's own (A B, B A, ...; "
            "a second engine in the process), and vs ar divides by those, not by AR's own cell (shown)"
        )
    return out


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


def markdown(doc: dict[str, Any]) -> list[str]:
    """One results JSON as a Markdown table, then its failed cells (with the engine's reason).
    Every string from the JSON is escaped (mdtext): a name or reason cannot break a table."""
    return one_line(_markdown(safe_doc(doc)))


def load_counts(doc: dict[str, Any]) -> list[str]:
    """The disturbed cells as the screen counts them: those without a verdict on their rounds, and
    apart from them the verdicts kept under load (withheld.py)."""
    from .withheld import _disturbed, kept_head

    out = []
    gone = _disturbed(doc)
    if gone:
        out.append(f"- disturbed {len(gone)} (no verdict on their rounds; each cell's warning below)")
    kept = kept_head(doc)
    if kept:
        out.append(f"- {kept[0]}{', '.join(kept[1])}")
    return out


def _md_value(e: dict[str, Any], key: str, spec: str) -> str:
    """A Markdown table cell: "vs ar" names what it divides where that is not the two tok/s shown
    (open loop: p50 latency; interleaved: the baseline's rounds beside the cell, with their figure);
    an interval from too few rounds is said as such."""
    if key == "speedup_vs_ar_ci95" and e.get(key):
        pairs = e.get("speedup_pairs")
        if isinstance(pairs, int) and 0 < pairs < decide.MIN_INTERVAL_PAIRS:
            return f"{pairs} rounds: too few"
    out = _fmt(e.get(key), spec)
    if key != "speedup_vs_ar" or e.get(key) is None or e.get("speedup_verdict") == "baseline":
        return out
    open_loop = decide.open_loop_ratio(e)
    if open_loop:
        out += " (p50 latency)"
    ref = e.get("reference") or {}
    if e.get("speedup_pairing") == "interleaved" and ref:
        key_, fmt = (
            ("round_latency_s_p50", "p50 {:.3f} s") if open_loop else ("round_tokens_per_s", "{:.1f} tok/s")
        )
        vals = [x for x in ref.get(key_) or () if x]
        if vals:
            out += f" vs {ref.get('method')}'s interleaved {fmt.format(sum(vals) / len(vals))}"
    return out


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
    if "engine_starts" in spec:
        lines.append(f"- engine starts: {spec['engine_starts']}")
    lines += load_counts(doc)
    lines += [f"- {ln}" for ln in drift.lines(doc)]
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


def write_plots(doc: dict[str, Any], out_dir: Any) -> list[Any]:
    """The run's pictures and index.md (the Markdown report above them) in ``out_dir``."""
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

    pngs = plot_run(doc, out_dir) + plot_pareto(doc, Path(out_dir)) + plot_map(doc, Path(out_dir))
    pngs += plot_versus(doc, Path(out_dir))
    index_page(doc, pngs, out_dir, markdown(doc))
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
        if args.html or args.plots or args.max_tok_s_drop is not None or args.max_accept_drop is not None:
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
    gated = args.max_tok_s_drop is not None or args.max_accept_drop is not None
    if gated and len(args.json) != 2:
        ap.error("--max-tok-s-drop / --max-accept-drop compare two results JSONs (old new)")
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
            for png in write_plots(docs[0], Path(args.plots)):
                print(f"wrote {png}", file=sys.stderr)
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
    from .gate import gate, lines

    verdict = gate(docs[0], docs[1], args.max_tok_s_drop, args.max_accept_drop)
    if gated:
        print("\n".join(lines(verdict, args.json[0])))
        if verdict.inconclusive and args.allow_inconclusive:
            print("(--allow-inconclusive: exit 0)")
            return 0
    return verdict.exit_code
