#!/usr/bin/env bash
# The H200 runs of docs/results/, one PART per run. Installs SGLang and its dependencies from
# the wheels in .whl (no network needed) and writes everything under $OUT.
#   PARTS="dense fidelity" (default dense), each one of:
#   dense      benches/gpu/h200.yaml (dense + hybrid + crash and hang probes), -n $NPROC
#   det        benches/gpu/h200-det.yaml: standalone with deterministic inference, TP1 and TP2
#   tp2sa      benches/gpu/h200-tp.yaml -k "standalone and tp2"
#   crash      benches/gpu/h200.yaml -k crash: the kill probe alone
#   fidelity   scripts/fidelity.py: the plugin's throughput path vs a bare engine.generate batch
#   workloads  benches/gpu/h200-workloads.yaml (sweep, Poisson, TTFT, ctx3k/30k/100k, agentic), -n $NPROC
#   tp         benches/gpu/h200-tp.yaml: -k tp2 serial (TPLIMIT s); with TP_COMPARE=1 also -k tp1
#   tp48       benches/gpu/h200-tp.yaml: -k "tp4 or tp8" (a 4- or 8-GPU kind), then two TP2 groups under -n 2
#              serial and -k tp1 -n 2 (wall times in logs/walltimes.txt; CMPK narrows their -k)
#   paired     benches/gpu/h200-paired.yaml: ar, ngram d4/d8/d12, standalone (draft = target) s1/s3/s5, c1/c32
#   verdicts   benches/gpu/h200-verdicts.yaml: ar and its twin (same engine args) and ngram, c1/c32 closed
#              loop and Poisson at 4 and 60 req/s (8 in flight): identical engines never told apart
#   breakeven  benches/gpu/h200-breakeven.yaml: EAGLE3 forced 1-4 and DFLASH forced 1/2/4/6/8 against AR,
#              c1/c8/c32 (the plan first, in breakeven-plan.txt; plots in breakeven-plots.tgz)
#   bkhybrid   benches/gpu/h200-breakeven-hybrid.yaml: the seed-class 27B hybrid's MTP forced 1-4 against AR at
#              ctx3k, c1/c8/c32 (plan in bkhybrid-plan.txt, plots in bkhybrid-plots.tgz); RESUME=an earlier
#              run's JSON carries its cells over (--specbench-resume, any machine of this kind)
#   anyalgo    benches/gpu/h200-anyalgo.yaml: DSPARK (a dummy DSpark draft) and PLD (registered by the local
#              SGLang plugin in scripts/sglang_plugin) against AR, names the plugin has no rules for
#   tuning     benches/gpu/h200-tuning.yaml: STANDALONE (draft = target) swept over disable_overlap_schedule
#              and SGLANG_ENABLE_SPEC_V2, and FROZEN_KV_MTP (no rules known here), against AR
#   steady     benches/gpu/h200-steady.yaml: ar, ngram-d8, standalone (draft = target), c1/c8/c32, each
#              shape with refilled slots (steady window) and as one wave (lockstep)
#   trace      benches/gpu/h200-trace.yaml: fixtures/traces/chat-300.jsonl replayed against ar and ngram-d8 at
#              speed 1 and 2 (shared prefixes: SGLang's cached_tokens per request), the plan in trace-plan.txt
#   gpuci      scripts/gpu_ci.sh (the GPU workflow's job body) twice on benches/gpu/h200-paired.yaml
#              (ar, ngram-d4, standalone-s3), the second run gated against the first
#   interrupt  the seed-class 27B hybrid (benches/examples/seed-27b-hybrid.yaml at TP1): SIGTERM in the
#              middle of its ctx30k cell, then --specbench-resume to completion
#   server     benches/gpu/h200-server.yaml (ar, ngram, standalone in process and as sglang-server, c1/c32),
#              scripts/backend_ratio.py on it; then an NGRAM server started here, outside pytest:
#              benches/gpu/h200-http.yaml (backend http, api sglang and openai) and SGLang's own
#              python -m sglang.benchmark.serving (random-ids, 128 in / 256 out, c1 and c32) against it
#   eta        the seed-class 27B hybrid at TP1, -k "$ETAK" (default "mtp and c1"): the first plan
#              (--specbench-plan, no earlier results) and then the same command run, both saved
#   racefull   benches/gpu/h200-race.yaml (EAGLE3 forced 1-4 against AR, c1/c8/c32) in full; raced: the same
#              with --specbench-race; racelong / racelongfull: benches/gpu/h200-race-long.yaml (40 rounds a
#              cell) raced / in full (RESUME: the full run's first JSON, when its LIMIT stopped it)
#   starts     benches/gpu/starts.yaml: AR started 6 times, c1/c32, 4 fixed rounds, CUDA
#              graphs on: the start-to-start sd report/instances.py reads (plan in starts-plan.txt)
#   raceiz     benches/gpu/race-iz.yaml raced (c1/c32, rounds 3..6, precision 0.01, δ 2 %, CUDA graphs on); raceizfull:
#              benches/gpu/race-iz-full.yaml, the same at 6 fixed rounds
#   etaspec    benches/gpu/h200-eta-spec.yaml (AR and the STANDALONE oracle with its accept length expected, c1/c8/c32):
#              the first plan (etaspec-plan.txt/.json), the run with each cell's call time in a JUnit XML, and
#              planned eta against measured per cell (etaspec-compare.txt)
#   resident   benches/gpu/h200-resident.yaml raced (--specbench-race): AR's server resident beside each member's
#              (AR, its twin, EAGLE3 forced 1-4; c1/c16; KEXPR a -k, NAME the JSON's); residentfull: in full
#   clock      benches/gpu/h200-clock.yaml: one AR server at c1/c64/c256, the client's TTFT beside the server's histograms
#   clock2     scripts/h200_clock.sh: one AR server started outside pytest; backend http with client worker processes
#              and from one process, SGLang's bench_serving on the same server, then the in-process backend
#   srvresume  benches/gpu/h200-server.yaml resumed from $RESUME (the cells a first run did not reach)
#   FLIMIT limits the fidelity script; LIMIT is each pytest's time limit in seconds; KEXPR adds a -k to dense/workloads.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
[ -d .model/qwen3-1.7b ] || python3 scripts/make_dummy_model.py .model/qwen3-1.7b --preset qwen3-1.7b \
    --eagle3-draft .model/eagle3 --dflash-draft .model/dflash > "$OUT/logs/make-model.log" 2>&1
[ -n "${NO_KV4:-}" ] || [ -d .model/qwen3-1.7b-kv4 ] || python3 scripts/make_dummy_model.py .model/qwen3-1.7b-kv4 --preset qwen3-1.7b-kv4 \
    >> "$OUT/logs/make-model.log" 2>&1
[ -n "${NO_HYBRID_SMALL:-}" ] || [ -d .model/qwen3.5-hybrid-small ] || python3 scripts/make_dummy_model.py .model/qwen3.5-hybrid-small \
    --preset qwen3.5-hybrid-small >> "$OUT/logs/make-model.log" 2>&1
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv > "$OUT/logs/nvidia-smi.csv"
(while true; do nvidia-smi --query-gpu=timestamp,index,memory.used --format=csv,noheader >> "$OUT/logs/gpumem.csv"; sleep 2; done) &
MEMLOG=$!
lscpu > "$OUT/logs/lscpu.txt" 2>&1
# the busiest processes every 5 s, with the CPU each ran on last (psr): an idle server spinning a
# core beside a busy one shows here
(while true; do date +%T; ps -eo pid,psr,pcpu,etimes,args --sort=-pcpu | cut -c1-160 | head -n 14; sleep 5; done) > "$OUT/logs/cpu.log" 2>&1 &
CPULOG=$!
NPROC=${NPROC:-$(nvidia-smi -L | wc -l)}
bench() {  # NAME MATRIX ARGS...: one pytest session, its wall time in $OUT/logs/walltimes.txt
  local name=$1 matrix=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "${LIMIT:-560}" python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
    --specbench-matrix "$matrix" --benchmark-json "$OUT/$name.json" --specbench-log-dir "$OUT/logs/$name" \
    -rsfE "$@" > "$OUT/logs/$name.pytest.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))") args: $*" | tee -a "$OUT/logs/walltimes.txt"
  tail -n 45 "$OUT/logs/$name.pytest.log"
}
for PART in ${PARTS:-dense}; do
case "$PART" in
  dense)
    bench h200 benches/gpu/h200.yaml -n "$NPROC" --specbench-kill-engine ar-crash-tp1@1 \
      --specbench-hang-engine ar-hang-tp1@1 ${KEXPR:+-k "$KEXPR"} ;;
  workloads)
    bench h200-workloads benches/gpu/h200-workloads.yaml -n "$NPROC" ${KEXPR:+-k "$KEXPR"} ;;
  tp)
    LIMIT=${TPLIMIT:-${LIMIT:-560}} bench h200-tp2 benches/gpu/h200-tp.yaml -k tp2
    if [ -n "${TP_COMPARE:-}" ]; then
      bench h200-tp1-serial benches/gpu/h200-tp.yaml -k "tp1${CMPK:+ and ($CMPK)}"
      bench h200-tp1-n2 benches/gpu/h200-tp.yaml -k "tp1${CMPK:+ and ($CMPK)}" -n 2
    fi ;;
  det)
    bench h200-det benches/gpu/h200-det.yaml ;;
  paired)
    bench h200-paired benches/gpu/h200-paired.yaml ;;
  steady)
    bench h200-steady benches/gpu/h200-steady.yaml ;;
  trace)  # the plan first, then the run, its report and plots
    timeout 120 python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-trace.yaml --specbench-plan > "$OUT/trace-plan.txt" 2>&1
    bench h200-trace benches/gpu/h200-trace.yaml ;;
  verdicts)
    bench h200-verdicts benches/gpu/h200-verdicts.yaml ;;
  tuning)
    timeout 120 python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-tuning.yaml --specbench-plan > "$OUT/tuning-plan.txt" 2>&1
    bench h200-tuning benches/gpu/h200-tuning.yaml ${KEXPR:+-k "$KEXPR"} ;;
  breakeven)  # the plan first (its ETA against the wall time), then the run, with its plots
    timeout 120 python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-breakeven.yaml --specbench-plan ${KEXPR:+-k "$KEXPR"} > "$OUT/breakeven-plan.txt" 2>&1
    bench h200-breakeven benches/gpu/h200-breakeven.yaml --specbench-plots "$OUT/breakeven-plots" ${KEXPR:+-k "$KEXPR"}
    tar czf "$OUT/breakeven-plots.tgz" -C "$OUT" breakeven-plots logs && rm -rf "$OUT/breakeven-plots" ;;
  bkhybrid)
    [ -d .model/q27 ] || python3 scripts/make_dummy_model.py .model/q27 --preset qwen3.5-27b-hybrid \
        >> "$OUT/logs/make-model.log" 2>&1
    timeout 120 python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-breakeven-hybrid.yaml --specbench-plan ${KEXPR:+-k "$KEXPR"} \
      ${RESUME:+--specbench-resume "$RESUME" --specbench-resume-any-machine} > "$OUT/bkhybrid-plan.txt" 2>&1
    bench h200-breakeven-hybrid benches/gpu/h200-breakeven-hybrid.yaml --specbench-plots "$OUT/bkhybrid-plots" \
      ${KEXPR:+-k "$KEXPR"} ${RESUME:+--specbench-resume "$RESUME" --specbench-resume-any-machine}
    tar czf "$OUT/bkhybrid-plots.tgz" -C "$OUT" bkhybrid-plots logs && rm -rf "$OUT/bkhybrid-plots" ;;
  anyalgo)
    [ -d .model/dspark ] || python3 scripts/make_dummy_model.py .model/qwen3-1.7b --preset qwen3-1.7b \
        --dspark-draft .model/dspark >> "$OUT/logs/make-model.log" 2>&1
    python3 scripts/sglang_plugin/install.py /tmp/site >> "$OUT/logs/make-model.log" 2>&1
    timeout 120 python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-anyalgo.yaml --specbench-plan > "$OUT/anyalgo-plan.txt" 2>&1
    bench h200-anyalgo benches/gpu/h200-anyalgo.yaml ${KEXPR:+-k "$KEXPR"}
    tar czf "$OUT/anyalgo-logs.tgz" -C "$OUT" logs ;;
  gpuci)  # the GPU workflow's script, twice: the second run gated against the first
    for i in 1 2; do
      B=""; [ "$i" = 2 ] && B="$OUT/gpu-ci-1/out.json"
      OUT=$OUT/gpu-ci-$i BASELINE=$B MATRIX=benches/gpu/h200-paired.yaml SELECT='ar or ngram-d4 or standalone-s3' \
        PYTEST="python3 -m pytest -p pytest_specbench.plugin.hooks" timeout "${LIMIT:-290}" bash scripts/gpu_ci.sh
      echo "gpu-ci run $i rc=$?" | tee -a "$OUT/logs/walltimes.txt"
      cp "$OUT/gpu-ci-$i/out.json" "$OUT/gpu-ci-$i.json" 2>/dev/null
    done
    tar czf "$OUT/gpu-ci.tgz" -C "$OUT" gpu-ci-1 gpu-ci-2 && rm -rf "$OUT/gpu-ci-1" "$OUT/gpu-ci-2" ;;
  server)
    bench h200-server benches/gpu/h200-server.yaml
    python3 scripts/backend_ratio.py "$OUT/h200-server.json" ar=ar-server ngram=ngram-server \
      standalone=standalone-server > "$OUT/server-vs-inprocess.md" 2>&1; cat "$OUT/server-vs-inprocess.md"
    ps -eo pid,args | grep -c "[s]glang" > "$OUT/logs/sglang-procs-after-server-run.txt"
    python3 -m sglang.launch_server --model-path .model/qwen3-1.7b --load-format dummy --attention-backend triton \
      --sampling-backend pytorch --grammar-backend none --random-seed 0 --disable-prefill-cuda-graph \
      --cuda-graph-max-bs-decode 32 --enable-metrics --speculative-algorithm NGRAM \
      --speculative-num-draft-tokens 8 --host 127.0.0.1 --port 30111 > "$OUT/logs/external-server.log" 2>&1 &
    SRV=$!
    for _ in $(seq 300); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:30111/health', timeout=2)" 2>/dev/null && break; sleep 1; done
    echo "external server up after $SECONDS s of the script" | tee -a "$OUT/logs/walltimes.txt"
    bench h200-http benches/gpu/h200-http.yaml
    for c in 1 32; do
      timeout 200 python3 -m sglang.benchmark.serving --backend sglang --host 127.0.0.1 --port 30111 \
        --dataset-name random-ids --random-input-len 128 --random-output-len 256 --random-range-ratio 1 \
        --num-prompts $((c * 5)) --max-concurrency $c --tokenizer .model/qwen3-1.7b \
        --output-file "$OUT/bench-serving-c$c.jsonl" > "$OUT/logs/bench-serving-c$c.log" 2>&1
      echo "bench_serving c$c rc=$?" | tee -a "$OUT/logs/walltimes.txt"; tail -n 40 "$OUT/logs/bench-serving-c$c.log"
    done
    kill -TERM -- $SRV; sleep 10; kill -KILL -- $SRV 2>/dev/null
    pkill -KILL -f sglang.launch_server 2>/dev/null ;;
  eta)
    [ -d .model/q27 ] || python3 scripts/make_dummy_model.py .model/q27 --preset qwen3.5-27b-hybrid \
        >> "$OUT/logs/make-model.log" 2>&1
    sed -e 's#path: ./configs/qwen3.5-27b-hybrid#path: ../../.model/q27#' -e 's/^tp: \[1, 4, 8\]/tp: [1]/' \
        benches/examples/seed-27b-hybrid.yaml > benches/examples/seed27-tp1.yaml
    K=${ETAK:-mtp and c1}
    python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/examples/seed27-tp1.yaml -k "$K" --specbench-plan \
      --specbench-plan-json "$OUT/seed27-eta-plan.json" > "$OUT/seed27-eta-plan.txt" 2>&1
    tail -n 20 "$OUT/seed27-eta-plan.txt"
    bench seed27-eta benches/examples/seed27-tp1.yaml -k "$K" ;;
  racefull)  # benches/gpu/h200-race.yaml in full: the forced lengths' order and AR's drift sentinel
    bench h200-race-full benches/gpu/h200-race.yaml --junit-xml "$OUT/h200-race-full.xml" -o junit_duration_report=call ;;
  raceiz)    # benches/gpu/race-iz.yaml raced: the indifference zone, a precision target, CUDA graphs on
    python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py --specbench-matrix benches/gpu/race-iz.yaml \
      --specbench-race --specbench-plan -q > "$OUT/race-iz-plan.txt" 2>&1
    bench race-iz benches/gpu/race-iz.yaml --specbench-race --junit-xml "$OUT/race-iz.xml" -o junit_duration_report=call ;;
  starts)    # benches/gpu/starts.yaml: AR started 6 times: the start-to-start level
    python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py --specbench-matrix benches/gpu/starts.yaml \
      --specbench-plan -q > "$OUT/starts-plan.txt" 2>&1
    bench starts benches/gpu/starts.yaml --junit-xml "$OUT/starts.xml" -o junit_duration_report=call ;;
  raceizfull)  # the same forced lengths at 6 fixed rounds, no race
    bench race-iz-full benches/gpu/race-iz-full.yaml --junit-xml "$OUT/race-iz-full.xml" -o junit_duration_report=call ;;
  raced)     # the same matrix with --specbench-race
    bench h200-race benches/gpu/h200-race.yaml --specbench-race --junit-xml "$OUT/h200-race.xml" -o junit_duration_report=call ;;
  resident)  # benches/gpu/h200-resident.yaml raced, the baseline's server beside each member's
    bench ${NAME:-h200-resident} benches/gpu/h200-resident.yaml --specbench-race --junit-xml "$OUT/h200-resident.xml" \
      -o junit_duration_report=call ${KEXPR:+-k "$KEXPR"} ;;
  clock)     # the client's TTFT against the server's own histograms
    bench h200-clock benches/gpu/h200-clock.yaml ;;
  clock2)    # the same server for the plugin's client processes, one process and bench_serving; in-process after
    OUT=$OUT bash scripts/h200_clock.sh ;;
  residentfull)  # the same in full
    bench ${NAME:-h200-resident-full} benches/gpu/h200-resident.yaml --junit-xml "$OUT/h200-resident-full.xml" \
      -o junit_duration_report=call ${KEXPR:+-k "$KEXPR"} ;;
  racelong)  # benches/gpu/h200-race-long.yaml (40 rounds a cell) with --specbench-race
    bench h200-race-long benches/gpu/h200-race-long.yaml --specbench-race --junit-xml "$OUT/h200-race-long.xml" \
      -o junit_duration_report=call ;;
  racelongfull)  # the same in full; RESUME=the JSON of a first call that its LIMIT stopped
    bench h200-race-long-full benches/gpu/h200-race-long.yaml --junit-xml "$OUT/h200-race-long-full.xml" \
      -o junit_duration_report=call ${RESUME:+--specbench-resume "$RESUME" --specbench-resume-any-machine} ;;
  etaspec)
    python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
      --specbench-matrix benches/gpu/h200-eta-spec.yaml --specbench-plan \
      --specbench-plan-json "$OUT/etaspec-plan.json" > "$OUT/etaspec-plan.txt" 2>&1
    tail -n 12 "$OUT/etaspec-plan.txt"
    bench h200-eta-spec benches/gpu/h200-eta-spec.yaml --junit-xml "$OUT/h200-eta-spec.xml" -o junit_duration_report=call
    python3 scripts/eta_compare.py "$OUT/etaspec-plan.json" "$OUT/h200-eta-spec.xml" | tee "$OUT/etaspec-compare.txt" ;;
  srvresume)
    bench h200-server-resumed benches/gpu/h200-server.yaml --specbench-resume "$RESUME" ;;
  interrupt)
    [ -d .model/q27 ] || python3 scripts/make_dummy_model.py .model/q27 --preset qwen3.5-27b-hybrid \
        >> "$OUT/logs/make-model.log" 2>&1
    sed -e 's#path: ./configs/qwen3.5-27b-hybrid#path: ../../.model/q27#' -e 's/^tp: \[1, 4, 8\]/tp: [1]/' \
        benches/examples/seed-27b-hybrid.yaml > benches/examples/seed27-tp1.yaml
    K='ar and c1 and (ctx3k or ctx30k)'
    M=benches/examples/seed27-tp1.yaml
    t0=$(date +%s.%N)
    python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py --specbench-matrix $M -k "$K" \
      --benchmark-json "$OUT/seed27-interrupted.json" --specbench-log-dir "$OUT/logs/seed27" -rsfE \
      > "$OUT/logs/seed27-interrupted.pytest.log" 2>&1 &
    PID=$!
    # SIGTERM once the ctx3k cell is in the JSON and the ctx30k cell has run for 8 s
    for i in $(seq 1 400); do
      python3 -c "import json,sys; d=json.load(open('$OUT/seed27-interrupted.json')); sys.exit(0 if d['benchmarks'] else 1)" 2>/dev/null && break
      sleep 1
    done
    sleep 8; echo "SIGTERM to pytest $PID at $(date +%T)" | tee -a "$OUT/logs/walltimes.txt"; kill -TERM $PID; wait $PID
    echo "interrupted rc=$? wall_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")" | tee -a "$OUT/logs/walltimes.txt"
    sleep 3; echo "processes left: $(pgrep -fc 'sglang::' || true)" | tee -a "$OUT/logs/walltimes.txt"
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader | sed 's/^/after interrupt: /' | tee -a "$OUT/logs/walltimes.txt"
    tail -n 25 "$OUT/logs/seed27-interrupted.pytest.log"
    bench seed27-resumed $M -k "$K" --specbench-resume "$OUT/seed27-interrupted.json" ;;
  tp48)
    bench h200-tp48 benches/gpu/h200-tp.yaml -k "tp4 or tp8"
    bench h200-tp2-n2 benches/gpu/h200-tp.yaml -k "tp2 and not ngram" -n 2 ;;
  tp2sa)
    bench h200-tp2-standalone benches/gpu/h200-tp.yaml -k "standalone and tp2" ;;
  crash)
    bench h200-crash benches/gpu/h200.yaml -k crash --specbench-kill-engine ar-crash-tp1@1 ;;
  fidelity)
    timeout "${FLIMIT:-150}" python3 scripts/fidelity.py --matrix benches/gpu/h200.yaml --method ar \
      --concurrency 32 --output-tokens 256 --reps 5 --json "$OUT/fidelity.json" > "$OUT/logs/fidelity.log" 2>&1
    tail -n 8 "$OUT/logs/fidelity.log" ;;
esac
done
kill $MEMLOG $CPULOG
nvidia-smi --query-gpu=index,memory.used --format=csv >> "$OUT/logs/nvidia-smi.csv"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
ls -la "$OUT"
