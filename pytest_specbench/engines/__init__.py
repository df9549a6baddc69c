"""Backend registry: name -> engine factory, plus what each backend can run.

Factories are given as "module:attr" strings so that registering (and validating a
matrix against) a backend never imports torch or sglang. Tests and users add backends with
:func:`register_backend` (e.g. from a conftest.py) or replace engine creation altogether
with the ``pytest_specbench_make_engine`` hook.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..matrix import EngineGroup


@dataclass(frozen=True)
class Backend:
    name: str
    factory: str | Callable[[EngineGroup], Any]
    max_tp: int | None = None  # None: any TP the GPUs allow
    algorithms: tuple[str, ...] | None = None  # speculative algorithms it implements; None: any
    gpu: bool = True  # runs on GPUs: the planner sizes its groups against GPU memory

    def skip_reason(self, group: EngineGroup) -> str | None:
        """Why this backend cannot run ``group`` at all (checked at collection, no imports)."""
        if self.max_tp is not None and group.tp > self.max_tp:
            return (
                f"{group.id}: backend {self.name!r} runs at most TP={self.max_tp}; "
                f"TP={group.tp} needs a multi-GPU backend such as sglang"
            )
        spec = group.method.speculative
        if spec and self.algorithms is not None and spec.algorithm not in self.algorithms:
            return (
                f"{group.id}: backend {self.name!r} implements {', '.join(self.algorithms)}; "
                f"{spec.algorithm!r} needs the sglang backend"
            )
        return None

    def create(self, group: EngineGroup) -> Any:
        f = self.factory
        if isinstance(f, str):
            mod, _, attr = f.partition(":")
            f = getattr(importlib.import_module(mod), attr)
        return f(group)


BACKENDS: dict[str, Backend] = {}


def register_backend(
    name: str,
    factory: str | Callable[[EngineGroup], Any],
    *,
    max_tp: int | None = None,
    algorithms: tuple[str, ...] | None = None,
    gpu: bool = True,
) -> None:
    BACKENDS[name] = Backend(name, factory, max_tp, algorithms, gpu)


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"backend {name!r} is not registered; registered: {', '.join(BACKENDS)}") from None


register_backend(
    "hf", "pytest_specbench.engines.hf:HFEngine", max_tp=1, algorithms=("ngram", "draft"), gpu=False
)
register_backend("sglang", "pytest_specbench.engines.sglang:SGLangEngine")
