"""Forced acceptance: ids and refusals, the hf engine's exact forced length, the cell that does
not honour it, and the break-even interpolation against hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from pytest_specbench.matrix.checks import MatrixError
from pytest_specbench.matrix.schema import parse
from pytest_specbench.report import breakeven

MODELS = {"m": "embedded:tiny", "d": "embedded:tiny-draft"}
DRAFT3 = {"algorithm": "draft", "draft_model": "d", "num_draft_tokens": 3}


def _doc(spec: dict, backend: str = "hf", **method: object) -> dict:
    return {
        "models": MODELS,
        "methods": {
            "ar": {"backend": backend, "model": "m", **method},
            "draft": {"backend": backend, "model": "m", "speculative": spec, **method},
        },
        "workloads": {"throughput": {"concurrency": [1, 4], "output_tokens": [32]}},
    }


def test_forced_lengths_are_one_group_each_with_an_a_label() -> None:
    spec = {
        "algorithm": "draft",
        "draft_model": "d",
        "num_draft_tokens": 3,
        "simulate_accept_length": [1, 2.5, 4],
    }
    m = parse(_doc(spec), "m.yaml")
    assert [x.name for x in m.methods] == ["ar", "draft-a1", "draft-a2.5", "draft-a4"]
    assert {x.forced_family for x in m.methods[1:]} == {"draft"}
    assert [c.id for c in m.cells() if c.method.name == "draft-a2.5"] == [
        "draft-a2.5-tp1-c1-out32",
        "draft-a2.5-tp1-c4-out32",
    ]
    one = parse(_doc({**spec, "simulate_accept_length": 3}), "m.yaml")  # one value: still labelled
    assert [x.name for x in one.methods] == ["ar", "draft-a3"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"algorithm": "ngram", "num_draft_tokens": 2, "simulate_accept_length": [4]},
            "4 tokens per verify step cannot be forced: this setting commits at most 3",
        ),
        (
            {"algorithm": "draft", "draft_model": "d", "num_draft_tokens": 3, "simulate_accept_length": [5]},
            "5 tokens per verify step cannot be forced: this setting commits at most 4",
        ),
        (
            {"algorithm": "draft", "draft_model": "d", "simulate_accept_length": [0.5]},
            "0.5 is below 1",
        ),
        (
            {"algorithm": "draft", "draft_model": "d", "simulate_accept_length": 0},
            "speculative.simulate_accept_length: 0 is below 1",
        ),
        (
            {"algorithm": "draft", "draft_model": "d", "simulate_accept_length": [float("nan")]},
            "expected an accept length > 0 (a finite number)",
        ),
        (
            {"algorithm": "draft", "draft_model": "d", "simulate_accept_method": "multinomial"},
            "simulate_accept_method: only with simulate_accept_length",
        ),
    ],
)
def test_forced_lengths_that_cannot_be_measured_are_refused(spec: dict, message: str) -> None:
    with pytest.raises(MatrixError, match="m.yaml: methods.draft.speculative") as e:
        parse(_doc(spec), "m.yaml")
    assert message in str(e.value)


def test_on_sglang_a_step_commits_what_its_num_draft_tokens_allows() -> None:
    """SGLang's num_draft_tokens counts the verified token: NGRAM with 4 commits at most 4 a step
    (hf: 4 drafts + 1); a chain of 3 steps at most 4; a 2-node tree at most 2."""
    for spec, most in (
        ({"algorithm": "ngram", "num_draft_tokens": 4, "simulate_accept_length": [5]}, 4),
        ({"algorithm": "draft", "draft_model": "d", "num_draft_tokens": 3, "simulate_accept_length": [4]}, 3),
        (
            {
                "algorithm": "eagle3",
                "draft_model": "d",
                "num_steps": 3,
                "topk": 4,
                "num_draft_tokens": 2,
                "simulate_accept_length": [3],
            },
            2,
        ),
    ):
        with pytest.raises(MatrixError, match=f"this setting commits at most {most} "):
            parse(_doc(spec, backend="sglang"), "m.yaml")
    ok = {"algorithm": "ngram", "num_draft_tokens": 4, "simulate_accept_length": [4]}
    assert parse(_doc(ok, backend="sglang"), "m.yaml").methods[1].name == "draft-a4"


def test_an_endpoint_cannot_be_forced() -> None:
    from pytest_specbench.engines import get_backend

    spec = {"algorithm": "eagle3", "draft_model": "d", "num_steps": 3, "simulate_accept_length": [2]}
    m = parse(_doc(spec, backend="http", url="http://127.0.0.1:1"), "m.yaml")
    why = get_backend("http").refusal(m.methods[1], sends=False)
    assert why is not None and "cannot force an accept length" in why and "sglang-server" in why
    assert get_backend("sglang").refusal(m.methods[1], sends=False) is None


def test_sglang_backends_get_the_variable_once_per_engine() -> None:
    from pytest_specbench.engines import forced_env

    spec = {
        "algorithm": "eagle3",
        "draft_model": "d",
        "num_steps": 3,
        "simulate_accept_length": [2, 3.5],
        "simulate_accept_method": "match-expected",
    }
    m = parse(_doc(spec, backend="sglang"), "m.yaml")
    assert forced_env(m.methods[2]) == {
        "SGLANG_SIMULATE_ACC_LEN": "3.5",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
    }
    assert forced_env(m.methods[0]) == {}  # ar


@pytest.mark.parametrize(("algorithm", "forced"), [("draft", f) for f in (1, 2, 3, 4, 2.5)] + [("ngram", 3)])
def test_the_hf_engine_commits_exactly_the_forced_length(algorithm: str, forced: float) -> None:
    """N = 32 output tokens, the first from prefill: ceil(31 / L) verify steps, so the accept
    length is 32 / that (L = 3: 32 / 11 = 2.909; L = 4: 32 / 8 = 4.0), and the metrics check says
    exact. A fractional L commits floor and ceil in turn (error diffusion); an n-gram without a
    match still proposes a full draft when forced."""
    from pytest_specbench.engines.base import Request, run_requests
    from pytest_specbench.engines.hf import HFEngine
    from pytest_specbench.inputs import prompts
    from pytest_specbench.matrix.cells import EngineGroup
    from pytest_specbench.stats import metrics

    spec = {
        "algorithm": "draft",
        "draft_model": "d",
        "num_draft_tokens": 3,
        "simulate_accept_length": [forced],
    }
    method = parse(_doc(spec), "m.yaml").methods[1]
    eng = HFEngine(EngineGroup(method, 1))
    try:
        ps = prompts.make_prompts(eng.tokenizer(), 24, 2, seed=3)
        recs = run_requests(eng, [Request(tuple(p), 32) for p in ps], concurrency=2)
    finally:
        eng.close()
    steps = math.ceil(31 / forced)
    assert [r.verify_steps for r in recs] == [steps, steps]
    accept = metrics.accept_length(recs)
    assert accept == pytest.approx(32 / steps)
    check = metrics.forced_check(method, accept, 32)
    assert check["accept_forced"] == forced and check["accept_forced_exact"] is True
    assert metrics.forced_check(method, accept - 0.2, 32)["accept_forced_exact"] is False


def _cell(
    method: str, family: str, forced: float | None, speedup: float, ci: list, accept: float | None
) -> dict:
    e = {"speedup_vs_ar": speedup, "speedup_vs_ar_ci95": ci, "accept_length": accept}
    if forced is not None:
        e.update(accept_forced=forced, forced_family=family)
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": 8, "output_tokens": 256}
    return {"param": f"{method}-c8", "params": params, "extra_info": e}


def test_break_even_is_interpolated_with_its_interval() -> None:
    """Points (1, 0.50), (2, 0.83), (3, 1.31), (4, 1.82): the speedup crosses 1 between 2 and 3
    at 2 + (1 - 0.83) / (1.31 - 0.83) = 2.354. Upper bounds (0.55, 0.90, 1.40, 1.95) cross at
    2 + 0.10 / 0.50 = 2.2; lower bounds (0.45, 0.76, 1.22, 1.70) at 2 + 0.24 / 0.46 = 2.522."""
    doc = {
        "benchmarks": [
            _cell("eagle3-a1", "eagle3", 1, 0.50, [0.45, 0.55], 1.004),
            _cell("eagle3-a2", "eagle3", 2, 0.83, [0.76, 0.90], 2.0),
            _cell("eagle3-a3", "eagle3", 3, 1.31, [1.22, 1.40], 3.012),
            _cell("eagle3-a4", "eagle3", 4, 1.82, [1.70, 1.95], 4.0),
            _cell("eagle3", "", None, 0.98, [0.9, 1.05], 2.1),  # a real drafter of the same shape
        ]
    }
    ((key, pts),) = breakeven.curves(doc).items()
    assert key[0] == "eagle3" and [p["accept_forced"] for p in pts] == [1, 2, 3, 4]
    be = breakeven.break_even(pts)
    assert be["where"] == "at"
    assert be["at"] == pytest.approx(2 + 0.17 / 0.48)
    assert be["lo"] == pytest.approx(2.2) and be["hi"] == pytest.approx(2 + 0.24 / 0.46)
    from pytest_specbench.report.plots_breakeven import map_rows

    (row,) = map_rows(doc)
    assert (row["concurrency"], row["text"], row["where"]) == (8, "2.35", "at")
    lines = breakeven.lines(doc)
    assert lines[0].startswith("eagle3 throughput tp1 c8 out256: break-even accept length 2.35 [2.20, 2.52]")
    assert lines[1] == (
        "eagle3 throughput tp1 c8 out256: measured accept 2.10, break-even 2.35 for eagle3 here: "
        "no gain expected"
    )


def test_break_even_outside_the_forced_range_says_so() -> None:
    assert breakeven.crossing([(1, 1.2), (2, 1.5)]) == ("below", None)
    assert breakeven.crossing([(1, 0.4), (2, 0.9)]) == ("above", None)
    assert breakeven.crossing([]) == ("none", None)
    above = breakeven.break_even([{"accept_forced": 1.0, "speedup": 0.4, "lo": 0.3, "hi": 0.5}])
    assert breakeven.describe(above) == "pays at no forced length: break-even above the forced range (> 1)"
    assert breakeven.verdict(3.0, above) == (
        "no verdict: the break-even lies above the forced range, and so may this accept length"
    )
    # lower bounds that never reach 1 (0.33, 0.58, 0.79, 0.94 at 1-4): the interval is open above
    # the forced range, not closed at its end, and a drafter measuring more than 4 is not a gain
    open_hi = breakeven.break_even(
        [
            {"accept_forced": 1.0, "speedup": 0.43, "lo": 0.33, "hi": 0.56},
            {"accept_forced": 2.0, "speedup": 0.76, "lo": 0.58, "hi": 1.00},
            {"accept_forced": 3.0, "speedup": 1.02, "lo": 0.79, "hi": 1.32},
            {"accept_forced": 4.0, "speedup": 1.30, "lo": 0.94, "hi": 1.79},
        ]
    )
    assert open_hi["hi"] is None and open_hi["hi_open"] is True and open_hi["lo"] == pytest.approx(2.0)
    assert breakeven.describe(open_hi).startswith("break-even accept length 2.92 [2.00, > 4]")
    assert breakeven.verdict(4.5, open_hi) == "at break-even (within its interval)"
