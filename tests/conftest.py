import gc
import importlib.util

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """What the embedded model imports, imported once before any inner pytest run: an
    in-process inner run (pytester.runpytest) restores sys.modules when it ends, which drops a
    module first imported inside it, and importing it again in this process then fails (numpy:
    "cannot load module more than once per process"; torch's operator registrations: "Only a
    single TORCH_LIBRARY can be used"). Which test first starts the embedded model depends on
    how xdist deals the tests, so every worker imports it all up front."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        return
    for name in (
        "numpy",
        "torch",
        "torch.distributed._functional_collectives",
        "transformers",
        "transformers.models.qwen3.modeling_qwen3",
    ):
        importlib.import_module(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: F401


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end runs marked slow first, the rest after them in their own order. Under -n the
    workers take the tests one at a time in this order (this repository's benches/specbench.yaml
    is the session's default matrix, so the plugin's scheduler deals them, and it keeps the
    collection's order for items that are not cells): the long runs start first and the short
    tests fill in at the end, so the two workers finish together instead of one running a long
    test at the end alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs (pytester) are not xdist workers, also when this suite runs under -n."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # a GPU host's CUDA_VISIBLE_DEVICES would restrict the fake GPU pools of the inner runs; set
    # then removed, so whatever an inner run pins is undone after each test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")


class _HeapStaysFrozen:
    """The gc module as the plugin's rounds (workloads/rounds.py) see it in this process, but for
    unfreeze(): there it puts the whole suite's heap back in the collector at each cell's start,
    and the cell's first collection walks it (torch's and transformers' objects included: 0.05 to
    0.3 s a cell, about 70 s of a run of the suite under -n 2)."""

    def __getattr__(self, name: str) -> object:
        return getattr(gc, name)

    def unfreeze(self) -> None:
        pass


# a full collection of the worker's heap when this many objects more than after the last one are
# frozen (the suite's workers hold about 0.4-0.5 M; two or three such collections a run)
REFREEZE_AFTER = 300_000
_refreeze_at = [0]


@pytest.fixture(autouse=True)
def _earlier_objects_out_of_the_collector() -> None:
    """The plugin collects garbage before every timed round (gc.collect). In this long-lived
    process that walked every object the suite had made so far (pytest's, earlier inner runs',
    torch's): about 0.2 s a round, most of the suite's time. What exists before a test is
    frozen out of the collector, so a round's collection walks what the test itself made, as
    in a benchmark process of its own; the plugin's unfreeze() at a cell's start leaves it
    frozen (_HeapStaysFrozen), and the garbage frozen with it is collected once it has grown by
    REFREEZE_AFTER objects."""
    from pytest_specbench.workloads import rounds

    rounds.gc = _HeapStaysFrozen()  # type: ignore[assignment]
    if gc.get_freeze_count() > _refreeze_at[0]:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _refreeze_at[0] = gc.get_freeze_count() + REFREEZE_AFTER
    gc.freeze()


@pytest.fixture(autouse=True)
def _backends_as_they_were() -> object:
    """An inner run's conftest that registers a fake under a real backend's name (a launched
    server registered as "sglang-server" with gpu=False) writes into this process's registry,
    which the inner run's sys.modules restore does not undo: put it back after each test, so a
    later test in the same worker plans the real backends."""
    from pytest_specbench.engines import BACKENDS

    saved = dict(BACKENDS)
    yield
    BACKENDS.clear()
    BACKENDS.update(saved)
