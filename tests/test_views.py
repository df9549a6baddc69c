"""Every view orders by the quantity it prints and never contradicts its own verdicts; forced
cells are never ranked; break-even reads only what the data support. Hand-built results
documents, no engine."""

from __future__ import annotations

from pytest_specbench.report.decide import INTERLEAVED_NOTE, best_methods, ranked_shapes, ranking


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
    rounds (0.45 s against 0.40 s: x0.89 each) say slower, which its own x says, and it is never
    called fastest."""
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
    assert ranking(rows) == (
        "ngram p50 0.300 s (x0.89 [0.89, 0.89] slower vs ar); next ar p50 0.400 s (the baseline)"
    )
    (row,) = [ln for ln in best_methods(doc) if ln.startswith(f"| {label} |")]
    assert row.startswith(f"| {label} | no verdict (ar vs ngram: faster) | ngram p50 0.300 s")
    assert "**" not in row


def test_an_open_loop_with_its_baseline_interleaved_is_ordered_by_that_speedup() -> None:
    """ngram's own p50 (0.094 s) is below ar's own cell's (0.100 s), but over the ar rounds
    interleaved with it (p50 0.085 s) it is x0.90 slower: it is listed after ar, led by that
    speedup, with both p50s it rests on beside it, never first as the faster."""
    ref = {"method": "ar", "round_latency_s_p50": [0.085] * 3, "errors": 0, "saturated": False}
    doc = {
        "benchmarks": [
            _open("ar", 0.100, 0.100, speedup_vs_ar=1.0, speedup_verdict="baseline"),
            _open(
                "ngram",
                0.094,
                0.094,
                speedup_vs_ar=0.90,
                speedup_vs_ar_ci95=[0.88, 0.92],
                speedup_verdict="slower",
                speedup_pairing="interleaved",
                reference=ref,
            ),
        ]
    }
    ((label, rows),) = ranked_shapes(doc)
    assert [r["method"] for r in rows] == ["ar", "ngram"]
    assert ranking(rows) == (
        "ar (the baseline, its own cell p50 0.100 s); next ngram x0.90 [0.88, 0.92] slower vs ar "
        "(p50 0.094 s; its rounds' p50 0.094 s, its interleaved ar rounds' p50 0.085 s)"
    )


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
        "draft x1.20 [1.20, 1.20] faster vs ar (61.2 tok/s; its interleaved ar rounds 51.0 tok/s); "
        "next ar (the baseline, its own cell 142.0 tok/s); "
        "next ngram-d2 x0.96 [0.96, 0.96] slower vs ar (134.4 tok/s; its interleaved ar rounds 140.0 tok/s)"
    )
    assert INTERLEAVED_NOTE in best_methods(doc)  # why ar has two tok/s


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


def _forced(family: str, forced: float, speedup: float, ci: list | None, **extra: object) -> dict:
    e = {
        "accept_forced": forced,
        "forced_family": family,
        "accept_length": forced,
        "speedup_vs_ar": speedup,
        "speedup_vs_ar_ci95": ci,
        "speedup_verdict": extra.pop("verdict", "not separated"),
        **extra,
    }
    params = {"method": f"{family}-a{forced:g}", "tp": 1, "workload": "throughput", "concurrency": 4}
    return {"param": f"{family}-a{forced:g}-c4", "params": params, "extra_info": e}


def _real(method: str, accept: float) -> dict:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 4}
    return {"param": f"{method}-c4", "params": params, "extra_info": {"accept_length": accept}}


def test_a_falling_curve_has_no_break_even_and_no_verdict() -> None:
    """x1.20, x0.80, x0.60 at 1, 2, 3: the speedup falls through 1; not "pays at every forced
    length", and a real drafter of the family gets no gain/no-gain verdict."""
    from pytest_specbench.report import breakeven

    assert breakeven.crossing([(1, 1.2), (2, 0.8), (3, 0.6)]) == ("mixed", None)
    assert breakeven.crossing([(1, 0.8), (2, 1.1), (3, 0.9), (4, 1.2)]) == ("mixed", None)
    doc = {
        "benchmarks": [
            _forced("draft", 1, 1.20, [1.15, 1.25]),
            _forced("draft", 2, 0.80, [0.75, 0.85]),
            _forced("draft", 3, 0.60, [0.55, 0.65]),
            _real("draft", 2.5),
        ]
    }
    lines = breakeven.lines(doc)
    assert lines[0].startswith("draft throughput tp1 c4: no single break-even: the speedup falls through 1")
    assert "pays at every forced length" not in "\n".join(lines)
    assert lines[1].endswith(
        "for draft here: no verdict: the speedup does not rise through 1 once along the forced lengths"
    )


def test_the_interval_holds_every_length_the_bounds_do_not_rule_out() -> None:
    """Upper bounds 1.05, 0.98, 1.30, 1.45 at 1-4: the first already reaches 1, so the interval is
    open below the forced range (not [2.06, ...], the first upward crossing of the upper bounds);
    lower bounds 0.70, 0.60, 0.90, 0.95 never reach 1: open above. The point: 0.9, 0.8, 1.1, 1.2
    rises through 1 once, at 2 + 0.2 / 0.3. An ngram cell of the same shape is read against its own
    family's curve, never the draft family's; draft at 2.0 lies inside [< 1, > 4]."""
    from pytest_specbench.report import breakeven

    doc = {
        "benchmarks": [
            _forced("draft", 1, 0.90, [0.70, 1.05]),
            _forced("draft", 2, 0.80, [0.60, 0.98]),
            _forced("draft", 3, 1.10, [0.90, 1.30]),
            _forced("draft", 4, 1.20, [0.95, 1.45]),
            _real("draft", 2.0),
            _real("ngram", 5.0),  # no ngram family at this shape: no line
        ]
    }
    assert breakeven.lines(doc) == [
        "draft throughput tp1 c4: break-even accept length 2.67 [< 1, > 4]; a1 x0.90 (measured 1.000), "
        "a2 x0.80 (measured 2.000), a3 x1.10 (measured 3.000), a4 x1.20 (measured 4.000)",
        "draft throughput tp1 c4: measured accept 2.00, break-even 2.67 for draft here: "
        "at break-even (within its interval)",
    ]


def test_no_verdict_from_disturbed_points_or_points_without_an_interval() -> None:
    """The same curve twice: every forced point disturbed, then one round each (no interval): a
    measured 2.70 against a break-even of 2.67 is no "gain expected" either way."""
    from pytest_specbench.report import breakeven

    pts = [(1, 0.5), (2, 0.8), (3, 1.1), (4, 1.3)]
    disturbed = [
        _forced("draft", x, y, [y - 0.05, y + 0.05], verdict="no verdict: the cell was disturbed (x)")
        for x, y in pts
    ]
    one_round = [_forced("draft", x, y, None, verdict="one pair: no interval") for x, y in pts]
    for forced, why in (
        (
            disturbed,
            "4 forced points without a verdict (disturbed, saturated or inside its family's drift)",
        ),
        (one_round, "forced point(s) without an interval (one round)"),
    ):
        lines = breakeven.lines({"benchmarks": [*forced, _real("draft", 2.70)]})
        head = "draft throughput tp1 c4: measured accept 2.70, break-even 2.67 for draft here"
        assert lines[-1] == f"{head}: no verdict: {why}"


def test_break_even_interpolates_over_unevenly_spaced_lengths() -> None:
    """Forced 1, 2, 6 (speedups 0.5, 0.8, 1.6): the crossing lies between 2 and 6, at
    2 + (1 - 0.8) / (1.6 - 0.8) x 4 = 3.0 (2.25 if the x spacing were dropped); upper bounds 0.6,
    0.9, 1.9 reach 1 at 2 + 0.1 / 1.0 x 4 = 2.4, lower bounds 0.4, 0.7, 1.3 at 2 + 0.3 / 0.6 x 4 =
    4.0; a drafter measuring 4.5 is above the interval."""
    from pytest_specbench.report import breakeven

    doc = {
        "benchmarks": [
            _forced("draft", 1, 0.5, [0.4, 0.6]),
            _forced("draft", 2, 0.8, [0.7, 0.9]),
            _forced("draft", 6, 1.6, [1.3, 1.9]),
            _real("draft", 4.5),
        ]
    }
    (pts,) = breakeven.curves(doc).values()
    be = breakeven.break_even(pts)
    assert (be["where"], round(be["at"], 6), round(be["lo"], 6), round(be["hi"], 6)) == ("at", 3.0, 2.4, 4.0)
    assert breakeven.lines(doc)[-1].endswith("break-even 3.00 for draft here: gain expected")


def test_the_html_report_escapes_hostile_strings_without_a_browser() -> None:
    """A method, a host, a matrix path and a failure reason carrying markup: none reaches the page
    as markup (the page's one <script> is its own)."""
    from pytest_specbench.report import summary
    from pytest_specbench.report.html import render

    evil = "<script>alert(1)</script>"
    b = _closed("ar", 100.0, None, speedup_vs_ar=1.0, speedup_verdict="baseline")
    b2 = _closed(f"x{evil}", 120.0, None)
    b2["param"] = f"x{evil}-c1"
    b2["extra_info"].update(speedup_vs_ar=1.2, speedup_vs_ar_ci95=[1.1, 1.3], speedup_verdict="faster")
    doc = {
        "benchmarks": [b, b2],
        "machine_info": {"node": f"host{evil}"},
        "specbench": {
            "matrix": f"m{evil}.yaml",
            "failed_cells": [{"cell": f"c{evil}", "phase": "call", "error": f"boom {evil}"}],
        },
    }
    page = render(doc, summary.markdown(doc), [])
    assert page.count("<script") == 1 and "alert(1)</script>" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4  # title, host, matrix, cells


def test_the_tuning_view_leads_with_the_interleaved_speedup_it_ranks_by() -> None:
    """Settings ranked by their speedup over interleaved ar rounds: d8 (61.2 over 51.0: x1.20) before
    d2 (134.4 over 140.0: x0.96) although d2's own tok/s is higher; each leads with its x."""
    from pytest_specbench.report.tuning import tuning

    d8 = _closed("ngram-d8", 61.2, 51.0, sweep="ngram", setting={"num_draft_tokens": 8})
    d2 = _closed("ngram-d2", 134.4, 140.0, sweep="ngram", setting={"num_draft_tokens": 2})
    (line,) = tuning({"benchmarks": [d2, d8]})
    assert line.startswith(
        "throughput tp1 c1: ngram: best num_draft_tokens=8 x1.20 [1.20, 1.20] faster (61.2 tok/s; its "
        "interleaved ar rounds 51.0 tok/s); runner-up num_draft_tokens=2 x0.96 [0.96, 0.96] slower (134.4 "
        "tok/s; its interleaved ar rounds 140.0 tok/s); best/runner-up x1.25 [1.25, 1.25]: separated"
    )


def _baseline(method: str, c: int) -> dict:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": c}
    return {"param": f"{method}-c{c}", "params": params, "extra_info": {"speedup_verdict": "baseline"}}


def _dropped(family: str, forced: float, c: int, race: dict) -> dict:
    params = {"method": f"{family}-a{forced:g}", "tp": 1, "workload": "throughput", "concurrency": c}
    e: dict = {"race": race, "stop_reason": "dropped"}
    if not race.get("skipped"):
        e.update(accept_forced=forced, forced_family=family)
    return {
        "cell_id": f"{family}-a{forced:g}-c{c}",
        "params": params,
        "extra_info": e,
        "metrics": {"accept_length": forced} if not race.get("skipped") else None,
    }


def test_a_raced_run_never_says_every_forced_length_pays_where_some_were_not_measured() -> None:
    """Raced: a1 and a2 lost to AR's own c1 cell (x0.30 [0.25, 0.35], x0.60 [0.50, 0.70]) and so
    were not run at c4; a4 x1.02 [0.96, 1.08] at c1 and x1.30 [1.20, 1.40] at c4. At c1 the two
    losses are points of the curve (below 1, with the intervals they lost by): the speedup rises
    through 1 between 2 and 4 at 2 + 0.4 / 0.42 x 2 = 3.90, the upper bounds reach 1 at
    2 + 0.30 / 0.38 x 2 = 3.58, the lower bounds never do. At c4 only a4 was measured: it pays,
    but "pays at every forced length" would be a claim about 1 and 2, never measured there; a
    drafter measuring 4.5 is still a gain (4 pays), one at 3.0 gets no verdict."""
    from pytest_specbench.report import breakeven

    def c1(x: float, y: float, ci: list) -> dict:
        b = _forced("draft", x, y, ci)
        b["params"]["concurrency"] = 1
        return b

    lost = {"status": "dropped", "lost_to": "ar-c1", "shape": "tp1-c1"}
    doc = {
        "benchmarks": [
            _baseline("ar", 1),
            _baseline("ar", 4),
            c1(4, 1.02, [0.96, 1.08]),
            _forced("draft", 4, 1.30, [1.20, 1.40]),
            _real("draft", 4.5),
        ],
        "specbench": {
            "race": {
                "dropped_cells": [
                    _dropped("draft", 1, 1, {**lost, "ratio": 0.30, "lo": 0.25, "hi": 0.35}),
                    _dropped("draft", 1, 4, {**lost, "ratio": 0.30, "lo": 0.25, "hi": 0.35, "skipped": True}),
                    _dropped("draft", 2, 1, {**lost, "ratio": 0.60, "lo": 0.50, "hi": 0.70}),
                    _dropped("draft", 2, 4, {**lost, "ratio": 0.60, "lo": 0.50, "hi": 0.70, "skipped": True}),
                ]
            }
        },
    }
    lines = breakeven.lines(doc)
    assert lines[0] == (
        "draft throughput tp1 c1: break-even accept length 3.90 [3.58, > 4]; "
        "a1 x0.30 (measured 1.000) (out of the race here), a2 x0.60 (measured 2.000) (out of the race here), "
        "a4 x1.02 (measured 4.000)"
    )
    assert lines[1] == (
        "draft throughput tp1 c4: pays at every forced length measured here: break-even below the range "
        "measured (<= 4) (forced lengths 1, 2 out of the race, not measured here); "
        "a1 out of the race at shape tp1-c1, not run here, a2 out of the race at shape tp1-c1, not run here, "
        "a4 x1.30 (measured 4.000)"
    )
    assert lines[2].endswith("for draft here: gain expected (pays at every forced length measured)")
    be = breakeven.break_even(
        breakeven.curves(doc)[("draft", (("concurrency", "4"), ("tp", "1"), ("workload", "throughput")))]
    )
    assert be["missing"] == [1.0, 2.0] and be["forced_range"] == [4.0, 4.0]
    assert breakeven.verdict(3.0, be).startswith("no verdict: the break-even lies below")
    # the plots draw measured points only
    assert [(r["series"], r["x"]) for r in breakeven.plot_rows(doc)] == [
        ("c1", 1.0),
        ("c1", 2.0),
        ("c1", 4.0),
        ("c4", 4.0),
    ]
