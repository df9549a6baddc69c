"""The raced plan as the run does it: a carried job's worker waits (no GPUs held) until the
decision (schedule.Job.not_before_s), and the expected figure stops at its first look every cell
the caller says settles (deciding/raced_plan.py), worked out by hand."""

from __future__ import annotations

from pytest_specbench.deciding import raced_plan
from pytest_specbench.matrix.cells import Cell
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import schedule


def test_a_job_held_until_the_decision_asks_for_gpus_only_then() -> None:
    jobs = [
        schedule.Job("decide", 1, 10.0),
        schedule.Job("carried", 1, 5.0, not_before_s=20.0),
        schedule.Job("other", 1, 30.0),
    ]
    sched = schedule.pack(jobs, (0, 1), 2)
    by = {s.group: s for s in sched.slots}
    # worker 0 takes decide (GPU 0, 0-10); worker 1 takes carried and holds it, no GPU, until 20;
    # at 10 worker 0 takes other (GPU 0, 10-40); at 20 carried gets GPU 1 (20-25)
    assert (by["carried"].ready_s, by["carried"].start_s, by["carried"].end_s) == (20.0, 20.0, 25.0)
    assert by["carried"].gpus == (1,) and (by["other"].start_s, by["other"].gpus) == (10.0, (0,))
    assert sched.makespan_s == 40.0


def test_the_expected_figure_stops_settled_cells_at_their_first_look() -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "t"},
            "ng": {"backend": "hf", "model": "t", "speculative": {"algorithm": "ngram"}},
        },
        "workloads": {"throughput": {"concurrency": [1, 4], "rounds": 5, "warmup": 1}},
    }
    cells = parse(doc, "m.yaml").cells()

    def secs(c: Cell) -> float:
        return 70.0

    # warm-up 1 (+1 agreeing round) and 5 rounds; the first look at 3: (2 + 3) / (2 + 5) of 70 s
    assert raced_plan.first_look_share(cells[0]) == 5 / 7
    full, expected, worst = raced_plan.variants(cells, secs, {}, lambda c: c.method.name == "ar")
    assert sum(full.cells.values()) == 4 * 70.0
    assert sum(expected.cells.values()) == 2 * 50.0 + 2 * 70.0  # ar's two settle, ng's two run on
    assert sum(worst.cells.values()) == 4 * 70.0  # never stops early
    _, none, _ = raced_plan.variants(cells, secs, {})
    assert sum(none.cells.values()) == 4 * 70.0


def test_the_expected_figure_skips_the_cells_the_caller_says_the_race_skips() -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "t"},
            "ng": {"backend": "hf", "model": "t", "speculative": {"algorithm": "ngram"}},
        },
        "workloads": {"throughput": {"concurrency": [1, 4], "rounds": 5, "warmup": 1}},
    }
    cells = parse(doc, "m.yaml").cells()

    def skipped(c: Cell) -> bool:
        return c.method.name == "ng" and c.concurrency == 4

    full, expected, worst = raced_plan.variants(cells, lambda c: 70.0, {}, None, skipped)
    assert sorted(expected.cells) == sorted(c.id for c in cells if not skipped(c))
    assert len(worst.cells) == len(full.cells) == 4  # the worst case predicts no skip


def test_settings_the_decision_cannot_separate_are_all_carried_in_the_expected_figure() -> None:
    doc = {
        "models": {"t": "embedded:tiny"},
        "methods": {
            "ar": {"backend": "hf", "model": "t"},
            "ng": {
                "backend": "hf",
                "model": "t",
                "speculative": {"algorithm": "ngram", "num_draft_tokens": [2, 4, 8]},
                "tune": {"at": {"concurrency": 1}, "keep": 1},
            },
        },
        "workloads": {"throughput": {"concurrency": [1, 2, 4]}},
    }
    matrix = parse(doc, "m.yaml")
    cells = matrix.cells()
    tuned = raced_plan.tunes(matrix)
    d = {"ng-d2": 2, "ng-d4": 4, "ng-d8": 8, "ar": 1}

    def secs(c: Cell) -> float:
        return float(d[c.method.name] * c.concurrency)

    # d2 and d4 not separable: both carried to c2/c4 (expected); the worst case adds the most
    # expensive, d8
    _, expected, worst = raced_plan.variants(cells, secs, tuned, carry=lambda t: {"ng-d2", "ng-d4"})
    later = {c.method.name for c in cells if c.concurrency > 1 and c.id in expected.cells}
    assert later == {"ar", "ng-d2", "ng-d4"}
    assert sum(expected.cells.values()) == 7 + 14 + (2 + 4) * 6
    assert {c.method.name for c in cells if c.concurrency > 1 and c.id in worst.cells} == later | {"ng-d8"}


def test_only_a_jobs_tail_waits_for_the_decision() -> None:
    # a family of 30 s whose tuned members (its last 10 s) wait for the decision at 50 s: its
    # other groups run at once (0-20), its tail from 50 to 60, its GPU held throughout
    job = schedule.Job("family", 1, 30.0, not_before_s=50.0, tail_s=10.0)
    (slot,) = schedule.pack([job], (0,), 1).slots
    assert (slot.start_s, slot.end_s) == (0.0, 60.0)
    # a decision already made by then costs nothing
    (slot,) = schedule.pack([schedule.Job("family", 1, 30.0, not_before_s=15.0, tail_s=10.0)], (0,), 1).slots
    assert (slot.start_s, slot.end_s) == (0.0, 30.0)
