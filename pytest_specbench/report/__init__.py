"""What reads a results JSON, with no engine and no pytest: the decision view (``decide``), the
results document's format and its tables, old/new comparison and gate (``summary``: ``build``
makes the document the plugin writes), the end-of-run screen (``screen``), plots (``plots``),
shard merging (``merge``). The statistics it recomputes live in ``stats``. Everything here works
from a results JSON alone; ``python -m pytest_specbench.report`` is its command line
(``__main__``).

May import ``inputs`` and ``stats`` only; never pytest, an engine, the deciding state or the
plugin's state."""
