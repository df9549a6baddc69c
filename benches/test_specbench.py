"""Bench functions: one per workload kind (docs/matrix.md). pytest-specbench parametrizes each
into one item per cell of the matrix; ``-k`` selects by function name and cell id."""


def test_throughput(engine, cell, specbench):
    """R timed rounds of N prompts at concurrency C (or a Poisson rate), fixed output length."""
    specbench.run(engine, cell)


def test_ttft(engine, cell, specbench):
    """Streamed requests: TTFT, TPOT and per-token ITL percentiles."""
    specbench.run(engine, cell)


def test_long_context(engine, cell, specbench):
    """Prompts of exactly 3k / 30k / 100k tokens of the model's own tokenizer."""
    specbench.run(engine, cell)


def test_agentic(engine, cell, specbench):
    """Multi-turn scenarios; per-turn TTFT, latency, acceptance and cached tokens."""
    specbench.run(engine, cell)


def test_categories(engine, cell, specbench):
    """Acceptance per prompt category (chat, code, math, translation, ...)."""
    specbench.run(engine, cell)


def test_trace(engine, cell, specbench):
    """A timestamped request trace replayed at its times (shared prefixes, prefix-cache hits)."""
    specbench.run(engine, cell)
