"""Every view orders by the quantity it prints and never contradicts its own verdicts; forced
cells are never ranked; break-even reads only what the data support. Hand-built results
documents, no engine."""

from __future__ import annotations

from pytest_specbench.report.decide import best_methods, ranked_shapes, ranking


def _open(method: str, pooled_p50: float, round_p50: float, **extra: object) -> dict:
    """An open-loop cell: three rounds of two requests at ``round_p50`` s each, and a pooled
    ``latency_s_p50`` set apart from them (the two can disagree: the pooled one mixes rounds)."""
    params = {"method": method, "workload": "poisson", "tp": 1, "concurrency": 4, "request_rate": 2.0}
    e = {
        "output_tokens_per_s": 100.0,
        "offered_request_rate": 2.0,
        "achieved_request_rate": 2.0,
        "latency_s_p50": pooled_p50,
        "request_digests": ["d0", "d1", "d2"],
        "per_request": {
            "tag": [f"round{r}/{i}" for r in range(3) for i in range(2)],
            "latency_s": [round_p50] * 6,
        },
        "speedup_baseline": "ar",
        **extra,
    }
    return {"param": f"{method}-r2", "params": params, "extra_info": e}


def test_the_open_loop_view_orders_by_p50_and_its_signs_follow_the_verdicts() -> None:
    """ngram's pooled p50 (0.300 s) is below ar's (0.400 s), so it is listed first; its paired
    rounds (0.45 s against 0.40 s: x0.89 each) say slower, so the sign is "<", never ">"."""
    doc = {
        "benchmarks": [
            _open("ar", 0.400, 0.40, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _open(
                "ngram",
                0.300,
                0.45,
                speedup_vs_ar=0.40 / 0.45,
                speedup_vs_ar_ci95=[0.40 / 0.45, 0.40 / 0.45],
                speedup_verdict="slower",
            ),
        ]
    }
    ((label, rows),) = ranked_shapes(doc)
    assert [r["method"] for r in rows] == ["ngram", "ar"]
    assert ranking(rows) == "ngram p50 0.300 s (x0.89 [0.89, 0.89] slower) < ar p50 0.400 s (baseline)"
    (row,) = [ln for ln in best_methods(doc) if ln.startswith(f"| {label} |")]
    assert row.startswith(f"| {label} | **ngram** < ar | ngram p50 0.300 s")
    assert " > " not in row


def _closed(method: str, own: float, ref: float | None, **extra: object) -> dict:
    """A closed-loop cell of three 1-s rounds at ``own`` tok/s; ``ref``: the tok/s of ar's rounds
    interleaved with it (None: ar's own cell)."""
    params = {"method": method, "workload": "throughput", "tp": 1, "concurrency": 1}
    e: dict = {
        "output_tokens_per_s": own,
        "round_tokens_per_s": [own] * 3,
        "request_digests": ["d0", "d1", "d2"],
        "speedup_baseline": "ar",
        **extra,
    }
    if ref is not None:
        e["reference"] = {"method": "ar", "round_tokens_per_s": [ref] * 3, "errors": 0, "saturated": False}
        x = own / ref
        e.update(speedup_vs_ar=x, speedup_vs_ar_ci95=[x, x], speedup_pairing="interleaved")
        e["speedup_verdict"] = "faster" if x > 1.02 else "slower" if x < 0.98 else "within ±2%"
    return {"param": method, "params": params, "extra_info": e, "stats": {"data": [1.0] * 3}}


def test_the_interleaved_view_leads_with_the_speedup_it_ranks_by() -> None:
    """Every method has ar's rounds interleaved with its own: ranked by that speedup (draft 61.2
    over its ar rounds' 51.0: x1.20; ngram-d2 134.4 over 140.0: x0.96), each row leading with it,
    the two tok/s it rests on beside it, and ar's own cell (142.0 tok/s, run apart) named as such:
    draft's 61.2 tok/s below ar's 142.0 no longer reads as "faster" without a word."""
    doc = {
        "benchmarks": [
            _closed("ar", 142.0, None, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _closed("draft", 61.2, 51.0),
            _closed("ngram-d2", 134.4, 140.0),
        ]
    }
    ((_, rows),) = ranked_shapes(doc)
    assert ranking(rows) == (
        "draft x1.20 [1.20, 1.20] faster (61.2 tok/s; its interleaved ar rounds 51.0 tok/s) "
        "> ar x1.00 (baseline, its own cell 142.0 tok/s) "
        "> ngram-d2 x0.96 [0.96, 0.96] slower (134.4 tok/s; its interleaved ar rounds 140.0 tok/s)"
    )


def _point(method: str, c: int, tok_s: float, tpot_ms: float, **extra: object) -> dict:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": c, "output_tokens": 64}
    e = {
        "output_tokens_per_s": tok_s,
        "tpot_ms_p50": tpot_ms,
        "round_tokens_per_s": [tok_s] * 3,
        "request_digests": ["d0", "d1", "d2"],
        "speedup_baseline": "ar",
        **extra,
    }
    return {"param": f"{method}-c{c}", "params": params, "extra_info": e, "stats": {"data": [1.0] * 3}}


def test_forced_and_dropped_cells_are_never_on_the_frontier_in_the_crossover_or_ranked() -> None:
    """A forced draft-a4 beats every real point on both axes and a race-dropped ngram-d8 is the
    fastest cell: neither is a frontier point, a crossover line, a ranked method or a TP-scaling
    row; the real cells' frontier is ar c8 and ngram c1."""
    from pytest_specbench.report import decide, pareto

    fast = {"speedup_vs_ar": 3.0, "speedup_vs_ar_ci95": [2.9, 3.1], "speedup_verdict": "faster"}
    dropped = {"status": "dropped", "lost_to": "ngram-c1", "ratio": 0.5, "lo": 0.4, "hi": 0.6, "shape": "s"}
    doc = {
        "benchmarks": [
            _point("ar", 1, 100.0, 10.0, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _point("ar", 8, 640.0, 12.5, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _point(
                "ngram",
                1,
                150.0,
                6.25,
                speedup_vs_ar=1.5,
                speedup_vs_ar_ci95=[1.4, 1.6],
                speedup_verdict="faster",
            ),
            _point(
                "ngram",
                8,
                600.0,
                12.5,
                speedup_vs_ar=0.94,
                speedup_vs_ar_ci95=[0.9, 0.97],
                speedup_verdict="slower",
            ),
            _point(
                "draft-a4", 1, 900.0, 1.0, accept_forced=4.0, forced_family="draft", accept_length=4.0, **fast
            ),
            _point(
                "draft-a4",
                8,
                3000.0,
                2.0,
                accept_forced=4.0,
                forced_family="draft",
                accept_length=4.0,
                **fast,
            ),
            _point("ngram-d8", 1, 990.0, 0.5, race=dropped, **fast),
            _point("ngram-d8", 8, 4000.0, 1.0, race=dropped, **fast),
        ]
    }
    (panel,) = pareto.points(doc).values()
    assert sorted(q.cell for q in panel) == ["ar-c1", "ar-c8", "ngram-c1", "ngram-c8"]
    assert [q.cell for q in pareto.frontier(panel)] == ["ar-c8", "ngram-c1"]
    assert pareto.crossover(doc) == ["ngram tp1 throughput out64: faster at c1, slower at c8"]
    ranked = [[r["method"] for r in rows] for _, rows in decide.ranked_shapes(doc)]
    assert ranked == [["ngram", "ar"], ["ar", "ngram"]]
    text = "\n".join(decide.best_methods(doc))
    assert "draft-a4" not in text and "ngram-d8" not in text
