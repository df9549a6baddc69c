#!/usr/bin/env bash
# The H200 run of issue 3, in one device call. Needs the wheelhouse in .whl (built by
# shared/gpu-host/build-wheelhouse.sh) and writes everything under $OUT.
#   PARTS="fidelity bench" (default bench), each one of:
#   bench     the benchmark matrix benches/h200.yaml (dense + hybrid + crash probe);
#             KEXPR selects cells (-k), LIMIT is its time limit in seconds
#   fidelity  the fidelity script (plugin vs bare engine.generate)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
[ -d .model/qwen3-1.7b ] || python3 scripts/make_dummy_model.py .model/qwen3-1.7b --preset qwen3-1.7b \
    --eagle3-draft .model/eagle3 --dflash-draft .model/dflash
[ -d .model/qwen3.5-hybrid-small ] || python3 scripts/make_dummy_model.py .model/qwen3.5-hybrid-small \
    --preset qwen3.5-hybrid-small
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv"
(while true; do nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader >> "$OUT/gpumem.csv"; sleep 2; done) &
MEMLOG=$!
for PART in ${PARTS:-bench}; do
case "$PART" in
  bench)
    timeout "${LIMIT:-560}" python3 -m pytest -p pytest_specbench.plugin benches/test_throughput.py \
      --specbench-matrix benches/h200.yaml --benchmark-json "$OUT/h200.json" \
      --specbench-log-dir "$OUT/logs" --specbench-kill-engine ar-crash-tp1@1 \
      -v -rsfE ${KEXPR:+-k "$KEXPR"} 2>&1 | tee "$OUT/pytest.log"
    python3 -c "import sys, json; d = json.load(open('$OUT/h200.json')); print(len(d['benchmarks']), 'cells in JSON')"
    ;;
  fidelity)
    timeout "${LIMIT:-300}" python3 scripts/fidelity.py --matrix benches/h200.yaml --method ar \
      --concurrency 32 --output-tokens 256 --reps 3 --json "$OUT/fidelity.json" 2>&1 | tee "$OUT/fidelity.log"
    [ -n "${FIDELITY_STREAM:-}" ] && timeout "${LIMIT:-300}" python3 scripts/fidelity.py --matrix benches/h200.yaml \
      --method ar --concurrency 32 --output-tokens 256 --reps 3 --stream --json "$OUT/fidelity-stream.json" 2>&1 \
      | tee -a "$OUT/fidelity.log"
    ;;
esac
done
kill $MEMLOG
nvidia-smi --query-gpu=index,memory.used --format=csv >> "$OUT/nvidia-smi.csv"
[ -d "$OUT/logs" ] && tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
ls -la "$OUT"
