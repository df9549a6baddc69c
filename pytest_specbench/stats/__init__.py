"""The statistics a run computes while it measures and the report recomputes from a results JSON:
the request record, a cell's metrics from its records, quantiles, the paired comparison, the
sequential boundaries, the gate's tests, drift's and brackets' bands. Pure: no pytest, no I/O, no
engine. May import ``inputs`` only; every layer above (matrix, planning, engines, workloads,
deciding, report, plugin) may import it."""
