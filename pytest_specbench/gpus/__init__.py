"""GPUs: the inventory read through NVML, which GPUs are free, pinning (``inventory``) and the
lease pool shared by xdist workers (``leases``).

May import ``inputs``, ``stats``, ``matrix`` and ``planning``; no pytest."""
