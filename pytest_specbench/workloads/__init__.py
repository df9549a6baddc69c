"""Workload kinds (``kinds``): throughput, TTFT, long context, categories, agentic and the open
loop: which requests a cell sends, when, with which seeds, and the cell's records and metrics.
``rounds``: the rounds every kind shares (warm-up until warm, timed rounds, ``max_rounds``, the
baseline's rounds interleaved with the cell's).

May import the layers below it (``inputs`` … ``engines`` and ``deciding``, whose stopping protocol
``rounds`` asks after every timed round); never ``report`` or the plugin; no pytest."""
