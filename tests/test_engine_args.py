"""engine_args of the sglang and sglang-server backends are checked against SGLang's ServerArgs when
the matrix is read (before any engine starts): the installed SGLang's where sglang is installed,
else the committed list of SGLang 0.5.17's fields; a misspelt name is an error naming the file,
the method or include entry, the key and the close matches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specbench.engines.sglang import engine_kwargs
from pytest_specbench.matrix import engine_args, server_args_data
from pytest_specbench.matrix.schema import MatrixError, load, parse

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = (
    "(sglang is not importable here: checked against the list in pytest_specbench/matrix/server_args_data.py)"
)


@pytest.fixture(autouse=True)
def _fresh_reference() -> Any:
    engine_args.reference.cache_clear()
    yield
    engine_args.reference.cache_clear()


def _doc(methods: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "models": {"t": "embedded:tiny", "d": "embedded:tiny-draft"},
        "methods": methods,
        "tp": [1, 4],
        "workloads": {"throughput": {"concurrency": [1], "output_tokens": [16]}},
        **top,
    }


def _error(doc: dict[str, Any]) -> str:
    with pytest.raises(MatrixError) as e:
        parse(doc, "m.yaml")
    return str(e.value)


def test_the_committed_list_is_what_a_machine_without_sglang_checks_against() -> None:
    assert engine_args.reference().installed is False  # the CPU CI has no sglang
    assert server_args_data.VERSION == "0.5.17"
    assert len(server_args_data.FIELDS) == 458
    assert {"mem_fraction_static", "context_length", "cuda_graph_max_bs_decode"} <= server_args_data.FIELDS
    assert server_args_data.FLAGS["cuda_graph_max_bs"] == "cuda_graph_max_bs_decode"


def test_a_misspelt_method_argument_names_file_method_key_and_close_matches(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(
        "models: {t: embedded:tiny}\n"
        "methods:\n"
        "  ar: {backend: sglang, model: t, engine_args: {mem_fraction_statc: 0.8}}\n"
        "workloads: {throughput: {concurrency: [1]}}\n"
    )
    with pytest.raises(MatrixError) as e:
        load(p)
    assert str(e.value) == (
        f"{p}: methods.ar.engine_args.mem_fraction_statc: is not an argument of SGLang 0.5.17's ServerArgs "
        f"{COMMITTED} (did you mean 'mem_fraction_static'?); if the SGLang you run is newer and has it, "
        "list it under the top-level engine_args_unchecked: [mem_fraction_statc]"
    )


def test_a_swept_method_and_an_include_entry_are_checked_too() -> None:
    sweep = {
        "ng": {
            "backend": "sglang-server",
            "model": "t",
            "speculative": {"algorithm": "ngram", "num_draft_tokens": [4, 8]},
            "engine_args": {"page_size": [1, 16], "speculative_ngram_max_bfs_breath": 8},
        }
    }
    msg = _error(_doc(sweep))
    assert msg.startswith("m.yaml: methods.ng.engine_args.speculative_ngram_max_bfs_breath: is not an arg")
    assert "(did you mean 'speculative_ngram_max_bfs_breadth', 'speculative_ngram_min_bfs_breadth'" in msg
    ok = {"ar": {"backend": "sglang", "model": "t"}, "h": {"backend": "hf", "model": "t"}}
    include = [
        {"tp": [1, 4], "engine_args": {"mem_fraction_static": 0.8}},
        {"tp": 4, "method": "ar", "engine_args": {"context_lenght": 32768}},
    ]
    msg = _error(_doc(ok, include=include))
    assert msg.startswith(
        "m.yaml: include[1].engine_args.context_lenght: is not an argument of SGLang 0.5.17's ServerArgs"
    )
    assert msg.endswith(
        "(did you mean 'context_length'?); if the SGLang you run is newer and has it, list it under the "
        "top-level engine_args_unchecked: [context_lenght] (for method ar at TP4)"
    )


def test_names_are_serverargs_fields_not_flags_nor_what_the_plugin_sets() -> None:
    def err(backend: str, args: dict[str, Any], spec: dict[str, Any] | None = None) -> str:
        m: dict[str, Any] = {"backend": backend, "model": "t", "engine_args": args}
        if spec:
            m["speculative"] = spec
        return _error(_doc({"s": m}))

    assert err("sglang", {"mem-fraction-static": 0.8}) == (
        "m.yaml: methods.s.engine_args.mem-fraction-static: engine_args take ServerArgs' field names, "
        "with underscores: write 'mem_fraction_static' (sglang-server passes it as --mem-fraction-static)"
    )
    assert err("sglang", {"tp_size": 2}) == (
        "m.yaml: methods.s.engine_args.tp_size: is set by the plugin from tp: (the cell's TP size, the "
        "GPUs its engine leases); give it there"
    )
    model = err("sglang", {"model_path": "x"})
    assert "is set by the plugin from the method's model (models.NAME.path)" in model
    tp = err("sglang-server", {"tensor_parallel_size": 2})
    assert "tensor_parallel_size: is --tensor-parallel-size, which sets tp_size: the plugin sets it" in tp
    assert err("sglang-server", {"port": 31000}) == (
        "m.yaml: methods.s.engine_args.port: is set by the plugin: the plugin starts each server on a free "
        "port (a URL of your own server: backend http)"
    )
    # a deprecated launch_server flag: the server takes it, sglang.Engine(**kwargs) does not
    assert err("sglang", {"cuda_graph_max_bs": 8}) == (
        "m.yaml: methods.s.engine_args.cuda_graph_max_bs: is launch_server's --cuda-graph-max-bs (it sets "
        "cuda_graph_max_bs_decode), not a ServerArgs field: the in-process engine (backend sglang) takes "
        "ServerArgs' names; set 'cuda_graph_max_bs_decode'"
    )
    server = {"backend": "sglang-server", "model": "t", "engine_args": {"cuda_graph_max_bs": 8}}
    m = parse(_doc({"s": server}))
    assert dict(m.methods[0].engine_args) == {"cuda_graph_max_bs": 8}
    # SGLang's own algorithm: its arguments are checked; a fork's (DDTREE): its own prefix passes
    assert "(did you mean 'speculative_dflash_block_size', 'speculative_dspark_block_size' or" in err(
        "sglang", {"speculative_dflash_blok_size": 8}, {"algorithm": "dflash", "draft_model": "d"}
    )
    ddtree = {"algorithm": "ddtree", "draft_model": "d"}
    m = parse(_doc({"s": {"backend": "sglang", "model": "t", "speculative": ddtree,
                          "engine_args": {"speculative_ddtree_budget": [32, 64]}}}))  # fmt: skip
    assert [x.name for x in m.methods] == ["s-ddtree-budget-32", "s-ddtree-budget-64"]
    assert "speculative_ddtree_budget: is not an argument" in err("sglang", {"speculative_ddtree_budget": 8})


def test_unchecked_names_pass_and_a_stale_one_is_refused() -> None:
    methods = {"ar": {"backend": "sglang", "model": "t", "engine_args": {"speculative_new_knob": 1}}}
    m = parse(_doc(methods, engine_args_unchecked=["speculative_new_knob"]))
    assert dict(m.methods[0].engine_args) == {"speculative_new_knob": 1}
    assert _error(_doc(methods, engine_args_unchecked=["speculative_new_knob", "speculative_new_knop"])) == (
        "m.yaml: engine_args_unchecked: 'speculative_new_knop' is in no method's or include entry's "
        "engine_args (did you mean 'speculative_new_knob'?); remove it"
    )
    assert "expected a list of engine argument names" in _error(_doc(methods, engine_args_unchecked=True))
    # other backends' engine_args are not SGLang's
    http = {"backend": "http", "model": "t", "url": "http://h:3000", "engine_args": {"served_model": "q"}}
    assert dict(parse(_doc({"h": http})).methods[0].engine_args) == {"served_model": "q"}


FAKE_SERVER_ARGS = """
import dataclasses
from typing import ClassVar

raise RuntimeError("importing this module would load torch and CUDA")


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    tp_size: int = 1
    speculative_newer_knob: int = 0
    registry: ClassVar[dict] = {}

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tensor-parallel-size", dest="tp_size")
"""


def test_an_installed_sglang_is_read_from_its_source_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text('raise RuntimeError("sglang must not be imported to check a matrix")\n')
    (pkg / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    dist = tmp_path / "sglang-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = engine_args.reference()
    assert ref.installed and ref.version == "9.9.9"
    assert ref.fields == {"model_path", "tp_size", "speculative_newer_knob"}
    assert dict(ref.flags) == {"tensor_parallel_size": "tp_size"}
    newer = {"backend": "sglang", "model": "t", "engine_args": {"speculative_newer_knob": 2}}
    assert dict(parse(_doc({"s": newer})).methods[0].engine_args) == {"speculative_newer_knob": 2}
    old = {"backend": "sglang", "model": "t", "engine_args": {"mem_fraction_static": 0.8}}
    assert _error(_doc({"s": old})) == (
        "m.yaml: methods.s.engine_args.mem_fraction_static: is not an argument of the installed SGLang "
        f"9.9.9 (ServerArgs in {pkg / 'srt' / 'server_args.py'}); SGLang would refuse it at start"
    )
    assert "sglang" not in sys.modules


def test_what_the_plugin_passes_the_engine_is_serverargs_fields() -> None:
    """Every keyword engine_kwargs builds (a chain, a DFLASH with an override of the context) is a
    field of the committed SGLang: the list and the engine agree."""
    doc = _doc(
        {
            "e": {
                "backend": "sglang",
                "model": "t",
                "speculative": {"algorithm": "eagle3", "draft_model": "d", "num_steps": 3, "topk": 1},
            },
            "f": {
                "backend": "sglang",
                "model": "t",
                "speculative": {"algorithm": "dflash", "draft_model": "d", "block_size": 8},
                "engine_args": {"context_length": 1 << 20},
            },
        }
    )
    doc["models"]["t"] = {"path": "embedded:tiny", "tokenizer": "embedded:tiny", "load_format": "dummy"}
    keys = {k for g in parse(doc).groups() for k in engine_kwargs(g)}
    assert {"tokenizer_path", "load_format", "speculative_dflash_block_size", "json_model_override_args"} <= (
        keys
    )
    assert keys <= server_args_data.FIELDS


WHEELS = sorted((ROOT / ".whl").glob("sglang-0.5.17-*.whl"))


@pytest.mark.skipif(not WHEELS, reason="no SGLang 0.5.17 wheel in .whl/ (docs/sglang.md's wheelhouse)")
def test_the_committed_list_is_the_wheels() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sglang_server_args.py"), "--check", str(WHEELS[0])],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pytest_specbench/matrix/server_args_data.py: up to date (SGLang 0.5.17)" in res.stdout


def test_a_process_that_imported_sglang_checks_against_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where sglang.srt.server_args is imported already (an engine's process), its ServerArgs'
    dataclasses.fields are the reference."""
    import dataclasses
    import types

    @dataclasses.dataclass
    class ServerArgs:  # what the imported module holds
        model_path: str = ""
        only_in_the_class: int = 0

    mod = types.ModuleType("sglang.srt.server_args")
    mod.ServerArgs = ServerArgs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", mod)
    ref = engine_args.reference()
    assert ref.installed and ref.fields == {"model_path", "only_in_the_class"}
    assert ref.where == "sglang.srt.server_args.ServerArgs"
    ok = {"backend": "sglang", "model": "t", "engine_args": {"only_in_the_class": 1}}
    assert dict(parse(_doc({"s": ok})).methods[0].engine_args) == {"only_in_the_class": 1}
