"""Planning without running: model shapes from config.json (``shapes``), SGLang's split of
GPU memory (``sglang_memory``), the time model (``eta``), a speculative step's structure and the
accept length assumed (``structure``), the GPUs' link (``interconnect``), feasibility per cell and
group (``plan``, its records in ``records``), times taken from a previous results JSON
(``previous``), the packed schedule of groups on GPUs (``schedule``), a member and its baseline
side by side (``residency``), the GPUs' specifications (``gpu_specs``) and the plan's text
(``text``); tuned and raced cell sets are deciding/raced_plan.py's.

May import ``inputs``, ``stats`` and ``matrix``; no pytest, no engine."""
