#!/usr/bin/env bash
# The GPU workflow's job body (.github/workflows/gpu.yml runs exactly this): plan, benchmark,
# Markdown report, and the gate against a baseline JSON. Everything lands in $OUT:
#   plan.txt plan.json out.json report.md report.html plots/ (PNG + CSV, index.md) [compare.md] verdict.txt logs/
# Environment: MATRIX (default benches/gpu/h200.yaml), SELECT (a pytest -k expression, may be empty),
# BASELINE (a previous out.json; no gate without it), MAX_TOK_S_DROP (0.10), MAX_ACCEPT_DROP (0.02),
# RUN_SPREAD (0.02: one run's spread of a cell's tok/s on the runner, from repeat runs; docs/gate.md),
# PYTEST (default "python3 -m pytest"; add "-p pytest_specbench.plugin.hooks" where the plugin is not
# installed). Exit status: 0 when every cell passed and nothing regressed, else 1.
set -uo pipefail
OUT=${OUT:-gpu-ci}; mkdir -p "$OUT"
MATRIX=${MATRIX:-benches/gpu/h200.yaml}
PYTEST=${PYTEST:-python3 -m pytest}
K=(); [ -n "${SELECT:-}" ] && K=(-k "$SELECT")
run() { $PYTEST benches/test_specbench.py --specbench-matrix "$MATRIX" "${K[@]}" "$@"; }

run --specbench-plan --specbench-plan-json "$OUT/plan.json" > "$OUT/plan.txt" 2>&1
echo "plan: $(grep -E '^cells:' "$OUT/plan.txt")"
run --benchmark-json "$OUT/out.json" --specbench-log-dir "$OUT/logs" -rsfE > "$OUT/pytest.log" 2>&1
bench_rc=$?
tail -n 30 "$OUT/pytest.log"
[ -f "$OUT/out.json" ] && python3 -m pytest_specbench.report "$OUT/out.json" --plots "$OUT/plots" \
  --html "$OUT/report.html" > "$OUT/report.md"
gate_rc=0
if [ -n "${BASELINE:-}" ] && [ -f "$BASELINE" ] && [ -f "$OUT/out.json" ]; then
  python3 -m pytest_benchmark compare "$BASELINE" "$OUT/out.json" > "$OUT/pytest-benchmark-compare.txt" 2>&1
  python3 -m pytest_specbench.report "$BASELINE" "$OUT/out.json" \
    --max-tok-s-drop "${MAX_TOK_S_DROP:-0.10}" --max-accept-drop "${MAX_ACCEPT_DROP:-0.02}" \
    --run-spread "${RUN_SPREAD:-0.02}" \
    --plots "$OUT/plots-compare" > "$OUT/compare.md"
  gate_rc=$?
  tail -n 20 "$OUT/compare.md"
fi
{
  echo "benchmark exit status: $bench_rc"
  if [ -n "${BASELINE:-}" ]; then echo "gate against $BASELINE: exit $gate_rc"; else echo "gate: no baseline"; fi
} | tee "$OUT/verdict.txt"
[ "$bench_rc" = 0 ] && [ "$gate_rc" = 0 ]
