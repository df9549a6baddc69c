"""Throughput cells: R timed rounds of N prompts at concurrency C, fixed output length."""


def test_throughput(engine, cell, specbench):
    specbench.run(engine, cell)
