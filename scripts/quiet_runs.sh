#!/usr/bin/env bash
# The default job (README's run command on the embedded CPU model) run back to back on an otherwise
# idle host, for scripts/compare_runs.py: cold starts leaking into timed rounds, and how far the
# closed-loop speedups of two identical runs drift. No GPU is used (CUDA_VISIBLE_DEVICES is empty).
#   OUT=dir RUNS="1 2" [LIMIT=560] [BUDGET=seconds] bash scripts/quiet_runs.sh
# A run starts only while BUDGET (default: no limit) has at least the previous run's time left.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES= PYTHONPATH=$PWD  # the plugin from this tree, not installed
python3 -c "import os, platform, torch, transformers; print(platform.processor() or platform.machine(), os.cpu_count(), 'cpus; torch', torch.__version__, 'transformers', transformers.__version__)" | tee "$OUT/logs/host.txt"
grep -m1 "model name" /proc/cpuinfo >> "$OUT/logs/host.txt"; uptime >> "$OUT/logs/host.txt"
t_start=$(date +%s); last=0
for N in ${RUNS:-1 2}; do
  now=$(date +%s)
  if [ -n "${BUDGET:-}" ] && [ $((now - t_start + last)) -gt "$BUDGET" ]; then
    echo "run $N not started: $((now - t_start)) s used, the last run took $last s, budget $BUDGET s" | tee -a "$OUT/logs/walltimes.txt"
    break
  fi
  uptime >> "$OUT/logs/host.txt"
  timeout "${LIMIT:-560}" python3 -m pytest benches --benchmark-json "$OUT/cpu-run$N.json" -p no:cacheprovider -p pytest_specbench.plugin.hooks \
    > "$OUT/logs/run$N.pytest.log" 2>&1
  rc=$?; last=$(( $(date +%s) - now ))
  echo "run $N rc=$rc wall_s=$last" | tee -a "$OUT/logs/walltimes.txt"
  tail -n 30 "$OUT/logs/run$N.pytest.log"
done
