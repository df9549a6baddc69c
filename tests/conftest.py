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


@pytest.fixture(autouse=True)
def _earlier_objects_out_of_the_collector() -> None:
    """The plugin collects garbage before every timed round (gc.collect). In this long-lived
    process that walked every object the suite had made so far (pytest's, earlier inner runs',
    torch's): about 0.2 s a round, most of the suite's time. What exists before a test is
    frozen out of the collector, so a round's collection walks what the test itself made, as
    in a benchmark process of its own."""
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
