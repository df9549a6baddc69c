"""The decision view: which method to deploy at which TP size and concurrency, from a results
JSON. Pure functions over the document ``report.build`` writes (its ``benchmarks`` entries);
the terminal summary and ``python -m pytest_specbench.report`` print them. No pytest, no I/O.
"""

from __future__ import annotations

from typing import Any


def method_summary(r: dict[str, Any]) -> str:
    parts = []
    if r.get("speedup_vs_ar") is not None:
        parts.append(f"x{r['speedup_vs_ar']:.2f}")
    if r.get("accept_length"):
        parts.append(f"accept {r['accept_length']:.2f}")
    if r.get("slo_attainment") is not None:
        parts.append(f"slo met {r['slo_attainment']:.0%}")
    sd = f"±{r['tok_s_sd']:.1f}" if r.get("tok_s_sd") is not None else ""
    return f"{r['method']} {r['output_tokens_per_s']:.1f}{sd}" + (f" ({', '.join(parts)})" if parts else "")


def _round_spread(b: dict[str, Any]) -> float | None:
    """Standard deviation of a cell's tok/s across its timed rounds (each round produces the
    same number of output tokens); None with fewer than two rounds."""
    import statistics

    times = (b.get("stats") or {}).get("data") or []
    tokens = b["extra_info"].get("output_tokens")
    if len(times) < 2 or not tokens or not all(t > 0 for t in times):
        return None
    return statistics.stdev(tokens / len(times) / t for t in times)


def ranking(rows: list[dict[str, Any]]) -> str:
    """Methods fastest first, joined by ">" or by "≈" where the two are within one round-to-round
    standard deviation of each other (the order between them is not established by the run)."""
    out = method_summary(rows[0])
    for a, b in zip(rows, rows[1:], strict=False):
        out += (" ≈ " if _tied(a, b) else " > ") + method_summary(b)
    return out


def _tied(a: dict[str, Any], b: dict[str, Any]) -> bool:
    sa, sb = a.get("tok_s_sd"), b.get("tok_s_sd")
    if sa is None or sb is None:
        return False
    return bool(a["output_tokens_per_s"] - sa <= b["output_tokens_per_s"] + sb)


_SHAPE_ORDER = ("workload", "tp", "concurrency", "context_tokens", "output_tokens")


def _natural(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Sort key of a shape key (baseline, (param, value), ...): workload, TP, concurrency,
    context, output, then the rest; numbers as numbers (c2 before c16)."""

    def num(v: str) -> tuple[int, float, str]:
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)

    pairs = dict(key[1:])
    names = [k for k in _SHAPE_ORDER if k in pairs] + sorted(k for k in pairs if k not in _SHAPE_ORDER)
    return (key[0], *((k, num(pairs[k])) for k in names))


def ranked_shapes(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """For each cell shape (workload, TP, concurrency, prompt and output tokens, other axes, and
    the target model, named by its AR baseline) measured with two or more methods: a label and
    the methods' extra_info (plus "method"), fastest output tok/s first."""
    shapes = _varying(doc, "method")
    several_models = len({k[0] for k in shapes}) > 1
    out = []
    for key, cells in sorted(shapes.items(), key=lambda kv: _natural(kv[0])):
        if len(cells) < 2:
            continue
        rows = [{"method": m, **b["extra_info"], "tok_s_sd": _round_spread(b)} for m, b in cells]
        rows.sort(key=lambda r: -r["output_tokens_per_s"])
        label = _shape_label(dict(key[1:]))
        if several_models:
            label += f" (model of {key[0]})"
        out.append((label, rows))
    return out


def _varying(doc: dict[str, Any], axis: str) -> dict[tuple[Any, ...], list[tuple[Any, dict[str, Any]]]]:
    """Cells with throughput grouped by everything but ``axis``: key (the cell's AR baseline,
    (param, str(value)) of every other param, sorted), value [(the cell's ``axis`` value, its
    JSON entry)] in the order of the axis. Cells of one key differ only in ``axis``."""
    by: dict[tuple[Any, ...], list[tuple[Any, dict[str, Any]]]] = {}
    for b in doc.get("benchmarks", []):
        p, e = dict(b.get("params") or {}), b["extra_info"]
        if not e.get("output_tokens_per_s") or axis not in p or "method" not in p:
            continue
        value = p.pop(axis)
        key = (e.get("speedup_baseline") or "-", *sorted((k, str(v)) for k, v in p.items()))
        by.setdefault(key, []).append((value, b))
    return {k: sorted(v, key=lambda x: x[0]) for k, v in by.items()}


def _method_and_label(key: tuple[Any, ...]) -> str:
    """ "ar ttft tp1 in256 out64" from a _varying key whose params still hold the method."""
    params = dict(key[1:])
    return f"{params.pop('method')} {_shape_label(params)}"


def _shape_label(axes: dict[str, Any]) -> str:
    """ "throughput tp1 c32 in128 out256 category=code" from a cell's params (without method)."""
    axes = dict(axes)
    label = " ".join(
        f"{prefix}{axes.pop(k)}"
        for k, prefix in (
            ("workload", ""),
            ("tp", "tp"),
            ("concurrency", "c"),
            ("context_tokens", "in"),
            ("output_tokens", "out"),
        )
        if k in axes
    )
    return label + "".join(f" {k}={v}" for k, v in axes.items())


def tp_scaling(doc: dict[str, Any]) -> list[str]:
    """For each method and shape measured at two or more TP sizes: tok/s and tok/s per GPU at
    each (the "which TP" question: more GPUs per engine, or more engines of fewer GPUs)."""
    out = []
    for key, cells in _varying(doc, "tp").items():
        if len(cells) < 2:
            continue
        vals = [(tp, b["extra_info"]["output_tokens_per_s"]) for tp, b in cells]
        per = ", ".join(f"tp{tp} {v:.1f} ({v / int(tp):.1f}/GPU)" for tp, v in vals)
        out.append(f"{_method_and_label(key)}: {per}")
    return out


SLO_TARGET = 0.9  # a concurrency "holds" the SLO when at least this fraction of requests met it


def slo_capacity(doc: dict[str, Any]) -> list[str]:
    """For each method and shape with SLO cells at two or more concurrencies: the highest
    concurrency whose requests met the SLO at least SLO_TARGET of the time, with its goodput
    (the "how many requests at once per engine" question)."""
    out = []
    for key, cells in _varying(doc, "concurrency").items():
        vals = [(c, b["extra_info"]) for c, b in cells if b["extra_info"].get("slo_attainment") is not None]
        if len(vals) < 2:
            continue
        held = [(c, e) for c, e in vals if e["slo_attainment"] >= SLO_TARGET]
        met = ", ".join(f"c{c} {e['slo_attainment']:.0%}" for c, e in vals)
        if held:
            c, e = held[-1]
            head = f"highest holding c{c} (goodput {e['goodput_tokens_per_s']:.1f} tok/s)"
        else:
            head = "no concurrency"
        out.append(f"{_method_and_label(key)}: {head}; met {met}")
    return out


def best_methods(doc: dict[str, Any]) -> list[str]:
    """The decision view as Markdown: per shape (ranked_shapes) the fastest method and every
    method ranked, then each method's tok/s by TP size (tp_scaling). Empty when neither applies."""
    out = []
    rows = [
        f"| {label} | **{ranked[0]['method']}**{' ≈ ' + ranked[1]['method'] if _tied(*ranked[:2]) else ''} "
        f"| {ranking(ranked)} |"
        for label, ranked in ranked_shapes(doc)
    ]
    if rows:
        out += [
            "",
            "Fastest method per cell shape (output tok/s ± its standard deviation across rounds; ≈: within",
            "one deviation of each other; x: speedup vs the AR method of the same model):",
            "",
            "| shape | fastest | all methods, fastest first |",
            "|---|---|---|",
            *rows,
        ]
    tps = tp_scaling(doc)
    if tps:
        out += ["", "Output tok/s by TP size (and per GPU):", "", *(f"- {ln}" for ln in tps)]
    cap = slo_capacity(doc)
    if cap:
        out += ["", f"Concurrency that holds the SLO for >= {SLO_TARGET:.0%} of requests:", ""]
        out += [f"- {ln}" for ln in cap]
    return out
