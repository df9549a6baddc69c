"""Everything that reads a results JSON and nothing else: per-cell metrics (``metrics``), paired
comparisons and their intervals (``paired``), the decision view (``decide``), the results document,
tables, old/new comparison and gate (``summary``), plots (``plots``). ``python -m
pytest_specbench.report`` is its command line (``__main__``).

May import ``inputs`` only; never pytest, an engine or the plugin's state."""
