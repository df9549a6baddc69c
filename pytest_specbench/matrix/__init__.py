"""The benchmark matrix: the YAML schema and its validation (``schema``: ``load``, ``parse``; the
workloads section in ``workload_schema``; ``checks``: ``MatrixError`` and the context that names
file and key in every message) and the frozen objects it expands into, with their ids and
fingerprints (``cells``: Model, Method, Workload, EngineGroup, Cell, Matrix). ``schema`` imports
the others, ``cells`` imports none of them.

May import ``inputs`` and ``stats``; no pytest."""
