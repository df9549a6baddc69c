"""pytest-specbench: a pytest plugin that benchmarks speculative decoding.

The package is layered, lowest first; a subpackage imports only from itself and the ones listed
before it (lower layers), never from one after it (tests/test_imports.py enforces this;
docs/architecture.md has the plan):

1. ``inputs``    what cells read besides the matrix: exact-length prompts, agentic scenarios,
                 category questions, the embedded model's files. Imports nothing of the package.
2. ``stats``     the statistics a run computes while it measures and the report recomputes: the
                 request record, a cell's metrics from its records, quantiles, paired
                 comparisons, sequential boundaries, the gate's tests, drift's and brackets'
                 bands. No pytest, no engine, no I/O.
3. ``matrix``    the YAML schema and the frozen cells and engine groups it expands into.
4. ``planning``  model shapes, SGLang's memory split, the time model, feasibility, the packed
                 schedule and the plan's text; no engine starts.
5. ``gpus``      the GPU inventory (NVML) and the leases shared by xdist workers.
6. ``engines``   the engine protocol, the backends (hf with the embedded model, sglang,
                 sglang-server, http and its client) and the running cell's progress counters.
7. ``deciding``  the race, tuning, families and the stopping protocol: what the run decides while
                 it measures, over ``stats``; the workloads ask its stopping rule after every
                 round. No pytest.
8. ``workloads`` the workload kinds: which requests a cell sends, when, and what it records.
9. ``report``    what reads a results JSON: the decision view, the document's format and tables,
                 the old/new gate, the screen, plots, ``python -m pytest_specbench.report``.
                 Never imports pytest, an engine or the plugin's state.
10. ``plugin``    the pytest side: hooks, fixtures, options, per-run state, the cell runner, the
                 results document rewritten after each cell, xdist scheduling. The only
                 subpackage that imports pytest.
"""
