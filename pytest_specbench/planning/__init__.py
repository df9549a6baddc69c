"""Planning without running: model shapes from config.json (``shapes``), SGLang's split of
GPU memory (``sglang_memory``), the time model (``eta``), feasibility per cell and group
(``plan``), times taken from a previous results JSON (``previous``), the packed schedule of groups
on GPUs (``schedule``) and the plan's text (``text``).

May import ``inputs``, ``report`` and ``matrix``; no pytest, no engine."""
