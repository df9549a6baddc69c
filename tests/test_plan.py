"""Planner: hand-computed sizes for configs written here, skip reasons, --specbench-plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import plan, sglang_memory, shapes

GiB = 1024**3
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 40960,
}
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 8192,
}
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_size": 2048,
    "vocab_size": 151936,
    "torch_dtype": "bfloat16",
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "max_position_embeddings": 262144,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "hidden_size": 7168,
    "vocab_size": 129280,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
}


def test_qwen3_8b_dense_gqa() -> None:
    s = shapes.shape_from_config(QWEN3_8B)
    assert s.kv_bytes_per_token(1) == 2 * 36 * 8 * 128 * 2 == 147456  # K and V
    assert s.kv_bytes_per_token(4) == 36864
    assert s.kv_bytes_per_token(8) == 18432  # 1 KV head per GPU
    assert s.weight_bytes() == 8_190_427_136 * 2  # 8.19 B parameters in bf16
    assert s.tp_error(3) == "32 attention heads do not divide by TP=3"
    assert s.kv_note(8) is None
    assert "replicates" in s.kv_note(16)


def test_llama3_70b() -> None:
    s = shapes.shape_from_config(LLAMA3_70B)
    assert s.head_dim == 128  # hidden / heads when head_dim is absent
    assert s.kv_bytes_per_token(1) == 327680  # 320 KiB per token
    assert s.kv_bytes_per_token(8) == 40960
    assert s.weight_bytes() == 70_552_387_584 * 2
    assert s.weight_bytes_per_gpu(4) == 70_552_387_584 * 2 // 4  # 8 KV heads split evenly at TP4


def test_qwen3_next_hybrid_counts_only_full_attention() -> None:
    s = shapes.shape_from_config(QWEN3_NEXT)
    assert (s.full_attn_layers, s.linear_layers) == (12, 36)
    assert s.kv_bytes_per_token(1) == 2 * 12 * 2 * 256 * 2 == 24576
    assert s.kv_bytes_per_token(4) == 12288  # 2 KV heads < TP4: one replicated head per GPU
    assert "KV heads (2) < TP (4)" in s.kv_note(4)
    # Gated DeltaNet state per request: 32 x 128 x 128 fp32 + (2*16*128 + 32*128) x 3 bf16, 36 layers
    assert s.state_bytes_per_request(1) == 36 * (32 * 128 * 128 * 4 + 8192 * 3 * 2) == 77_266_944


def test_mla_is_reported_unsupported() -> None:
    with pytest.raises(shapes.Unsupported, match="MLA"):
        shapes.shape_from_config(DEEPSEEK_V3)


def _matrix(
    tmp_path: Path, config: dict, tp: list[int], ctx: list[int], conc: list[int], mem: float | None = None
):
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    method = {"backend": "sglang", "model": "m"}
    if mem:
        method["engine_args"] = {"mem_fraction_static": mem}
    doc = {
        "models": {"m": {"path": str(d), "load_format": "dummy"}},
        "methods": {"ar": method},
        "tp": tp,
        "workloads": {"long_context": {"context_tokens": ctx, "concurrency": conc, "output_tokens": [256]}},
    }
    return parse(doc, str(tmp_path / "m.yaml"))


def test_skip_reasons_name_the_numbers(tmp_path: Path) -> None:
    m = _matrix(tmp_path, LLAMA3_70B, [1, 4], [3000], [1])
    p = plan.make_plan(m.cells(), plan.GPUBudget(80 * GiB, 4.8e12))
    r = p.skip_reason(m.cells()[0])
    # SGLang's default fraction for 80 GiB at TP1: (81920 - 512 - 8192 x 1.5 - 128) MiB / 81920 MiB
    assert sglang_memory.sglang_mem_fraction(80 * GiB, 1) == round((81920 - 12928) / 81920, 3) == 0.842
    assert sglang_memory.sglang_mem_fraction(143771 * 1024**2, 1) == 0.91  # H200; 0.909 resolved on the GPU
    assert r == (
        "needs 131.4 GiB per GPU for weights at TP=1, 67.4 GiB available (80.0 GiB x "
        "mem_fraction_static 0.842)"
    )
    assert p.skip_reason(m.cells()[1]) is None  # TP4: 32.9 GiB per GPU
    assert p.groups["ar-tp4"].weight_bytes_per_gpu == 70_552_387_584 * 2 // 4
    # the 70B's max_position_embeddings is 8192: a 3k cell gets no override
    assert p.groups["ar-tp4"].context_override is False


def test_kv_capacity_fits_queues_or_skips(tmp_path: Path) -> None:
    m = _matrix(tmp_path, QWEN3_8B, [1], [30000, 100000], [1, 32], mem=0.9)
    p = plan.make_plan(m.cells(), plan.GPUBudget(24 * GiB, 1e12))
    g = p.groups["ar-tp1"]
    assert g.kv_tokens_capacity == (int(24 * GiB * 0.9) - 16_380_854_272) // 147456
    assert g.context_length == 100256 and g.context_override  # 100k + 256 > 40960: override
    by_id = {c.cell: c for c in p.cells.values()}
    assert by_id["long_context-ar-tp1-c1-ctx30k-out256"].feasible
    q = by_id["long_context-ar-tp1-c32-ctx30k-out256"]
    assert q.feasible and q.note.startswith(
        "queues: needs 968192 KV tokens for 32 requests, holds 46196: about 1 of 32"
    )
    s = by_id["long_context-ar-tp1-c1-ctx100k-out256"]
    assert not s.feasible and s.reason.startswith(
        "one request needs 100256 KV tokens (13.8 GiB per GPU), "
        "the KV cache holds 46196 tokens (6.3 GiB per GPU)"
    )


def test_context_cap_skips_with_reason(tmp_path: Path) -> None:
    m = _matrix(tmp_path, QWEN3_8B, [1], [3000, 100000], [1])
    doc_model = m.methods[0].model
    capped = type(doc_model)(doc_model.name, doc_model.path, context_length=32768)
    from dataclasses import replace

    cells = [replace(c, group=replace(c.group, method=replace(c.method, model=capped))) for c in m.cells()]
    p = plan.make_plan(cells, None)
    assert p.skip_reason(cells[0]) is None
    assert p.skip_reason(cells[1]).startswith(
        "needs 100256 tokens of context (100000 prompt + 256 output); "
        "models.m.context_length caps it at 32768"
    )


MATRIX = """
models:
  big: {path: ./llama70b, load_format: dummy}
  small: {path: ./qwen8b, load_format: dummy}
methods:
  ar70: {backend: fake, model: big, tp: [1, 4]}
  ar8: {backend: fake, model: small}
tp: [1]
workloads:
  long_context: {context_tokens: [3000, 30000], concurrency: [1], output_tokens: [64]}
"""


def test_plan_option_prints_and_starts_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from test_plugin import CONFTEST

    pytester.makeconftest(CONFTEST)
    for name, cfg in (("llama70b", LLAMA3_70B), ("qwen8b", QWEN3_8B)):
        (pytester.path / "benches" / name).mkdir(parents=True)
        (pytester.path / "benches" / name / "config.json").write_text(json.dumps(cfg))
    (pytester.path / "benches" / "specbench.yaml").write_text(MATRIX)
    (pytester.path / "benches" / "test_b.py").write_text(
        "def test_long_context(engine, cell, specbench):\n    specbench.run(engine, cell)\n"
    )
    monkeypatch.setenv("FAKE_ENGINE_STARTS", str(tmp_path / "starts.txt"))
    res = pytester.runpytest(
        "benches", "--specbench-plan", "--specbench-gpu-memory", "80GiB", "--specbench-plan-json", "plan.json"
    )
    out = res.stdout.str()
    assert "group ar70-tp1 (fake, TP=1, model big): CANNOT RUN: needs 131.4 GiB per GPU for weights" in out
    assert "SKIP long_context-ar70-tp1-c1-ctx3k-out64: needs 131.4 GiB per GPU" in out
    assert "engine starts: 2" in out
    assert not (tmp_path / "starts.txt").exists()  # no engine started
    d = json.loads((pytester.path / "plan.json").read_text())
    g = {x["group"]: x for x in d["groups"]}
    assert g["ar8-tp1"]["kv_bytes_per_token"] == 147456
    assert g["ar70-tp4"]["weight_bytes_per_gpu"] == 70_552_387_584 * 2 // 4
    assert g["ar8-tp1"]["kv_tokens_capacity"] == (int(80 * GiB * 0.85) - 16_380_854_272) // 147456
    assert {c["cell"]: c["feasible"] for c in d["cells"]}["long_context-ar70-tp1-c1-ctx30k-out64"] is False
    # the ETA: cells plus the two starts, the first of the process with its extra
    assert d["eta_s"] == pytest.approx(d["cells_eta_s"] + d["starts_eta_s"])
    assert d["starts_eta_s"] == pytest.approx(
        g["ar70-tp4"]["start_s"] + g["ar8-tp1"]["start_s"] + g["ar70-tp4"]["first_start_extra_s"]
    )
    # no GPU bandwidth given with --specbench-gpu-memory: no cell estimate, the starts still planned
    assert all(c["eta_s"] is None for c in d["cells"])
    assert "+60 s as a process's first" in out and "INCOMPLETE ETA, for 0 of 4 cells: " in out
    assert (
        "4 cells have no estimate: 4 without a GPU bandwidth (give --specbench-gpu NAME (e.g. H200, H100, "
        "A100) or --specbench-gpu-bandwidth); --specbench-plan-from a previous results JSON" in out
    )
    # a real run: the TP1 70B group's cells are skipped and its engine never starts
    res = pytester.runpytest("benches", "--specbench-gpu-memory", "80GiB", "-rs")
    res.assert_outcomes(passed=4, skipped=2)
    assert sorted(s.split()[0] for s in (tmp_path / "starts.txt").read_text().splitlines()) == [
        "ar70-tp4",
        "ar8-tp1",
    ]


def test_eta_from_previous_results(tmp_path: Path) -> None:
    m = _matrix(tmp_path, QWEN3_8B, [1], [3000], [1])
    cell = m.cells()[0]
    prev = {"benchmarks": [{"param": cell.id, "stats": {"data": [2.0, 4.0]}, "options": {"warmup": 1}}]}
    p = plan.make_plan(m.cells(), plan.GPUBudget(80 * GiB, 4.8e12), prev)
    # 6 s measured over 2 rounds, + 1 warmup round, each with 0.08 s between rounds (sglang)
    assert p.cells[cell.id].eta_s == pytest.approx(9.0 + 3 * 0.08)
    first = plan.make_plan(m.cells(), plan.GPUBudget(80 * GiB, 4.8e12)).cells[cell.id].eta_s
    # the same id measured under other settings (another fingerprint) is not this cell's time
    prev["benchmarks"][0]["extra_info"] = {"cell_fingerprint": "0123456789abcdef"}
    p = plan.make_plan(m.cells(), plan.GPUBudget(80 * GiB, 4.8e12), prev)
    assert p.cells[cell.id].eta_s == first and p.cells[cell.id].eta_from != "measured"
    prev["benchmarks"][0]["extra_info"] = {"cell_fingerprint": cell.fingerprint()}
    p = plan.make_plan(m.cells(), plan.GPUBudget(80 * GiB, 4.8e12), prev)
    assert p.cells[cell.id].eta_s == pytest.approx(9.0 + 3 * 0.08)


def test_weights_from_the_safetensors_index(tmp_path: Path) -> None:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN3_8B))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_400_000_000}}))
    from pytest_specbench.matrix.cells import Model

    s = shapes.model_shape(Model("m", str(d)))
    assert s.weight_bytes() == 16_400_000_000  # the index, not the count from the config
    # per GPU: split like the counted parameters, scaled to the index's total
    assert s.weight_bytes_per_gpu(4) == pytest.approx(16_400_000_000 / 4, rel=1e-9)
    assert shapes.shape_from_config(QWEN3_8B).tp_error(16) is None  # 2 heads per GPU, KV heads replicated 2x
    assert shapes.shape_from_config(dict(QWEN3_8B, num_key_value_heads=6, num_attention_heads=24)).tp_error(
        4
    ) == ("6 KV heads: neither KV heads divide by TP=4 nor TP by KV heads")


def _dummy_model_script():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "make_dummy_model.py"
    spec = importlib.util.spec_from_file_location("make_dummy_model", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# What SGLang 0.5.17 sized at start on an H200 (143771 MiB), scheduler_info.max_total_num_tokens in
# docs/results/h200-x2-two-waves/h200.json and h200-tp2-and-two-workers/h200-tp2.json, with the
# mem_fraction_static it resolved
ENGINE_KV_TOKENS = {
    "ar": (0.909, 1, 1_153_222),
    "ar2": (0.8, 2, 2_040_141),
    "hybrid-ar": (0.909, 1, 11_419_947),
    "hybrid-ngram": (0.91, 1, 18_731_243),
    "hybrid-mtp": (0.906, 1, 12_581_593),
}


def test_plan_matches_what_sglang_sized_on_the_h200(tmp_path: Path) -> None:
    mk = _dummy_model_script()
    for name, cfg in (
        ("dense", mk.target_config("qwen3-1.7b", 40960)),
        ("hybrid", mk.hybrid_config("qwen3.5-hybrid-small", 262144)),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    spec = {
        "hybrid-ngram": {"algorithm": "ngram"},
        "hybrid-mtp": {
            "algorithm": "eagle",
            "draft_model": "hybrid",
            "num_steps": 3,
            "topk": 1,
            "num_draft_tokens": 4,
        },
    }
    methods = {}
    for name, (mem, tp, _) in ENGINE_KV_TOKENS.items():
        methods[name] = {
            "backend": "sglang",
            "model": "hybrid" if name.startswith("hybrid") else "dense",
            "tp": [tp],
            "engine_args": {"mem_fraction_static": mem},
        }
        if name in spec:
            methods[name]["speculative"] = spec[name]
    doc = {
        "models": {n: {"path": str(tmp_path / n), "load_format": "dummy"} for n in ("dense", "hybrid")},
        "methods": methods,
        "workloads": {"throughput": {"concurrency": [1]}},
    }
    gpu = plan.GPUBudget(143771 * 2**20, 4.8e12, "NVIDIA H200")
    groups = {g.method.name: plan.plan_group(g, gpu) for g in parse(doc, "m.yaml").groups()}
    for name, (_, _, engine) in ENGINE_KV_TOKENS.items():
        planned = groups[name].kv_tokens_capacity
        assert planned is not None and 0.98 < planned / engine < 1.03, (name, planned, engine)
    # hybrid: SGLang gives 0.9/1.9 of what the weights leave to the state pool (no speculation)
    notes = " ".join(groups["hybrid-ar"].notes)
    assert "state pool: 6528 slots of 9.3 MiB" in notes
    assert "draft: the target's 1 MTP layer(s)" in " ".join(groups["hybrid-mtp"].notes)
    # speculative engines run at most 48 requests at once unless max_running_requests is set
    assert (groups["hybrid-ngram"].max_running, groups["ar"].max_running) == (48, None)
    assert groups["hybrid-ngram"].max_running_why.startswith("SGLang's default with speculative decoding")


def test_plan_matches_sglang_on_the_27b_hybrid_and_caps_running_requests(tmp_path: Path) -> None:
    """What sglang 0.5.17 sized on an H200 for the Qwen3.5-27B-shaped hybrid (AR,
    mem_fraction_static 0.903; its start log): weights 50.162 GiB, KV 651,426 tokens, 248 state slots,
    "max_running_requests is capped to 82 by the mamba state cache"."""
    mk = _dummy_model_script()
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "config.json").write_text(json.dumps(mk.hybrid_config("qwen3.5-27b-hybrid", 262144)))
    doc = {
        "models": {"h": {"path": str(tmp_path / "h"), "load_format": "dummy"}},
        "methods": {
            "ar": {"backend": "sglang", "model": "h", "engine_args": {"mem_fraction_static": 0.903}},
            "ngram": {"backend": "sglang", "model": "h", "speculative": {"algorithm": "ngram"}},
        },
        "workloads": {"throughput": {"concurrency": [32, 64]}},
    }
    m = parse(doc, "m.yaml")
    gpu = plan.GPUBudget(143771 * 2**20, 4.8e12, "NVIDIA H200")
    p = plan.make_plan(m.cells(), gpu)
    ar, ngram = p.groups["ar-tp1"], p.groups["ngram-tp1"]
    assert 0.99 < ar.weight_bytes_per_gpu / (50.162 * GiB) < 1.01
    assert 0.98 < ar.kv_tokens_capacity / 651_426 < 1.03
    assert 82 <= ar.max_running <= 86  # 253 slots // 3 = 84
    # ngram on the same hybrid: fewer slots (12 draft-token states each), 16 requests at once
    assert ngram.max_running == 16
    note = p.cells["ngram-tp1-c32-out64"].note
    assert note.startswith("queues: SGLang runs at most 16 of 32 requests at once (the state pool's 48 slots")
    assert p.cells["ar-tp1-c64-out64"].note is None
    # memory for the weights but not one state slot: SGLang refuses to start, the plan says so
    doc["methods"] = {
        "ar": {"backend": "sglang", "model": "h", "engine_args": {"mem_fraction_static": 0.358}}
    }
    p = plan.make_plan(parse(doc, "m.yaml").cells(), gpu)
    assert "hold no linear-attention state slot (146.8 MiB per request): SGLang refuses to start" in (
        p.groups["ar-tp1"].error
    )
    assert not p.cells["ar-tp1-c32-out64"].feasible


def test_an_include_entrys_context_length_is_what_the_plan_checks_at_its_tp(tmp_path: Path) -> None:
    """The engine at TP1 starts with context_length 32768 (an include entry): a 100k prompt there
    cannot run, and the plan skips it before any engine starts; TP4 has no cap."""
    _matrix(tmp_path, QWEN3_8B, [1], [3000], [1])  # writes the model's config.json
    doc = {
        "models": {"m": {"path": str(tmp_path / "model"), "load_format": "dummy"}},
        "methods": {"ar": {"backend": "sglang", "model": "m"}},
        "tp": [1, 4],
        "workloads": {
            "long_context": {"context_tokens": [100000], "concurrency": [1], "output_tokens": [256]}
        },
        "include": [{"tp": 1, "engine_args": {"context_length": 32768}}],
    }
    m = parse(doc, str(tmp_path / "m.yaml"))
    p = plan.make_plan(m.cells(), plan.GPUBudget(141 * GiB, 4.8e12))
    by_tp = {c.tp: c for c in m.cells()}
    why = p.skip_reason(by_tp[1])
    assert why is not None and "needs 100256 tokens of context (100000 prompt + 256 output)" in why
    said = "methods.ar.engine_args.context_length (its own or an include entry's for TP1) starts the engine"
    assert f"{said} with 32768" in why
    assert "engine_args.context_length" not in str(p.skip_reason(by_tp[4]))
    assert p.groups["ar-tp1"].context_length == 32768
