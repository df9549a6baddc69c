"""The plan's speculative structure, by hand: the accept length it assumes (expected, measured,
forced, the labelled 1-token upper bound), verify cost by tree / block width, block drafters on the
target's embedding and LM head, the state pool's draft-token states, the all-reduce by link."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.engines.sglang import engine_kwargs
from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.checks import MatrixError
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import eta, interconnect, plan, structure
from pytest_specbench.planning.eta import ModelCosts
from pytest_specbench.planning.gpu_specs import spec_for

ROOT = Path(__file__).resolve().parents[1]
Q27 = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-hybrid")
DFLASH = str(ROOT / "benches" / "examples" / "configs" / "qwen3.5-27b-dflash")
RTX = spec_for("RTX PRO 6000")
assert RTX is not None
RTX_BUDGET = plan.GPUBudget(RTX.memory_bytes, RTX.bandwidth, "RTX PRO 6000", "datasheet")


def _doc(methods: dict[str, Any], tp: list[int] | None = None) -> dict[str, Any]:
    return {
        "models": {"t": {"path": Q27, "load_format": "dummy"}, "d": {"path": DFLASH, "load_format": "dummy"}},
        "methods": methods,
        "tp": tp or [1],
        "workloads": {"long_context": {"context_tokens": [3000], "concurrency": [1], "output_tokens": [256]}},
    }


def _groups(methods: dict[str, Any], tp: list[int] | None = None, **kw: Any) -> dict[str, plan.GroupPlan]:
    m = parse(_doc(methods, tp), "m.yaml")
    return {g.id: plan.plan_group(g, kw.pop("gpu", RTX_BUDGET), **kw) for g in m.groups()}


AR = {"backend": "sglang", "model": "t"}


def _dflash(**spec: Any) -> dict[str, Any]:
    return {
        "backend": "sglang",
        "model": "t",
        "speculative": {"algorithm": "dflash", "draft_model": "d", **spec},
    }


# ------------------------------------------------------------------------------ 1. acceptance


def test_expect_accept_length_is_planned_and_never_sent_to_the_engine() -> None:
    m = parse(_doc({"dflash": _dflash(block_size=16, expect_accept_length=3.5)}), "m.yaml")
    g = m.groups()[0]
    assert "expect" not in json.dumps(engine_kwargs(g))  # planning only
    gp = plan.plan_group(g, RTX_BUDGET)
    assert (gp.accept_length, gp.accept_from) == (3.5, "expected")
    assert "ETA at 3.5 token(s) per verify step (expected: speculative.expect_accept_length)" in gp.notes
    # the cell's round: its requests one at a time, each a prefill then 255 / 3.5 verify steps
    cell = m.cells()[0]
    assert gp.costs is not None
    est = eta.gpu_round(cell, gp.costs, RTX.bandwidth, RTX.bf16_flops, 1)
    step = eta.verify_step_s(gp.costs, 1, 3000 + 128, (RTX.bandwidth, RTX.bf16_flops))
    assert est.waves == cell.workload.requests_per_round(1)
    assert est.round_s == pytest.approx(est.waves * (est.prefill_s + 255 / 3.5 * step))
    # without it: 1 token per step, the labelled upper bound, 3.5x the decode part
    up = plan.plan_group(parse(_doc({"dflash": _dflash(block_size=16)}), "m.yaml").groups()[0], RTX_BUDGET)
    assert (up.accept_length, up.accept_from) == (1.0, "upper bound")
    assert any("an upper bound: 1 token per verify step" in n for n in up.notes)


def test_a_previous_runs_measured_accept_length_is_the_methods_median(tmp_path: Path) -> None:
    def bench(method: str, accept: float, forced: float | None = None) -> dict[str, Any]:
        ex: dict[str, Any] = {"accept_length": accept}
        if forced is not None:
            ex["accept_forced_expected"] = forced
        return {"param": f"{method}-x", "params": {"method": method}, "extra_info": ex}

    doc = {
        "benchmarks": [
            bench("dflash", 3.0),
            bench("dflash", 5.0),
            bench("dflash", 4.0),
            bench("dflash", 7.0, forced=7.0),  # a forced cell measures the forcing: left out
            bench("other", 9.0),
        ]
    }
    gp = _groups({"dflash": _dflash(block_size=16)}, previous=doc, source="run.json")["dflash-tp1"]
    assert (gp.accept_length, gp.accept_from) == (4.0, "measured")
    assert (
        "ETA at 4 token(s) per verify step (measured: median of 3 cell(s) of dflash in run.json)" in gp.notes
    )
    # an expectation in the matrix wins over the previous run; a forced length is what runs
    exp = _groups({"dflash": _dflash(block_size=16, expect_accept_length=6)}, previous=doc)["dflash-tp1"]
    assert (exp.accept_length, exp.accept_from) == (6.0, "expected")
    forced = _groups({"dflash": _dflash(block_size=16, simulate_accept_length=2)}, previous=doc)
    assert (forced["dflash-a2-tp1"].accept_length, forced["dflash-a2-tp1"].accept_from) == (2.0, "forced")


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"expect_accept_length": 0.5}, "speculative.expect_accept_length: 0.5 is below 1"),
        ({"expect_accept_length": 17, "block_size": 16}, "17 tokens per verify step cannot be expected"),
        ({"expect_accept_length": 3, "simulate_accept_length": 3}, "not with simulate_accept_length"),
        ({"expect_accept_length": "many"}, "expected an accept length > 0"),
    ],
)
def test_a_bad_expected_accept_length_is_refused_with_the_key(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(MatrixError, match="methods.dflash.speculative") as e:
        parse(_doc({"dflash": _dflash(**spec)}), "m.yaml")
    assert message in str(e.value)


# ------------------------------------------------------------------------------ 2. verify structure

# a model with round numbers: 10 GB of weights read a step, 10 GFLOP a token, 100 kB of KV a token
TOY = ModelCosts(
    step_read_bytes=10**10,
    weight_bytes=10**10,
    matmul_flops_per_token=1e10,
    attn_flops_per_token2=1e5,
    kv_bytes_per_token=10**5,
    state_bytes_per_request=0,
    layers=10,
    linear_layers=0,
    head_dim=128,
    hidden=4096,
    dtype_bytes=2,
)
GPU = (1e12, 100e12)  # 1 TB/s, 100 TFLOP/s


def _tree_step_by_hand(batch: int, tokens: int, ctx: int = 1000) -> float:
    """A verify step of ``tokens`` per request over ``ctx`` tokens of context, by the formula:
    1 ms overhead + max(weights at 82% of 1 TB/s, matmuls at 70% of 100 TFLOP/s) + max(the KV
    read through the extend kernel (1.33% of the bandwidth per request, at most 32%), every new
    token's attention at 14% of peak) + the new tokens' KV written at 82%."""
    weights = 1e10 / 0.82e12
    matmuls = batch * tokens * 1e10 / 70e12
    kv_read = batch * ctx * 1e5 / (1e12 * min(0.32, batch * 0.0133))
    attention = 2 * 1e5 * tokens * ctx * batch / 14e12
    kv_write = batch * tokens * 1e5 / 0.82e12
    return 1e-3 + max(weights, matmuls) + max(kv_read, attention) + kv_write


@pytest.mark.parametrize(
    "batch, tokens, ms",
    [
        (1, 9, 20.715),  # a DDTREE budget of 8: 9 nodes; weights 12.195 ms + KV read 7.519 ms
        (1, 257, 45.255),  # budget 256: 257 nodes, the matmuls (36.71 ms) outgrow the weight read
        (32, 9, 52.177),  # 41.14 ms of matmuls, 10 ms of KV (32% of the bandwidth)
        (32, 257, 1294.35),  # 1.175 s of matmuls, 117.5 ms of attention FLOPs, 1.0 ms of KV writes
    ],
)
def test_a_tree_verify_costs_its_nodes(batch: int, tokens: int, ms: float) -> None:
    by_hand = _tree_step_by_hand(batch, tokens)
    assert by_hand * 1e3 == pytest.approx(ms, abs=0.01)
    assert eta.decode_step_s(TOY, batch, 1000, GPU, 1, tokens=tokens, extend=True) == pytest.approx(by_hand)


def test_ddtree_budgets_verify_budget_plus_one_nodes_and_reserve_as_many_states() -> None:
    tree = {
        "backend": "sglang",
        "model": "t",
        "speculative": {"algorithm": "ddtree", "draft_model": "d"},
        "engine_args": {"speculative_ddtree_budget": [8, 256]},
        "labels": {"speculative_ddtree_budget": "b"},
    }
    gps = _groups({"ddtree": tree, "dflash": _dflash()}, tp=[1, 4])
    b8, b256 = gps["ddtree-b8-tp4"].costs, gps["ddtree-b256-tp4"].costs
    assert b8 is not None and b256 is not None
    # one draft forward over the draft's block (16, its config.json), then 9 / 257 verified
    assert (b8.num_steps, b8.draft_tokens, b8.verify_tokens) == (1, 16, 9)
    assert (b256.num_steps, b256.draft_tokens, b256.verify_tokens) == (1, 16, 257)
    gpu = (RTX.bandwidth, RTX.bf16_flops)
    assert eta.verify_step_s(b256, 32, 3128, gpu) > 10 * eta.verify_step_s(b8, 32, 3128, gpu)
    # DFLASH without a block size: the draft's config (16), one step (SGLang forces num_steps 1)
    fl = gps["dflash-tp1"].costs
    assert fl is not None and (fl.num_steps, fl.draft_tokens, fl.verify_tokens) == (1, 16, 16)
    # TP1: 257 draft-token states of 146.8 MiB per running request do not fit: SGLang refuses
    err = gps["ddtree-b256-tp1"].error
    assert err is not None and "hold no linear-attention state slot" in err


def test_dflash_block_16_reserves_16_draft_token_states_per_running_request() -> None:
    gp = _groups({"dflash": _dflash(block_size=16)})["dflash-tp1"]
    assert gp.budget_bytes_per_gpu is not None and gp.weight_bytes_per_gpu is not None
    per = gp.state_bytes_per_request
    assert per is not None
    free = gp.budget_bytes_per_gpu - gp.weight_bytes_per_gpu
    # SGLang's joint solve (kv_cache_configurator.py:1920-1947): K slots with D = 16 intermediate
    # states for K / 3 + 1 requests inside free x 0.9 / 1.9
    budget = free * 0.9 / 1.9
    k = int((budget - per * 17) // (per * (1 + 16 / 3)))
    assert gp.max_running == min(48, k // 3)
    assert (
        f"state pool: {k + 1} slots of {per / 2**20:.1f} MiB + 16 draft-token states for {k // 3}"
        in gp.notes[2]
    )
    assert gp.state_pool_bytes_per_gpu == (k + 1) * per + per * (k // 3 + 1) * 16


def test_block_drafters_hold_no_embedding_or_lm_head_of_their_own() -> None:
    gps = _groups({"ar": AR, "dflash": _dflash(block_size=16)})
    ar, fl = gps["ar-tp1"], gps["dflash-tp1"]
    assert ar.weight_bytes_per_gpu is not None and fl.weight_bytes_per_gpu is not None
    # the 4-layer dense draft of width 5120: q 5120 x 24 x 256, o the same, K and V 2 x 5120 x 4 x 256,
    # MLP 3 x 5120 x 17408 per layer; the projection of 4 target layers' hidden states 4 x 5120 x 5120
    layer = 2 * 5120 * 24 * 256 + 2 * 5120 * 4 * 256 + 3 * 5120 * 17408
    draft = (4 * layer + 4 * 5120 * 5120) * 2
    assert draft == 2_936_012_800  # 2.73 GiB; with its own embedding and LM head it would be 7.47 GiB
    assert fl.weight_bytes_per_gpu - ar.weight_bytes_per_gpu == draft
    assert "draft: 2.73 GiB/GPU, the target's embedding and LM head shared" in " ".join(fl.notes)
    d = fl.costs.draft if fl.costs is not None else None
    assert d is not None and d.step_read_bytes == draft + 248320 * 5120 * 2  # it reads the target's LM head


# ------------------------------------------------------------------------------ 3. interconnect


def test_a_pcie_tp4_step_pays_nccls_ring_where_nvlink_pays_one_all_reduce() -> None:
    nvlink, pcie = interconnect.parse("nvlink"), interconnect.parse("pcie5x16")
    # c1 decode at TP4: 4096 x 2 bytes per all-reduce, 2 per layer, 10 layers
    n = 4096 * 2
    by_nvlink = 13e-6 + 6 / 4 * n / (450e9 * 0.8)
    by_pcie = 10e-6 + 6 * 4e-6 + 6 / 4 * n / (64e9 * 0.8)
    assert (by_nvlink * 1e6, by_pcie * 1e6) == (
        pytest.approx(13.034, abs=1e-3),
        pytest.approx(34.240, abs=1e-3),
    )
    assert interconnect.allreduce_s(nvlink, 4, n) == pytest.approx(by_nvlink)
    assert interconnect.allreduce_s(pcie, 4, n) == pytest.approx(by_pcie)
    step = {k: eta.decode_step_s(TOY, 1, 1000, GPU, 4, link=v) for k, v in (("nv", nvlink), ("pcie", pcie))}
    assert step["pcie"] - step["nv"] == pytest.approx(2 * 10 * (by_pcie - by_nvlink))
    # a c32 verify of 16 tokens moves 32 x 16 x 8 kB an all-reduce: 123 us on PCIe 5 x16, 17 us on NVLink
    big = 32 * 16 * n
    assert interconnect.allreduce_s(pcie, 4, big) - 34e-6 == pytest.approx(1.5 * big / 51.2e9)
    assert interconnect.allreduce_s(nvlink, 4, big) - 13e-6 == pytest.approx(1.5 * big / 360e9)
    assert interconnect.allreduce_s(pcie, 1, big) == 0.0
    # TP8 on PCIe: 14 ring steps
    assert interconnect.allreduce_s(pcie, 8, 0) == pytest.approx(10e-6 + 14 * 4e-6)
    assert interconnect.parse("PCIe 4.0 x8").name == "pcie4x8"
    with pytest.raises(ValueError, match="pcieGxL"):
        interconnect.parse("infiniband")


def test_the_datasheet_gives_memory_as_nvml_reports_it_and_a_link() -> None:
    assert RTX.memory_bytes == 97887 * 2**20  # 95.6 GiB, not the 89.4 GiB of "96 GB"
    assert RTX.link == "pcie5x16" and spec_for("H200").link == "nvlink4"  # type: ignore[union-attr]
    assert "NVML reports more" in spec_for("GH200").memory_source  # type: ignore[union-attr]


def test_step_shapes_of_each_algorithm() -> None:
    m = parse(
        _doc(
            {
                "ng": {"backend": "sglang", "model": "t", "speculative": {"algorithm": "ngram"}},
                "mtp": {
                    "backend": "sglang",
                    "model": "t",
                    "speculative": {"algorithm": "eagle", "num_steps": 3},
                },
                "ds": {
                    "backend": "sglang",
                    "model": "t",
                    "speculative": {"algorithm": "dspark", "draft_model": "d"},
                },
            }
        ),
        "m.yaml",
    )
    shapes = {g.method.name: structure.step_shape(g.method, {"block_size": 7}) for g in m.groups()}
    assert shapes["ng"] == structure.StepShape(0, 12, 0, 12, False, "12 draft tokens")
    assert (shapes["mtp"].draft_steps, shapes["mtp"].verify_tokens) == (3, 4)  # type: ignore[union-attr]
    ds = shapes["ds"]
    assert ds is not None and (ds.draft_steps, ds.draft_tokens, ds.verify_tokens, ds.shares_target_head) == (
        1,
        7,
        8,
        True,
    )
    assert structure.step_shape(EngineGroup(m.methods[0], 1).method) is not None
