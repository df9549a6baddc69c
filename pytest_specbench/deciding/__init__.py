"""Deciding instead of enumerating: how a cell's rounds stop (``stopping``: the one protocol
workloads/rounds.py asks after every timed round), racing with an indifference zone (``race``,
``selection``: early stopping, drops against a shape's leader, costlier shapes skipped on
evidence), tuning a swept method on its deciding cells (``tune``), what the raced plan predicts
(``predict``, ``raced_plan``), drift families (``families``) and the one decision state every
process of a run shares (``store``). Pure code, no pytest: the plugin wires it into a run, the
report reads what it recorded. May import ``inputs``, ``stats``, ``matrix``, ``planning``,
``gpus`` and ``engines``; ``workloads`` imports it.
"""
