"""Hooks that name their GPUs (``hooks: {gpus: [0], ...}``): they run only for the groups that
lease one of them, those GPUs go only to starts that cannot run without them, and those starts
are handed out last, so they run back to back: a service living on GPU 0 is down once, for the
window the plan prints."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specbench.matrix.checks import MatrixError
from pytest_specbench.matrix.schema import parse
from pytest_specbench.planning import schedule
from pytest_specbench.plugin import group_hooks, hook_windows, packed_schedule, xdist_policy


def _matrix(hooks: Any) -> Any:
    return parse(
        {
            "models": {"m": "/nonexistent/model"},
            "methods": {"ar": {"backend": "sglang-server", "model": "m"}},
            "tp": [1, 8],
            "workloads": {"throughput": {"concurrency": [1]}},
            "include": [{"hooks": hooks}],
        },
        "m.yaml",
    )


def test_a_reserved_gpu_goes_only_to_a_start_that_cannot_run_without_it() -> None:
    # pool 0-7, GPU 0 reserved: a TP1 start gets GPU 1, a TP4 start 1-4 (never 0), a TP8 start all
    assert schedule.grant(range(8), [("a", 1)], (0,), 8) == {"a": (1,)}
    assert schedule.grant(range(8), [("a", 4), ("b", 4)], (0,), 8) == {"a": (1, 2, 3, 4)}
    assert schedule.grant(range(8), [("w", 8)], (0,), 8) == {"w": tuple(range(8))}
    assert schedule.grant([0, 5], [("a", 1)], (0,), 8) == {"a": (5,)}
    assert schedule.grant([0], [("a", 1)], (0,), 8) == {}  # waits rather than take GPU 0
    assert schedule.grant(range(8), [("a", 1)]) == {"a": (0,)}  # nothing reserved: lowest first


def test_the_starts_that_need_a_hooked_gpu_run_last_in_one_window() -> None:
    jobs = [
        schedule.Job("w1", 8, 400.0),
        schedule.Job("a", 1, 300.0),
        schedule.Job("w2", 8, 50.0),
        schedule.Job("b", 4, 200.0),
    ]
    order = schedule.hooked_last(schedule.longest_first(jobs), tuple(range(8)), (0,))
    assert [j.group for j in order] == ["a", "b", "w1", "w2"]
    sched = schedule.pack(order, tuple(range(8)), 4, (0,))
    by = {s.group: s for s in sched.slots}
    # a on GPU 1 (0-300), b on 2-5 (0-200); w1 waits for every GPU, then w2 right after it
    assert (by["a"].gpus, by["b"].gpus) == ((1,), (2, 3, 4, 5))
    spans = [(by[g].start_s, by[g].end_s) for g in ("w1", "w2")]
    assert spans == [(300.0, 700.0), (700.0, 750.0)]
    held = hook_windows.windows([(s.start_s, s.end_s) for s in sched.slots if 0 in s.gpus])
    assert held == [(300.0, 750.0)]  # GPU 0: one window of 450 s, the two TP8 starts
    # longest first without the reservation: w1 (0-400), then a on GPU 0 (400-700), then w2
    # (700-750): GPU 0 is held the whole 750 s
    free = schedule.pack(schedule.longest_first(jobs), tuple(range(8)), 4)
    assert hook_windows.windows([(s.start_s, s.end_s) for s in free.slots if 0 in s.gpus]) == [(0.0, 750.0)]


def test_the_xdist_order_hands_the_hooked_groups_out_last() -> None:
    m = _matrix({"gpus": [0], "before_group": "true"})
    st = SimpleNamespace(matrix=m, gpus=tuple(range(8)))
    js = packed_schedule.Jobs(
        [schedule.Job("ar-tp8", 8, 500.0, 8), schedule.Job("ar-tp1", 1, 100.0, 1)], 0, {}
    )
    assert xdist_policy.group_order(js, [], st) == ["ar-tp1", "ar-tp8"]  # type: ignore[arg-type]
    assert xdist_policy.group_order(js, []) == ["ar-tp8", "ar-tp1"]  # no hooked GPU: longest first


def test_hooks_with_gpus_run_only_for_the_groups_that_lease_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECBENCH_LOG_DIR", str(tmp_path))
    marker = tmp_path / "ran.txt"
    cmd = f"echo $SPECBENCH_GROUP >> {marker}"
    m = _matrix({"gpus": [0], "before_group": cmd})
    g = {x.id: x for x in m.groups()}
    assert dict(g["ar-tp1"].method.hooks) == {"gpus": "0", "before_group": cmd}
    assert group_hooks.hooked_gpus(m.groups()) == (0,)
    group_hooks.before_group(g["ar-tp1"], (3,), {})  # GPU 3: not the service's
    group_hooks.before_group(g["ar-tp8"], tuple(range(8)), {})
    group_hooks.before_group(g["ar-tp1"], (), {})  # no lease (GPUs unknown): runs, it cannot tell
    assert marker.read_text().split() == ["ar-tp8", "ar-tp1"]


def test_a_hooks_gpus_that_are_not_gpu_indices_are_refused() -> None:
    why = r"m.yaml: include\[0\].hooks.gpus: expected GPU indices \(NVML's, e.g. \[0\]\); got 'zero'"
    with pytest.raises(MatrixError, match=why):
        _matrix({"gpus": "zero", "before_group": "true"})


def test_in_one_process_the_hooked_groups_items_run_last() -> None:
    m = _matrix({"gpus": [0], "before_group": "true"})
    cells = {c.id: c for c in m.cells()}
    items = ["ar-tp8-c1-out64", "ar-tp1-c1-out64", "not-a-cell"]
    st = SimpleNamespace(matrix=m, gpus=tuple(range(8)))
    hook_windows.hooked_window_last(items, cells.get, st)  # type: ignore[arg-type]
    assert items == ["ar-tp1-c1-out64", "not-a-cell", "ar-tp8-c1-out64"]
    # hooks without gpus: the order stays
    plain = _matrix({"before_group": "true"})
    items = ["ar-tp8-c1-out64", "ar-tp1-c1-out64"]
    st = SimpleNamespace(matrix=plain, gpus=tuple(range(8)))
    hook_windows.hooked_window_last(items, {c.id: c for c in plain.cells()}.get, st)  # type: ignore[arg-type]
    assert items == ["ar-tp8-c1-out64", "ar-tp1-c1-out64"]


def test_the_gpu_leases_keep_a_hooked_gpu_for_the_starts_that_need_it(tmp_path: Path) -> None:
    from pytest_specbench.gpus.leases import LeasePool

    pool = LeasePool.create(tmp_path, tuple(range(8)))
    pool.set_order([], {}, (0,))
    small = pool.acquire("ar-tp1", 1)
    four = pool.acquire("ar-tp4", 4)
    assert (small.gpus, four.gpus) == ((1,), (2, 3, 4, 5))
    pool.release(small)
    pool.release(four)
    assert pool.acquire("ar-tp8", 8).gpus == tuple(range(8))
