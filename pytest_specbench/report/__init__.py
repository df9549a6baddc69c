"""The numbers and what is made of them, with no engine and no pytest: a cell's metrics from its
request records (``metrics``, called by the workloads as a cell ends), paired comparisons and
their intervals (``paired``), the decision view (``decide``), the results document's format and
its tables, old/new comparison and gate (``summary``: ``build`` makes the document the plugin
writes), plots (``plots``). Everything here works from a results JSON alone; ``python -m
pytest_specbench.report`` is its command line (``__main__``).

May import ``inputs`` only; never pytest, an engine or the plugin's state."""
