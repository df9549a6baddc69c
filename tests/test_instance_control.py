"""The A/A control (report/control.py): a twin of the baseline read against the baseline's instance
withholds the verdicts at its shape that an instance effect could explain; and engines that share
their GPUs get the args that keep an idle one off the CPU (plugin/resident.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_resident import _resident_project

from pytest_specbench.matrix.cells import EngineGroup
from pytest_specbench.matrix.schema import parse
from pytest_specbench.plugin import resident
from pytest_specbench.report import control, screen, withheld


def _matrix(extra: str = "") -> dict[str, Any]:
    return {
        "models": {"t": {"path": "embedded:tiny"}, "d": {"path": "embedded:tiny-draft"}},
        "methods": {
            "ar": {"backend": "sglang-server", "model": "t", "engine_args": {"disable_cuda_graph": True}},
            "twin": {"backend": "sglang-server", "model": "t", "engine_args": {"disable_cuda_graph": True}},
            "bigger": {
                "backend": "sglang-server",
                "model": "t",
                "engine_args": {"chunked_prefill_size": 512},
            },
            "sd": {
                "backend": "sglang-server",
                "model": "t",
                "speculative": {"algorithm": "standalone", "draft_model": "d", "num_steps": 3},
                "engine_args": {"disable_cuda_graph": True},
            },
        },
        "workloads": {"throughput": {"concurrency": [1], "output_tokens": [8], "prompt_tokens": 8}},
    }


def test_a_twin_of_the_baseline_is_its_control_and_nothing_else_is() -> None:
    from pytest_specbench.engines import separate_instances

    m = parse(_matrix(), "m.yaml")
    assert m.controls() == {"twin": "ar"}  # other engine args, or speculative: members, not controls
    assert m.controls(separate_instances) == {"twin": "ar"}  # launched servers: instances of their own
    cpu = {**_matrix(), "methods": {n: {"backend": "hf", "model": "t"} for n in ("ar", "twin")}}
    assert parse(cpu, "m.yaml").controls(separate_instances) == {}  # two engines of one process


def _row(method: str, conc: int) -> dict[str, Any]:
    params = {"method": method, "tp": 1, "workload": "throughput", "concurrency": conc, "output_tokens": 64}
    return {"cell_id": f"{method}-tp1-c{conc}", "params": params, "group": f"{method}-tp1"}


def _cmp(point: float, lo: float, hi: float, verdict: str) -> dict[str, Any]:
    return {
        "speedup_vs_ar": point,
        "speedup_vs_ar_ci95": [lo, hi],
        "speedup_verdict": verdict,
        "speedup_pairing": "interleaved",
        "speedup_pairs": 6,
    }


def _read(
    control_ci: tuple[float, float, float],
) -> tuple[list[dict[str, Any]], dict[int, Any], dict[str, Any]]:
    """The H200 instance effect's figures: the baseline's instance ~30 % slow for a whole call, a
    member that cannot beat AR reads x1.208 "faster", one truly x2.4 faster."""
    rows = [_row("twin", 16), _row("a1", 16), _row("a4", 16), _row("a1", 1)]
    comparisons = {
        0: _cmp(*control_ci, "faster" if control_ci[1] > 1 else "within ±2%"),
        1: _cmp(1.208, 1.093, 1.336, "faster"),
        2: _cmp(2.399, 2.360, 2.438, "faster"),
        3: _cmp(0.709, 0.687, 0.731, "slower"),
    }
    spec: dict[str, Any] = {"controls": {"twin": "ar"}}
    control.apply(rows, comparisons, spec)
    return rows, comparisons, spec


def test_a_separated_control_withholds_what_its_instance_effect_could_explain() -> None:
    rows, cmp, spec = _read((1.40, 1.21, 1.62))
    (rec,) = spec["control"]
    assert rec["control_cell"] == "twin-tp1-c16" and rec["established"] is True
    assert rec["band"] == pytest.approx(0.4824, abs=1e-4)  # |log 1.62|: the far end of its interval
    # x1.208 lies inside x0.617..x1.62: withheld, the verdict kept beside it
    assert cmp[1]["speedup_verdict"].startswith("no verdict: x1.208 is smaller than the band")
    assert "A/A control twin-tp1-c16" in cmp[1]["speedup_verdict"]
    assert cmp[1]["speedup_verdict_before_control"] == "faster"
    assert cmp[2]["speedup_verdict"] == "faster"  # x2.399 [2.360, 2.438]: clear of the band
    assert cmp[3]["speedup_verdict"] == "slower"  # another shape (c1): no control there
    # the control's own reading is never a method's verdict: kept beside, never ranked
    assert cmp[0]["speedup_verdict"].startswith("no verdict: the A/A control, a twin of ar")
    assert cmp[0]["speedup_verdict_before_control"] == "faster" and cmp[0]["aa_control"] == "ar"
    from pytest_specbench.report.pareto import never_ranked

    assert never_ranked(cmp[0]) and not never_ranked(cmp[2])
    assert rec["withheld"] == ["a1-tp1-c16"]
    doc = {"specbench": spec, "benchmarks": []}
    assert withheld.withheld_counts(doc)["instance-withheld"] == ["a1-tp1-c16"]
    assert "instance-withheld 1" in " ".join(withheld.withheld_lines(doc)[:2])  # the head, wrapped
    (line,) = screen.control_view(doc)
    assert line.startswith("A/A control twin-tp1-c16: x1.400 [1.210, 1.620] against ar: separated")
    assert "1 verdicts at its shape withheld (a1-tp1-c16)" in line


def test_a_control_within_the_rounds_spread_withholds_nothing() -> None:
    rows, cmp, spec = _read((1.07, 0.90, 1.27))
    (rec,) = spec["control"]
    assert rec["established"] is False and rec["withheld"] == []
    assert cmp[1]["speedup_verdict"] == "faster" and "speedup_verdict_before_control" not in cmp[1]
    (line,) = control.lines({"specbench": spec})
    assert line == (
        "A/A control twin-tp1-c16: x1.070 [0.900, 1.270] against ar: not separated: an instance "
        "effect up to x1.270 either way not ruled out"
    )
    # the counts: the control cell never ranked, nothing withheld (said only where not 0)
    head = withheld.withheld_lines({"specbench": spec, "benchmarks": []})[0]
    assert "A/A control 1" in head and "instance-withheld" not in head


def test_a_control_checks_only_its_own_baselines_instance() -> None:
    """A twin of ar checks members compared with ar in the same worker (the same instance): not
    a member of another baseline, nor one measured beside another worker's instance."""
    rows = [_row("twin", 16), _row("a1", 16), _row("b1", 16), _row("a1", 16)]
    rows[3] = {**rows[3], "cell_id": "a1-tp1-c16-gw1", "worker": "gw1"}
    for r in rows[:3]:
        r["worker"] = "gw0"
    cmp = {0: _cmp(1.40, 1.21, 1.62, "faster"), **{i: _cmp(1.208, 1.093, 1.336, "faster") for i in (1, 2, 3)}}
    spec: dict[str, Any] = {"controls": {"twin": "ar"}}
    control.apply(rows, cmp, spec, {"twin": "ar", "a1": "ar", "b1": "other-ar"})
    assert spec["control"][0]["withheld"] == ["a1-tp1-c16"]  # gw0's a1 against ar only
    assert cmp[2]["speedup_verdict"] == "faster"  # compared with another baseline
    assert cmp[3]["speedup_verdict"] == "faster"  # beside gw1's instance, which no control read


def test_a_control_that_measured_nothing_says_its_instances_are_unchecked() -> None:
    doc = {"specbench": {"controls": {"twin": "ar"}, "control": []}}
    assert control.lines(doc) == [
        "A/A control twin (a twin of ar) measured nothing: the instances of ar are unchecked in this run"
    ]


def test_resident_baselines_without_a_control_say_so() -> None:
    doc = {
        "specbench": {"controls": {}, "reference_engines": [{"group": "ar-tp1", "resident": {"share": 0.42}}]}
    }
    (line,) = control.lines(doc)
    assert line.startswith("no A/A control: members were compared with a baseline instance beside them")
    doc["specbench"]["reference_engines"] = [{"group": "ar-tp1"}]  # in one process (CPU): no line
    assert control.lines(doc) == []


def test_engines_sharing_their_gpus_get_sleep_on_idle_unless_their_method_sets_it() -> None:
    m = parse(_matrix(), "m.yaml")
    ar = EngineGroup(m.method("ar"), 1)
    got, added = resident.with_beside_args(ar)
    assert added == {"sleep_on_idle": True}
    assert dict(got.method.engine_args) == {"disable_cuda_graph": True, "sleep_on_idle": True}
    assert got.id == ar.id
    doc = _matrix()
    doc["methods"]["ar"]["engine_args"]["sleep_on_idle"] = False
    own = EngineGroup(parse(doc, "m.yaml").method("ar"), 1)
    assert resident.with_beside_args(own) == (own, {})  # the method's own setting stands
    hf = EngineGroup(
        parse({**_matrix(), "methods": {"ar": {"backend": "hf", "model": "t"}}}, "m.yaml").method("ar"), 1
    )
    assert resident.with_beside_args(hf) == (hf, {})  # a backend without beside_args: unchanged


def test_a_run_with_a_twin_records_its_control_and_says_what_it_read(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resident_project(pytester, monkeypatch)  # ar, its twin and sd on a launched-server backend
    res = pytester.runpytest("benches", "--benchmark-json", "out.json")
    res.assert_outcomes(passed=6)
    spec = json.loads((pytester.path / "out.json").read_text())["specbench"]
    assert spec["controls"] == {"twin": "ar"}
    assert [r["control_cell"] for r in spec["control"]] == ["twin-tp1-c1-out8", "twin-tp1-c2-out8"]
    assert all(r["pairing"] == "interleaved" for r in spec["control"])
    res.stdout.fnmatch_lines(["*A/A control twin-tp1-c1-out8: x* against ar: *"])


def _race_matrix() -> Any:
    hf = {"backend": "sglang-server", "model": "m"}
    doc = {
        "models": {"m": "embedded:tiny"},
        "methods": {"ar": hf, "twin": hf, "ng": {**hf, "speculative": {"algorithm": "ngram"}}},
        "workloads": {"throughput": {"concurrency": [1, 4], "output_tokens": [8], "rounds": 6, "warmup": 0}},
    }
    return parse(doc, "m.yaml")


def _record(race: Any, cell: Any, speedup: float) -> None:
    """Six rounds of ``cell`` at ``speedup`` x the 100 tok/s of the baseline beside it."""
    own = [100.0 * speedup * f for f in (1.0, 1.02, 0.98, 1.01, 0.99, 1.0)]
    result = {
        "cell_id": cell.id,
        "group": cell.group.id,
        "params": cell.params(),
        "metrics": {"round_tokens_per_s": own, "reference": {"round_tokens_per_s": [100.0] * 6}},
        "extra_info": {},
        "round_times": [1.0] * 6,
    }
    race.record(cell, result)


def test_a_race_never_drops_within_the_instance_effect_its_control_established() -> None:
    from pytest_specbench.deciding.race import Race
    from pytest_specbench.stats.sequential import Looks

    m = _race_matrix()
    cells = {(c.method.name, c.concurrency): c for c in m.cells()}
    ng = cells[("ng", 1)]
    own = [0.80, 0.82, 0.79, 0.81, 0.80, 0.80]  # x0.80 of the baseline beside it, every round
    looks = Looks(3, 6, 1)
    plain = Race(m)
    # no pair of starts measured yet: nothing bounds what two starts differ by, so no drop
    assert plain.vs_leader(ng, own, True, looks) is None
    race = Race(m)
    assert race.races(cells[("twin", 1)]) is False  # a control never races: it runs at every shape
    _record(race, cells[("twin", 1)], 1.30)  # the twin read x1.30: the baseline's instance is slow
    iv, info = race.vs_leader(ng, own, True, looks)
    assert info["control_band"] > 1.25 and iv.hi > 1.0  # x0.80 lies within the instance effect: kept
    other = Race(m)
    _record(other, cells[("twin", 4)], 1.30)  # a control at another shape says nothing here
    iv, info = other.vs_leader(ng, own, True, looks)
    assert "control_band" not in info  # its band is its shape's
    assert info["instance_sd"] > 0.15 and iv.hi > 1.0  # but the start level it read holds everywhere


def test_under_the_race_the_control_runs_before_every_member(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed after the member, the twin still runs first: a member's drop needs what it reads."""
    from test_resident import MATRIX, _resident_project

    _resident_project(pytester, monkeypatch)
    swapped = MATRIX.replace("  twin: {backend: sglang-server, model: t}\n", "")
    swapped = swapped.replace("workloads:", "  twin: {backend: sglang-server, model: t}\nworkloads:")
    (pytester.path / "benches" / "specbench.yaml").write_text(swapped)
    res = pytester.runpytest("benches", "--benchmark-json", "out.json", "--specbench-race")
    res.assert_outcomes(passed=6)
    spec = json.loads((pytester.path / "out.json").read_text())["specbench"]
    starts = [e["group"] for e in spec["engine_groups"] if e.get("ok")]
    assert starts.index("twin-tp1") < starts.index("sd-tp1"), starts  # matrix order: ar, sd, twin
