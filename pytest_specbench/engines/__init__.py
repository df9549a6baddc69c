"""Backend registry: name -> engine factory, plus what each backend can run.

Factories are given as "module:attr" strings so that registering (and validating a
matrix against) a backend never imports torch or sglang. Tests and users add backends with
:func:`register_backend` (e.g. from a conftest.py) or replace engine creation altogether
with the ``pytest_specbench_make_engine`` hook.

The engines subpackage: the engine protocol and request helpers (``base``), the backends (``hf``
with the embedded model, ``sglang`` in process, ``server``: sglang-server and http, with its
client ``httpclient`` and its worker processes ``clientpool`` / ``clientworker``) and the
running cell's progress counters (``progress``). May import ``inputs``, ``stats``, ``matrix``,
``planning`` and ``gpus``; no pytest.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..matrix.algorithms import hf_algorithms
from ..matrix.cells import EngineGroup


@dataclass(frozen=True)
class Backend:
    name: str
    factory: str | Callable[[EngineGroup], Any]
    max_tp: int | None = None  # None: any TP the GPUs allow
    # speculative algorithms it implements, or a function that names them (the registry's view,
    # matrix/algorithms.py: the hf backend's are the declarations with an hf drafter); None: any
    algorithms: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    gpu: bool = True  # runs on GPUs: the planner sizes its groups against GPU memory
    local_models: bool = False  # model paths must exist here (or be embedded:/hub ids) before a start
    external: bool = False  # an endpoint the plugin does not start: no lifecycle, GPUs or memory plan
    engine_args: bool = True  # takes a method's engine_args (False: giving any is a usage error)
    needs: tuple[tuple[str, str], ...] = ()  # (module, how to install it) a run needs importable
    # engines live side by side in one process (in-process, CPU, cheap): a cell's baseline runs
    # as a second engine, its rounds interleaved with the cell's (workloads/rounds.py)
    interleave: bool = False
    # how it forces a speculative method's accept length: "env" (SGLANG_SIMULATE_ACC_LEN for the
    # engine's processes), "engine" (its own verify), None (it cannot: refused)
    forced_accept: str | None = None
    # a baseline on it that is not interleaved runs with the groups compared with it, then once
    # more for one round (the drift sentinel, plugin/sentinel.py); interleaving backends get it
    # with --specbench-no-interleave
    sentinel: bool = False
    # a GPU backend whose baseline engine can run beside a member's on the member's own GPUs (a
    # launched server): rounds interleave as on the CPU, each engine with half the memory
    # (plugin/resident.py); --specbench-no-interleave measures apart with sentinels instead
    resident: bool = False
    # engine args an engine gets while another shares its GPUs (a resident baseline and its
    # member), unless its method sets them: sglang-server's sleep_on_idle, so the idle server
    # waits on its sockets instead of spinning a CPU core at 100 % beside the busy one
    beside_args: tuple[tuple[str, Any], ...] = ()

    def skip_reason(self, group: EngineGroup) -> str | None:
        """Why this backend cannot run ``group`` at this TP size (checked at collection)."""
        if self.max_tp is not None and group.tp > self.max_tp:
            return (
                f"{group.id}: backend {self.name!r} runs at most TP={self.max_tp}; "
                f"TP={group.tp} needs a multi-GPU backend such as sglang"
            )
        return None

    def refusal(self, method: Any, sends: bool = True) -> str | None:
        """Why this backend cannot run ``method`` at all (a usage error before any start);
        ``sends`` False (a plan, a collection): what only sending requests needs is not checked."""
        spec = method.speculative
        if spec and spec.simulate_accept_length is not None and self.forced_accept is None:
            return (
                f"methods.{method.sweep or method.name}: backend {self.name!r} "
                "cannot force an accept length "
                + (
                    "(a server the plugin does not start: SGLANG_SIMULATE_ACC_LEN is set where it was "
                    "started, and its cells would not be labelled as forced); use sglang-server"
                    if self.external
                    else "; forced acceptance runs on the sglang, sglang-server and hf backends"
                )
            )
        algorithms = self.algorithms() if callable(self.algorithms) else self.algorithms
        if spec and algorithms is not None and spec.algorithm not in algorithms:
            return (
                f"methods.{method.name}: backend {self.name!r} implements speculative algorithms "
                f"{', '.join(algorithms)}; {spec.algorithm!r} needs the sglang backend"
            )
        for module, install in self.needs if sends else ():
            if importlib.util.find_spec(module) is None:
                return (
                    f"methods.{method.name}: backend {self.name!r} needs {module}, which is not "
                    f"installed: {install}"
                )
        if method.engine_args and not self.engine_args:
            return (
                f"methods.{method.name}.engine_args: backend {self.name!r} takes no engine arguments "
                f"(given: {', '.join(k for k, _ in method.engine_args)}); remove them, or use the "
                "sglang backend"
            )
        key_env = getattr(method, "api_key_env", None)
        if key_env and sends and not os.environ.get(key_env):
            return (
                f"methods.{method.name}.api_key_env: the environment variable {key_env!r} is not set "
                "(or empty); export the API key in it, or remove api_key_env for a server without one"
            )
        if self.local_models:
            for role, model in (("model", method.model), ("draft_model", method.draft_model)):
                why = model_path_problem(model.path) if model is not None else None
                if why:
                    return f"methods.{method.name}.{role} (models.{model.name}): {why}"
        return None

    def create(self, group: EngineGroup) -> Any:
        f = self.factory
        if isinstance(f, str):
            mod, _, attr = f.partition(":")
            f = getattr(importlib.import_module(mod), attr)
        return f(group)


def model_path_problem(path: str) -> str | None:
    """Why a model path cannot be loaded: a path (absolute, ./, ../, ~) that does not exist, or a
    directory without config.json. Anything else ("org/name") is taken for a hub id."""
    from pathlib import Path

    if path.startswith("embedded:"):
        return None
    p = Path(path).expanduser()
    if p.exists():
        if p.is_dir() and not (p / "config.json").is_file():
            return f"{path!r} has no config.json; give the model's directory"
        return None
    if path.startswith(("/", "./", "../", "~")):
        return (
            f"{path!r} does not exist; give a model directory with config.json, "
            "embedded:tiny / embedded:tiny-draft, or a hub id (org/name)"
        )
    return None


BACKENDS: dict[str, Backend] = {}


def register_backend(
    name: str,
    factory: str | Callable[[EngineGroup], Any],
    *,
    max_tp: int | None = None,
    algorithms: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None,
    gpu: bool = True,
    local_models: bool = False,
    external: bool = False,
    engine_args: bool = True,
    needs: tuple[tuple[str, str], ...] = (),
    interleave: bool = False,
    forced_accept: str | None = None,
    sentinel: bool = False,
    resident: bool = False,
    beside_args: tuple[tuple[str, Any], ...] = (),
) -> None:
    BACKENDS[name] = Backend(
        name,
        factory,
        max_tp,
        algorithms,
        gpu,
        local_models,
        external,
        engine_args,
        needs,
        interleave,
        forced_accept,
        sentinel,
        resident,
        beside_args,
    )


def forced_env(method: Any) -> dict[str, str]:
    """The variables that force a method's accept length on a backend that forces it through
    the environment (SGLang: read once per engine process, so one engine start per value)."""
    spec = method.speculative
    b = BACKENDS.get(method.backend)
    if spec is None or spec.simulate_accept_length is None or b is None or b.forced_accept != "env":
        return {}
    env = {"SGLANG_SIMULATE_ACC_LEN": f"{spec.simulate_accept_length:g}"}
    if spec.simulate_accept_method:
        env["SGLANG_SIMULATE_ACC_METHOD"] = spec.simulate_accept_method
    return env


def separate_instances(name: str) -> bool:
    """Whether a backend's engines are instances of their own whose speed can differ between two
    starts of one configuration (a launched server, a GPU engine): where a twin of the baseline
    is an A/A control (Matrix.controls). Two engines of one process on the CPU are not."""
    b = BACKENDS.get(name)
    return b is not None and (b.resident or (b.gpu and not b.external))


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"backend {name!r} is not registered; registered: {', '.join(BACKENDS)}") from None


register_backend(
    "hf",
    "pytest_specbench.engines.hf:HFEngine",
    max_tp=1,
    algorithms=hf_algorithms,  # ngram and draft, and any algorithm declared with an hf drafter
    gpu=False,
    local_models=True,
    engine_args=False,  # the embedded model runs in float32 through transformers, nothing to set
    interleave=True,
    forced_accept="engine",
)
SGLANG = ("sglang", 'pip install -e ".[sglang]" on a GPU host (offline: the wheelhouse of docs/sglang.md)')
AIOHTTP = ("aiohttp", 'pip install -e ".[server]"')
register_backend(
    "sglang",
    "pytest_specbench.engines.sglang:SGLangEngine",
    local_models=True,
    needs=(SGLANG,),
    forced_accept="env",
    sentinel=True,
)
# one `python -m sglang.launch_server` per group, driven over HTTP (engines/server.py)
register_backend(
    "sglang-server",
    "pytest_specbench.engines.server:SGLangServerEngine",
    local_models=True,
    needs=(AIOHTTP,),  # SGLang is the launched server's (its log says when it cannot import it)
    forced_accept="env",
    sentinel=True,
    resident=True,  # AR's server beside each member's on its GPUs, rounds interleaved
    beside_args=(("sleep_on_idle", True),),  # an idle SGLang scheduler otherwise spins a core
)
# an endpoint the plugin does not start (SGLang, vLLM or any OpenAI-compatible server)
register_backend(
    "http",
    "pytest_specbench.engines.server:HTTPEngine",
    gpu=False,
    local_models=True,
    external=True,
    needs=(AIOHTTP,),
)
