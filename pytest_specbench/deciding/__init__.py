"""Deciding instead of enumerating: racing (early stopping, drops against a shape's leader,
costlier shapes skipped on evidence), tuning a swept method on its deciding cells, and the one
decision state every process of a run shares (``store``). Pure code, no pytest: the plugin wires
it into a run, the report reads what it recorded. May import ``inputs``, ``stats``, ``matrix``,
``planning``, ``gpus``, ``engines`` and ``workloads``.
"""
