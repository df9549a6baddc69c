"""Cell fingerprints: what defines a measurement, field by field, and the fingerprints of the
committed results, which ``--specbench-resume`` compares, unchanged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_specbench.matrix.cells import (
    DEFAULT_WAVES,
    Cell,
    EngineGroup,
    Method,
    Model,
    Workload,
)
from pytest_specbench.matrix.fingerprint import FINGERPRINT_FIELDS, NOT_FINGERPRINTED, fingerprint_text
from pytest_specbench.matrix.schema import parse
from pytest_specbench.matrix.speculative import Speculative

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "docs" / "results"


def _committed() -> list[Path]:
    """The committed results JSONs whose cells carry a fingerprint."""
    out = []
    for p in sorted(RESULTS.rglob("*.json")):
        doc = json.loads(p.read_text())
        if isinstance(doc, dict) and any(
            (b.get("extra_info") or {}).get("cell_fingerprint") for b in doc.get("benchmarks", ())
        ):
            out.append(p)
    return out


def _relative(matrix: str) -> Path:
    """The matrix path inside the repository (a run may record it absolute: /x/benches/m.yaml)."""
    return Path(MOVED.get(str(_recorded(matrix)), str(_recorded(matrix))))


def _recorded(matrix: str) -> Path:
    """The matrix path the run recorded, made relative to its checkout."""
    p = Path(matrix)
    return Path(*p.parts[p.parts.index("benches") :]) if p.is_absolute() else p


def _seed27_tp1() -> str:
    """benches/examples/seed27-tp1.yaml, which scripts/h200_run.sh writes for its TP1 runs of the
    27B-class hybrid: seed-27b-hybrid.yaml with the dummy model's path and tp [1]."""
    text = (ROOT / "benches/examples/seed-27b-hybrid.yaml").read_text()
    text = text.replace("path: ./configs/qwen3.5-27b-hybrid", "path: ../../.model/q27")
    return re.sub(r"(?m)^tp: \[1, 4, 8\]", "tp: [1]", text)


DERIVED = {
    "benches/examples/seed27-tp1.yaml": _seed27_tp1,
    # cpu-race's runs read a copy of race-cpu.yaml under this name
    "benches/examples/race-cpu-t1.yaml": lambda: (ROOT / "benches/examples/race-cpu.yaml").read_text(),
}
# matrices of GPU runs that now live under benches/gpu/ (a JSON records the path the run read)
MOVED = {
    f"benches/{n}.yaml": f"benches/gpu/{n}.yaml"
    for n in ("h200", "h200-det", "h200-http", "h200-paired", "h200-server", "h200-tp", "h200-workloads")
}


# runs of an earlier version of a matrix that is still in the repository: that version's text
AS_RUN = {
    # the greedy pair of cpu-race: race-cpu.yaml without its temperature
    **{
        f"cpu-race/{n}-t0.json": lambda: (
            (ROOT / "benches/examples/race-cpu.yaml").read_text().replace("    temperature: [1.0]\n", "")
        )
        for n in ("full", "race")
    },
    # the first try of the hybrid's forced sweep, before the matrix set one wave a round
    "h200-breakeven-hybrid/four-waves-ar.json": lambda: (
        (ROOT / "benches/gpu/h200-breakeven-hybrid.yaml").read_text().replace("    waves: 1\n", "")
    ),
}


# runs of the former default matrix (45 cells; today's is a 19-cell tour): its text is kept
# beside them, docs/results/cpu-default/specbench.yaml (trace path relative to benches/)
FORMER_DEFAULT = ("cpu-default", "cpu-interleaved", "cpu-h200host", "cpu-slurm")


def _former_default() -> str:
    text = (RESULTS / "cpu-default" / "specbench.yaml").read_text()
    return text.replace("trace: ../fixtures/", f"trace: {ROOT}/fixtures/")


def _matrix_text(rel: Path) -> str | None:
    if (ROOT / rel).exists():
        # a trace file is read when the matrix is, and fingerprinted by its content, not its
        # path: read this checkout's (a run's own checkout may be gone)
        return (ROOT / rel).read_text().replace("trace: ../fixtures/", f"trace: {ROOT}/fixtures/")
    derived = DERIVED.get(str(rel))
    return derived() if derived else None


def _run_root(json_path: Path, matrix: str, text: str) -> Path:
    """The checkout the run was made in. A model path relative to the matrix file is resolved
    when the file is read, so a cell's fingerprint holds that checkout's absolute path. It is
    read from the matrix path when recorded absolute, else from the path of a model an engine
    recorded (in this JSON or another of its folder), else it is this checkout."""
    if Path(matrix).is_absolute():
        return Path(matrix[: -len(str(_recorded(matrix)))])
    models = yaml.safe_load(text)["models"].values()
    paths = [m if isinstance(m, str) else m["path"] for m in models]
    tails = [os.path.normpath(_relative(matrix).parent / p) for p in paths if p.startswith("../")]
    for doc in [json_path, *sorted(json_path.parent.glob("*.json"))]:
        found = doc.read_text()
        for tail in tails:
            at = found.find(f'/{tail}"')
            if at > 0:
                return Path(found[found.rfind('"', 0, at) + 1 : at])
    return ROOT


COMMITTED = _committed()


def test_the_committed_results_include_the_h200_and_cpu_runs() -> None:
    matrices = {str(_relative(json.loads(p.read_text())["specbench"]["matrix"])) for p in COMMITTED}
    assert {
        "benches/gpu/h200-paired.yaml",
        "benches/gpu/h200-server.yaml",
        "benches/specbench.yaml",
    } <= matrices


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(RESULTS)) for p in COMMITTED])
def test_committed_results_keep_their_fingerprints(path: Path) -> None:
    """Every cell of a committed results JSON has the fingerprint its matrix gives it today, so
    ``--specbench-resume`` of that JSON copies it. A failure after editing a bench matrix means
    those results would be measured again; after editing matrix/cells.py, that the fingerprint
    changed."""
    doc = json.loads(path.read_text())
    matrix = doc["specbench"]["matrix"]
    rel = _relative(matrix)
    as_run = AS_RUN.get(str(path.relative_to(RESULTS)))
    if str(rel) == "benches/specbench.yaml" and path.relative_to(RESULTS).parts[0] in FORMER_DEFAULT:
        text: str | None = _former_default()
    else:
        text = as_run() if as_run else _matrix_text(rel)
    if text is None:
        pytest.skip(f"{rel} is not in the repository")
    root = _run_root(path, matrix, text)
    m = parse(yaml.safe_load(text), str(rel), None, root / rel.parent)
    cells = {c.id: c for c in m.cells()}
    recorded = {b["param"]: b["extra_info"]["cell_fingerprint"] for b in doc["benchmarks"]}
    assert recorded and set(recorded) <= set(cells)
    today = {i: cells[i].fingerprint() for i in recorded}

    # cells that ran the former default of one wave a round (no requests, no waves): measured again
    # on resume (today's fingerprint differs), and their key without the default is what they hashed
    # (a run of an earlier matrix version listed in AS_RUN ran today's default)
    # cells that ran a former default (no requests, no waves): one wave a round before metrics
    # version 2 (their key without the default), or, long-context cells, four waves before today's
    # one; measured again on resume (today's fingerprint differs), and what they hashed is checked
    def _hash(key: tuple) -> str:
        return hashlib.sha256(fingerprint_text(key).encode()).hexdigest()[:16]

    former: dict[str, str] = {}
    for i in recorded:
        key = cells[i].fingerprint_key()
        if not (isinstance(key[-1], tuple) and key[-1][:1] == ("default_waves",)):
            continue
        # (a run of an earlier matrix version listed in AS_RUN ran the four-wave default)
        thens = [(*key[:-1], ("default_waves", DEFAULT_WAVES))] + ([] if as_run else [key[:-1]])
        for then in thens:
            if then != key and _hash(then) == recorded[i]:
                former[i] = recorded[i]
    assert {i: today[i] for i in recorded if i not in former} == {
        i: recorded[i] for i in recorded if i not in former
    }
    for i in former:
        assert today[i] != recorded[i]


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", [Model, Speculative, Method, Workload])
def test_every_field_is_in_the_fingerprint_or_says_why_not(cls: type) -> None:
    """A field added to a matrix class fails here until it is listed in FINGERPRINT_FIELDS (it
    changes how a cell is measured) or NOT_FINGERPRINTED (with the reason)."""
    listed = set(FINGERPRINT_FIELDS[cls.__name__])
    left_out = {f for c, f in NOT_FINGERPRINTED if c == cls.__name__}
    assert not listed & left_out
    assert listed | left_out == _fields(cls)


def test_cell_and_group_fields_are_accounted_for() -> None:
    """Cell.fingerprint hashes the cell's workload, its group's method and TP size, concurrency,
    context, output and axes; id_prefix and context_needed follow from the workloads."""
    assert _fields(Cell) == {
        "workload",
        "group",
        "concurrency",
        "output_tokens",
        "context_tokens",
        "extra",
        "id_prefix",
    }
    assert _fields(EngineGroup) == {"method", "tp", "context_needed"}


DOC: dict[str, Any] = {
    "models": {"t": "embedded:tiny"},
    "methods": {"ar": {"backend": "hf", "model": "t"}},
    "workloads": {"throughput": {"concurrency": [2], "output_tokens": [16]}},
}


def _cell(doc: dict[str, Any] = DOC) -> Cell:
    (cell,) = parse(doc, "m.yaml").cells()
    return cell


def test_the_text_hashed_spells_out_the_listed_fields() -> None:
    c = _cell()
    text = fingerprint_text(
        (c.method, c.workload, c.tp, c.concurrency, c.context_tokens, c.output_tokens, c.extra)
    )
    assert text == (
        "(Method(name='ar', backend='hf', model=Model(name='t', path='embedded:tiny', tokenizer=None, "
        "load_format='auto', context_length=None), speculative=None, draft_model=None, tp=(), "
        "engine_args=(), env=(), sweep='', setting=()), Workload(name='throughput', kind='throughput', "
        "concurrency=(2,), output_tokens=(16,), context_tokens=(), prompt_tokens=128, requests=None, "
        "waves=None, rounds=5, warmup=1, timeout_s=900.0, methods=(), options=(), request_rate=(), "
        "scenarios=(), categories=(), questions=None), 1, 2, 128, 16, ())"
    )
    # neither requests nor waves: the default number of waves is hashed too (the last element)
    assert c.fingerprint_key()[-1] == ("default_waves", 4)
    assert (
        c.fingerprint() == hashlib.sha256((text[:-1] + ", ('default_waves', 4))").encode()).hexdigest()[:16]
    )


def test_what_changes_a_fingerprint_and_what_does_not() -> None:
    base = _cell().fingerprint()
    w = DOC["workloads"]["throughput"]
    with_rounds = {**DOC, "workloads": {"throughput": {**w, "rounds": 6}}}
    assert _cell(with_rounds).fingerprint() != base
    args = {**DOC, "methods": {"ar": {"backend": "hf", "model": "t", "engine_args": {"x": 1}}}}
    assert _cell(args).fingerprint() != base
    greedy = {**DOC, "workloads": {"throughput": {**w, "temperature": [0]}}}
    assert _cell(greedy).fingerprint() == base
    # a field outside the list (here the API key's variable) changes no fingerprint
    c = _cell()
    keyed = dataclasses.replace(
        c, group=dataclasses.replace(c.group, method=dataclasses.replace(c.method, api_key_env="KEY"))
    )
    assert keyed.fingerprint() == base
    # the endpoint of an http method does
    ep = dataclasses.replace(
        c,
        group=dataclasses.replace(
            c.group, method=dataclasses.replace(c.method, url="http://h:1", api="sglang")
        ),
    )
    assert ep.fingerprint() != base
