"""Workload kinds (``kinds``): throughput, TTFT, long context, categories, agentic and the open
loop: which requests a cell sends, when, with which seeds, and the cell's records and metrics.

May import every layer below the plugin (``inputs`` … ``engines``); no pytest."""
