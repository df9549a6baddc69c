"""Temperature > 0: speculative sampling keeps the target's distribution; cells get a t axis."""

from __future__ import annotations

import pytest
from test_hf_engine import DOC as HF_DOC

from pytest_specbench.engines.base import Request, run_requests
from pytest_specbench.engines.hf import HFEngine, speculative_sample
from pytest_specbench.inputs import prompts
from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.schema import MatrixError, parse

torch = pytest.importorskip("torch")

P = [0.10, 0.20, 0.30, 0.25, 0.15]
Q = [0.40, 0.05, 0.05, 0.20, 0.30]
TRIALS = 20000


def _first_token_freqs(q: list[float] | None, seed: int) -> tuple[list[float], float]:
    """Emitted first-token frequencies over TRIALS verify steps of one draft token, and the
    fraction of steps that kept the draft (seeded: the same numbers on every machine)."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor([P, P])
    q_row = torch.tensor(q) if q is not None else None
    counts, kept = [0] * len(P), 0
    for _ in range(TRIALS):
        x = int(torch.multinomial(q_row, 1, generator=gen)) if q_row is not None else 2
        n_acc, nxt = speculative_sample(p, [x], [q_row] if q_row is not None else None, gen)
        first = x if n_acc == 1 else nxt
        counts[first] += 1
        kept += n_acc
    return [c / TRIALS for c in counts], kept / TRIALS


@pytest.mark.parametrize("q", [Q, None], ids=["draft-model", "ngram-one-hot"])
def test_speculative_sampling_emits_the_target_distribution(q: list[float] | None) -> None:
    freqs, kept = _first_token_freqs(q, seed=5)
    assert max(abs(f - p) for f, p in zip(freqs, P, strict=True)) < 0.015, freqs
    # the draft is kept with probability sum_x min(p(x), q(x)); one-hot at token 2: p(2)
    expected = sum(min(a, b) for a, b in zip(P, Q, strict=True)) if q is not None else P[2]
    assert abs(kept - expected) < 0.015, (kept, expected)


def test_equal_draft_and_target_keep_every_draft() -> None:
    gen = torch.Generator().manual_seed(1)
    p = torch.tensor([P, P, P])
    assert speculative_sample(p, [3, 0], [p[0], p[1]], gen)[0] == 2


# the embedded model's methods of test_hf_engine, with a greedy and a temperature-1 cell each
DOC = {
    "models": HF_DOC["models"],
    "methods": {k: HF_DOC["methods"][k] for k in ("ar", "ngram", "draft-oracle")},
    "workloads": {"throughput": {"concurrency": [1], "temperature": [0, 1.0]}},
}


def test_temperature_is_an_axis_and_greedy_ids_stay() -> None:
    m = parse(DOC, "t.yaml")
    ids = [c.id for c in m.cells()]
    assert "ar-tp1-c1-out64" in ids and "ar-tp1-c1-out64-t1" in ids
    by = {c.id: c for c in m.cells()}
    assert by["ngram-tp1-c1-out64-t1"].params()["temperature"] == 1.0
    assert "temperature" not in by["ngram-tp1-c1-out64"].params()
    assert by["ngram-tp1-c1-out64"].temperature == 0.0
    # a greedy cell is defined the same way with or without the temperature key
    plain = parse({**DOC, "workloads": {"throughput": {"concurrency": [1]}}}, "t.yaml")
    assert plain.cells()[0].fingerprint() == by[plain.cells()[0].id].fingerprint()


@pytest.mark.parametrize(
    "value, message",
    [
        (
            -0.5,
            "workloads.throughput.temperature[0]: expected a sampling temperature in [0, 10] "
            "(0 = greedy); got -0.5",
        ),
        ([0.7, 0.7], "workloads.throughput.temperature: lists a temperature twice: [0.7, 0.7]"),
        ("hot", "workloads.throughput.temperature[0]: expected a sampling temperature in [0, 10]"),
    ],
)
def test_bad_temperature_names_the_key(value: object, message: str) -> None:
    with pytest.raises(
        MatrixError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        parse({**DOC, "workloads": {"throughput": {"temperature": value}}}, "t.yaml")


@pytest.mark.slow
def test_sampled_decoding_on_the_embedded_model() -> None:
    """At temperature 1: same seed, same tokens; another seed, other tokens (and not the greedy
    ones); draft = target still keeps every draft token (p == q up to float rounding)."""
    m = parse(DOC, "t.yaml")
    out = {}
    for name in ("ar", "draft-oracle"):
        eng = HFEngine(EngineGroup(m.method(name), 1))
        ps = prompts.make_prompts(eng.tokenizer(), 40, 2, seed=7)
        reqs = [Request(p, 32, temperature=1.0, seed=11 + i) for i, p in enumerate(ps)]
        again = [Request(p, 32, temperature=1.0, seed=11 + i) for i, p in enumerate(ps)]
        other = [Request(p, 32, temperature=1.0, seed=99 + i) for i, p in enumerate(ps)]
        greedy = [Request(p, 32) for p in ps]
        out[name] = [run_requests(eng, r, concurrency=1) for r in (reqs, again, other, greedy)]
        eng.close()
    for name, (a, b, c, g) in out.items():
        assert [r.output_ids for r in a] == [r.output_ids for r in b], name
        assert [r.output_ids for r in a] != [r.output_ids for r in c], name
        assert [r.output_ids for r in a] != [r.output_ids for r in g], name
        assert all(r.output_tokens == 32 for r in a + c)
    for r in out["draft-oracle"][0] + out["draft-oracle"][2]:
        # K + 1 = 4: 1 prefill token + 7 steps of 3 drafts and a bonus + 1 capped step of 2 + 1
        assert (r.output_tokens, r.verify_steps) == (32, 8)


def test_requests_carry_the_cells_temperature_and_a_seed_shared_across_methods() -> None:
    from pytest_specbench.workloads.kinds import _request

    by = {c.id: c for c in parse(DOC, "t.yaml").cells()}
    a = _request(by["ar-tp1-c1-out64-t1"], [1, 2], "round1/req0", False)
    b = _request(by["ngram-tp1-c1-out64-t1"], [1, 2], "round1/req0", False)
    g = _request(by["ngram-tp1-c1-out64"], [1, 2], "round1/req0", False)
    assert (a.temperature, b.temperature, g.temperature) == (1.0, 1.0, 0.0)
    assert a.seed == b.seed != _request(by["ar-tp1-c1-out64-t1"], [1, 2], "round1/req1", False).seed
