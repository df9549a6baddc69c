"""pytest-specbench: a pytest plugin that benchmarks speculative decoding.

The package is layered, lowest first; a subpackage imports only from itself and the ones listed
before it (lower layers), never from one after it (tests/test_imports.py enforces this;
docs/architecture.md has the plan):

1. ``inputs``    what cells read besides the matrix: exact-length prompts, agentic scenarios,
                 category questions, the embedded model's files. Imports nothing of the package.
2. ``report``    the numbers: a cell's metrics from its records, paired comparisons, the decision
                 view, the results document's format and tables, the old/new gate, plots,
                 ``python -m pytest_specbench.report``; works from a results JSON alone.
                 Never imports pytest, an engine or the plugin's state.
3. ``matrix``    the YAML schema and the frozen cells and engine groups it expands into.
4. ``planning``  model shapes, SGLang's memory split, the time model, feasibility, the packed
                 schedule and the plan's text; no engine starts.
5. ``gpus``      the GPU inventory (NVML) and the leases shared by xdist workers.
6. ``engines``   the engine protocol, the backends (hf with the embedded model, sglang,
                 sglang-server, http and its client) and the running cell's progress counters.
7. ``workloads`` the workload kinds: which requests a cell sends, when, and what it records.
8. ``plugin``    the pytest side: hooks, fixtures, options, per-run state, the cell runner, the
                 results document rewritten after each cell, xdist scheduling. The only
                 subpackage that imports pytest.
"""
