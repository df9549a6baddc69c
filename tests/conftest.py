import gc

import pytest


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs (pytester) are not xdist workers, also when this suite runs under -n."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # a GPU host's CUDA_VISIBLE_DEVICES would restrict the fake GPU pools of the inner runs; set
    # then removed, so whatever an inner run pins is undone after each test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def _earlier_objects_out_of_the_collector() -> None:
    """The plugin collects garbage before every timed round (gc.collect). In this long-lived
    process that walked every object the suite had made so far (pytest's, earlier inner runs',
    torch's): about 0.2 s a round, most of the suite's time. What exists before a test is
    frozen out of the collector, so a round's collection walks what the test itself made, as
    in a benchmark process of its own."""
    gc.freeze()
