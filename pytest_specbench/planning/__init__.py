"""Planning without running: model shapes from config.json (``shapes``), SGLang's split of
GPU memory (``sglang_memory``), the time model (``eta``), a speculative step's structure and the
accept length assumed (``structure``), the GPUs' link (``interconnect``), feasibility per cell and
group (``plan``, its records in ``records``), times taken from a previous results JSON
(``previous``), the packed schedule of groups on GPUs (``schedule``), tuned and raced cell sets
(``racing``) and the plan's text (``text``).

May import ``inputs``, ``stats`` and ``matrix``; no pytest, no engine."""
