"""The benchmark matrix: YAML in, frozen typed objects out.

The names the rest of the package and its users import, from two modules with one concern each:

- matrix_cells.py: the frozen objects (Model, Speculative, Method, Workload, EngineGroup, Cell,
  Matrix), the expansion of a matrix into cells and engine groups, their ids and fingerprints;
- matrix_schema.py: the schema of the matrix file and its validation (``parse``, ``load``,
  ``MatrixError``); it imports matrix_cells, never the other way.

This module only re-exports them, so ``from pytest_specbench.matrix import Cell, load`` works and
the imports stay one-way (matrix -> matrix_schema -> matrix_cells).
"""

from __future__ import annotations

from .matrix_cells import (
    AGENTIC_TOKENS_GUESS,
    ALGORITHM_KEYS,
    DEFAULT_BASELINE,
    FINGERPRINT_FIELDS,
    LOAD_FORMATS,
    NOT_FINGERPRINTED,
    SPEC_ALGORITHMS,
    SWEEP_LABELS,
    WORKLOAD_KINDS,
    Cell,
    EngineGroup,
    Matrix,
    Method,
    Model,
    Speculative,
    Workload,
    fingerprint_text,
    fmt_tokens,
    freeze,
    refused_setting,
    request_tokens,
    setting_name,
    thaw,
)
from .matrix_schema import (
    APIS,
    ENDPOINT_BACKENDS,
    IGNORED_BY,
    METHOD_KEYS,
    MODEL_KEYS,
    OPTION_KEYS,
    SLO_KEYS,
    SPEC_KEYS,
    SWEEP_KEYS,
    TOP_KEYS,
    WORKLOAD_KEYS,
    DuplicateKeyError,
    MatrixError,
    load,
    parse,
)

__all__ = [
    "AGENTIC_TOKENS_GUESS",
    "ALGORITHM_KEYS",
    "APIS",
    "DEFAULT_BASELINE",
    "ENDPOINT_BACKENDS",
    "FINGERPRINT_FIELDS",
    "IGNORED_BY",
    "LOAD_FORMATS",
    "METHOD_KEYS",
    "MODEL_KEYS",
    "NOT_FINGERPRINTED",
    "OPTION_KEYS",
    "SLO_KEYS",
    "SPEC_ALGORITHMS",
    "SPEC_KEYS",
    "SWEEP_KEYS",
    "SWEEP_LABELS",
    "TOP_KEYS",
    "WORKLOAD_KEYS",
    "WORKLOAD_KINDS",
    "Cell",
    "DuplicateKeyError",
    "EngineGroup",
    "Matrix",
    "MatrixError",
    "Method",
    "Model",
    "Speculative",
    "Workload",
    "fingerprint_text",
    "fmt_tokens",
    "freeze",
    "load",
    "parse",
    "refused_setting",
    "request_tokens",
    "setting_name",
    "thaw",
]
