"""The run's GPU pool and its leases (gpus/leases.py).

- The pool is chosen once, by the xdist controller (or the single pytest process), from one NVML
  read before any engine starts: a busy GPU (someone else's process) enters it only where the
  matrix's hooks stop its service or --specbench-allow-busy-gpus names it, flagged; a busy GPU
  of an explicit pool is refused otherwise (busy_gpus.py). A run
  directory holds its lease file; workers get its path in ``workerinput`` (``LEASE_DIR_KEY``).
- Each engine start of a GPU backend (``Backend.gpu``) leases ``tp`` GPUs of the pool and sets
  ``CUDA_VISIBLE_DEVICES`` to them (state.py), so TP1, TP4 and TP8 groups share the GPUs under
  ``-n K``; a cell needing more GPUs than the pool has is skipped at collection (skip_reasons.py).
- A group hook's service may live on GPUs of the pool (``hooks: {gpus: [...]}``): those are
  reserved for the starts that need them (``reserved_gpus``).
Without NVML and without ``--specbench-gpus`` the GPUs are unknown: nothing is leased, pinned or
skipped for its TP size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from .state import SpecbenchState
from .xdist_sched import workers

LEASE_DIR_KEY = "specbench_lease_dir"  # workerinput: the controller's lease directory
LEASE_LOG = "gpu-leases.jsonl"  # copied into --specbench-log-dir at the end of the run


def setup_pool(config: pytest.Config, st: SpecbenchState, inv: list[Any]) -> None:
    """Choose the run's GPUs and create its lease directory (controller or single process), or
    open the controller's (xdist worker). Runs in pytest_configure, before any engine starts."""
    from ..gpus import inventory as gpus
    from ..gpus.leases import LeasePool

    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        d = workerinput.get(LEASE_DIR_KEY)
        if d:
            st.leases = LeasePool(d)
            info = st.leases.info()
            st.gpus = tuple(info["pool"])
            st.gpu_unavailable = list(info["notes"])
            st.gpu_baseline = {int(k): v for k, v in info["baseline_mib"].items()}
        return
    explicit = config.getoption("specbench_gpus")
    source = f"--specbench-gpus {','.join(map(str, explicit))}" if explicit is not None else None
    env = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if explicit is None and env and all(x.strip().isdigit() for x in env.split(",")):
        # the user's own restriction: the pool is those GPUs (NVML indices), never others
        explicit = tuple(int(x) for x in env.split(","))
        source = f"CUDA_VISIBLE_DEVICES={env}"
    if not inv and explicit is None:  # no NVML: the GPUs are unknown
        if workers(config) > 1 and not config.getoption("specbench_plan"):
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    "GPU backends under -n without NVML (nvidia-ml-py) or --specbench-gpus: no GPU "
                    "is leased, every worker's engines see all GPUs and may share GPU 0; install "
                    "nvidia-ml-py or give --specbench-gpus 0,1,..."
                ),
                stacklevel=2,
            )
        return
    try:
        chosen, notes = gpus.choose(inv, explicit)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    from .busy_gpus import admit

    chosen = admit(config, st, inv, chosen, source)  # a busy GPU: refused, or leased and flagged
    notes = [n for n in notes if not any(n == f"not using {g.busy_reason}" for g in inv if g.index in chosen)]
    st.gpus = chosen
    st.gpu_notes = notes
    st.gpu_unavailable = gpus.left_out(inv, chosen, explicit)
    st.gpu_baseline = {g.index: g.memory_used_mib for g in inv if g.index in chosen}
    if config.getoption("specbench_plan"):
        return  # the plan starts nothing
    run_dir = tempfile.mkdtemp(prefix="specbench-gpu-leases-")
    st.leases = LeasePool.create(run_dir, chosen, st.gpu_unavailable, st.gpu_baseline)
    st.lease_dir_owned = True
    if reserved_gpus(st):  # a hooked GPU only for starts that need it, in one process too
        st.leases.set_order([], {}, reserved_gpus(st))


def finish_pool(config: pytest.Config, st: SpecbenchState) -> None:
    """At unconfigure, by the process that created the lease directory: keep the lease log in
    --specbench-log-dir (gpu-leases.jsonl), remove the directory."""
    if st.leases is None or not st.lease_dir_owned:
        return
    log = st.leases.log_path
    if log.exists():
        dest = Path(config.getoption("specbench_log_dir"))
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, dest / LEASE_LOG)
    shutil.rmtree(st.leases.dir, ignore_errors=True)
    st.lease_dir_owned = False


def reserved_gpus(st: SpecbenchState) -> tuple[int, ...]:
    """The pool's GPUs a group hook's service lives on (``hooks: {gpus: [...]}``)."""
    if st.matrix is None or not st.gpus:
        return ()
    from .group_hooks import hooked_gpus

    return hooked_gpus(st.matrix.groups(), tuple(st.gpus))
