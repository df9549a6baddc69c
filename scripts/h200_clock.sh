#!/usr/bin/env bash
# The client's clock against the server's on one GPU, load from several client processes:
#   OUT=out bash scripts/h200_clock.sh            (or: PARTS=clock2 bash scripts/h200_run.sh)
# 1. ONE `python -m sglang.launch_server --enable-metrics` on 127.0.0.1:$PORT with the engine
#    arguments the plugin renders for benches/gpu/h200-clock.yaml (AR, Qwen3-1.7B-shaped, dummy
#    weights);
# 2. against it, the plugin's http backend (benches/gpu/h200-clock-http.yaml): c1, c64, c256, 512 in
#    / 128 out, streamed, one wave a round, 3 timed rounds; `procs` with the default client worker
#    processes, `oneproc` from one event loop; each cell's client TTFT beside the server's histogram;
# 3. against the same server, SGLang's own python -m sglang.bench_serving (random-ids: the `random`
#    dataset samples ShareGPT, a download this host cannot make), token ids as the plugin sends them
#    (--tokenize-prompt: exactly 512), at each concurrency, 3 x C prompts, its JSON kept: output
#    throughput beside the plugin's;
# 4. the server stopped, the in-process sglang backend at the same shapes with enable_metrics
#    (scripts/inproc_clock.py): its TTFT beside SGLang's own histogram, read in process.
# Everything under $OUT: summary.txt, h200-clock-http.json, bench-serving.jsonl (bench_serving's own
# JSON), bench-legs.jsonl (its requests' TTFT legs, the server's histogram around each pass), inproc-clock.json,
# and clock-logs.tgz (the server's command and log, the pytest and bench_serving logs, wall times).
# TLIMIT (default 420) bounds the whole. HTTP_MATRIX (default benches/gpu/h200-clock-http.yaml) is
# the plugin's matrix (its pytest capped at HTTP_CAP s, default 220); BENCH_C (default "1 64 256")
# the concurrencies bench_serving runs, each BENCH_REPS times (default 1; the summary's ratio
# divides by their mean), then BENCH_KEEP_REPS times (default 0) over one keep-alive session;
# NO_INPROC=1 skips step 4.
set -uo pipefail
OUT=${OUT:-out}; L=$OUT/clock-logs; mkdir -p "$L"
PORT=30123  # the url of benches/gpu/h200-clock-http.yaml
TLIMIT=${TLIMIT:-420}
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$SECONDS
left() { echo $((TLIMIT - (SECONDS - T0))); }
upto() { local x=$(( $(left) - $1 )); [ "$x" -gt "$2" ] && x=$2; [ "$x" -lt 30 ] && x=30; echo "$x"; }  # RESERVE CAP
if ! python3 -c "import sglang, aiohttp" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
[ -d .model/qwen3-1.7b ] || python3 scripts/make_dummy_model.py .model/qwen3-1.7b --preset qwen3-1.7b \
  > "$L/make-model.log" 2>&1
echo "setup done at $((SECONDS - T0)) s" | tee "$L/walltimes.txt"

SRV=
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null); [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }  # not a zombie
stop_server() {  # SIGTERM to the server's process group (it leads its own session), SIGKILL after 20 s
  [ -n "$SRV" ] || return 0
  kill -TERM -- "-$SRV" 2>/dev/null || kill -TERM "$SRV" 2>/dev/null
  for _ in $(seq 40); do alive "$SRV" || break; sleep 0.5; done
  kill -KILL -- "-$SRV" 2>/dev/null
  wait "$SRV" 2>/dev/null
  SRV=
}
pack() {  # the logs as one file: at most a few files come back from the GPU host
  tar czf "$OUT/clock-logs.tgz" -C "$OUT" clock-logs 2>/dev/null && rm -rf "$L"
}
trap 'stop_server; pack' EXIT
trap 'exit 130' INT TERM

# the server's flags: exactly what the plugin's sglang-server backend renders for h200-clock.yaml
mapfile -t ARGS < <(python3 - <<'EOF'
from pytest_specbench.engines.server import cli_args
from pytest_specbench.engines.sglang import engine_kwargs
from pytest_specbench.matrix.schema import load

kw = engine_kwargs(load("benches/gpu/h200-clock.yaml").cells()[0].group)
kw.setdefault("enable_metrics", True)
print("\n".join(cli_args(kw)))
EOF
)
[ "${#ARGS[@]}" -gt 0 ] || { echo "could not render the server's arguments"; exit 1; }
echo "python3 -m sglang.launch_server ${ARGS[*]} --host 127.0.0.1 --port $PORT" | tee "$L/server-cmd.txt"
setsid python3 -m sglang.launch_server "${ARGS[@]}" --host 127.0.0.1 --port "$PORT" \
  > "$L/server.log" 2>&1 < /dev/null &
SRV=$!
up=
for _ in $(seq 300); do
  alive "$SRV" || break
  if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; then
    up=1; break
  fi
  sleep 1
done
echo "server up=${up:-no} at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
if [ -z "$up" ]; then tail -n 40 "$L/server.log"; exit 1; fi

# 2. the plugin's http backend, worker processes and one process, one pytest session
plugin_session() {  # LIMIT_S MATRIX JSON LOG_DIR LOG [pytest args]: one pytest session of the plugin
  local limit=$1 matrix=$2 json=$3 logdir=$4 log=$5; shift 5
  timeout "$limit" python3 -m pytest -p pytest_specbench.plugin.hooks benches/test_specbench.py \
    --specbench-matrix "$matrix" --benchmark-json "$json" --specbench-log-dir "$logdir" "$@" > "$log" 2>&1
}
bench_passes() {  # LIMIT_S LOG C PROMPTS [wrapper args]: bench_serving's passes, legs noted (step 3)
  local limit=$1 log=$2 c=$3 n=$4; shift 4
  timeout "$limit" python3 scripts/bench_serving_legs.py --legs-out "$OUT/bench-legs.jsonl" --legs-port "$PORT" "$@" \
    --backend sglang --base-url "http://127.0.0.1:$PORT" --dataset-name random-ids --random-input-len 512 \
    --random-output-len 128 --random-range-ratio 1 --num-prompts "$n" --max-concurrency "$c" \
    --tokenizer .model/qwen3-1.7b --tokenize-prompt --flush-cache --disable-tqdm \
    --output-file "$OUT/bench-serving.jsonl" > "$log" 2>&1
}
if [ "${HTTP_MATRIX:-}" != none ]; then
  t=$SECONDS
  plugin_session "$(upto 150 "${HTTP_CAP:-220}")" "${HTTP_MATRIX:-benches/gpu/h200-clock-http.yaml}" \
    "$OUT/h200-clock-http.json" "$L/http" "$L/http.pytest.log" -rsfE
  echo "http rc=$? wall_s=$((SECONDS - t)) at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
  tail -n 25 "$L/http.pytest.log"
fi

# 2b. throughput, the plugin against bench_serving interleaved (AB_PAIRS > 0): pair i runs one
#     plugin session (benches/gpu/h200-tput-ab.yaml: 10 x 64 requests at 64 in flight, a warm-up
#     and one timed round) and one bench_serving pass of the same workload, in the order
#     AB, BA, AB, ... (a drift linear in time cancels over each two pairs); each plugin session's
#     JSON under clock-logs/ab/, bench_serving's passes tagged ab in bench-serving.jsonl
AB_C=64; AB_WAVES=10  # the workload of benches/gpu/h200-tput-ab.yaml
ab_plugin() {
  plugin_session 150 benches/gpu/h200-tput-ab.yaml "$L/ab/plugin-$1.json" "$L/ab/log-$1" "$L/ab/plugin-$1.log" -q
  echo "ab $1 plugin rc=$? at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
}
ab_bench() {
  bench_passes 150 "$L/ab/bench-$1.log" "$AB_C" $((AB_WAVES * AB_C)) --legs-reps 1 --tag ab
  echo "ab $1 bench_serving rc=$? at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
}
if [ "${AB_PAIRS:-0}" -gt 0 ]; then
  mkdir -p "$L/ab"
  for i in $(seq "$AB_PAIRS"); do
    [ "$(left)" -gt 80 ] || { echo "ab pair $i skipped: $(left) s left" | tee -a "$L/walltimes.txt"; break; }
    if [ $((i % 2)) -eq 1 ]; then ab_plugin "$i"; ab_bench "$i"; else ab_bench "$i"; ab_plugin "$i"; fi
  done
fi

# 3. SGLang's own benchmark client against the same server: 3 x C prompts at C in flight, the
#    server's TTFT histogram read before and after each (its window also holds bench_serving's one
#    warm-up request): a third clock, another client's reading against the same server's
# Each pass through scripts/bench_serving_legs.py: bench_serving unchanged, its requests' TTFT legs
# noted, the server's histogram read around each pass (bench-legs.jsonl); BENCH_REPS passes with
# its own connection per request, then BENCH_KEEP_REPS (default 0) with one keep-alive session
for c in ${BENCH_C:-1 64 256}; do for mode in per-request keep-alive; do
  [ "$c" != none ] || continue
  if [ "$mode" = per-request ]; then reps=${BENCH_REPS:-1}; ka=; else reps=${BENCH_KEEP_REPS:-0}; ka=--legs-keep-alive; fi
  [ "$reps" -gt 0 ] || continue
  [ "$(left)" -gt 100 ] || { echo "bench_serving c$c $mode skipped: $(left) s left" | tee -a "$L/walltimes.txt"; continue; }
  t=$SECONDS
  bench_passes $((60 + 40 * reps)) "$L/bench-serving-c$c-$mode.log" "$c" $((3 * c)) --legs-reps "$reps" $ka
  echo "bench_serving c$c $mode x$reps rc=$? wall_s=$((SECONDS - t)) at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
  grep -E "Output token throughput|Mean TTFT" "$L/bench-serving-c$c-$mode.log"
done; done
stop_server
echo "server stopped at $((SECONDS - T0)) s; sglang processes left: $(ps -eo args | grep -c '[s]glang')" \
  | tee -a "$L/walltimes.txt"

# 4. the in-process backend, if time is left (an engine start, as the server's about 100 s, and three
#    shapes: about 150 s; TLIMIT=560 leaves it that whatever the setup took)
if [ -z "${NO_INPROC:-}" ] && [ "$(left)" -gt 150 ]; then
  t=$SECONDS
  timeout "$(upto 10 300)" python3 scripts/inproc_clock.py benches/gpu/h200-clock-inproc.yaml \
    "$OUT/inproc-clock.json" "$L/inproc" > "$L/inproc.log" 2>&1
  echo "inproc rc=$? wall_s=$((SECONDS - t)) at $((SECONDS - T0)) s" | tee -a "$L/walltimes.txt"
  tail -n 8 "$L/inproc.log"
else
  echo "inproc skipped: $(left) s left" | tee -a "$L/walltimes.txt"
fi

# the summary: client vs server TTFT per cell, plugin vs bench_serving throughput per concurrency
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
def f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)
rows = []  # bench_serving's passes in order: its own JSON beside that pass's legs (same order)
p, q = out / "bench-serving.jsonl", out / "bench-legs.jsonl"
if p.exists():
    runs = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    legs = [json.loads(x) for x in q.read_text().splitlines() if x.strip()] if q.exists() else []
    for i, r in enumerate(runs):
        rows.append((r, legs[i] if i < len(legs) and legs[i].get("max_concurrency") == r.get("max_concurrency")
                     and legs[i].get("tag", legs[i].get("mode")) == r.get("tag") else None))
bench = {}
for r, _ in rows:
    if r.get("tag") in (None, "per-request"):  # bench_serving as it ships: a connection per request
        bench.setdefault(r.get("max_concurrency"), []).append(r)
def mean_tput(c):  # bench_serving's output tok/s at c, the mean of its passes
    xs = [r.get("output_throughput") for r in bench.get(c) or [] if r.get("output_throughput")]
    return sum(xs) / len(xs) if xs else None
print("plugin http backend against one SGLang server (client TTFT vs the server's own histogram):")
print(f"{'cell':34} {'procs':>5} {'client ms':>9} {'server ms':>9} {'diff ms':>8} {'diff %':>7} "
      f"{'lag p99':>7} {'send':>5} {'own p99':>7} {'intake':>7} {'server':>7} {'deliv':>6} {'d p99':>6} {'tok/s':>9} {'round tok/s':>11} "
      f"{'bench tok/s':>11} {'ratio':>6}  marked")
p = out / "h200-clock-http.json"
doc = json.loads(p.read_text()) if p.exists() else {"benchmarks": []}
for b in doc["benchmarks"]:
    e, c = b["extra_info"], b["params"]["concurrency"]
    cl, sv = e.get("client_ttft_ms_mean"), e.get("server_ttft_ms_mean")
    d = None if cl is None or sv is None else cl - sv
    bt = mean_tput(c)
    tps = e.get("output_tokens_per_s")
    tot = e.get("output_tokens_per_s_total")  # the whole rounds' tokens over their wall: bench_serving's
    print(f"{b['name'].split('[')[-1].rstrip(']'):34} {str(e.get('client_processes', '-')):>5} {f(cl):>9} "
          f"{f(sv):>9} {f(d, '{:+.2f}'):>8} {f(None if d is None or not sv else 100 * d / sv, '{:+.1f}'):>7} "
          f"{f(e.get('client_loop_lag_ms_p99')):>7} {f(e.get('ttft_send_ms_mean')):>5} {f(e.get('ttft_client_own_ms_p99')):>7} {f(e.get('ttft_intake_ms_mean')):>7} "
          f"{f(e.get('ttft_server_ms_mean')):>7} {f(e.get('ttft_delivery_ms_mean')):>6} "
          f"{f(e.get('ttft_delivery_ms_p99')):>6} {f(tps, '{:.1f}'):>9} {f(tot, '{:.1f}'):>11} {f(bt, '{:.1f}'):>11} "
          f"{f(None if not bt or tot is None else tot / bt, '{:.4f}'):>6}  "
          f"{'client_bound' if e.get('client_bound') else 'before_server_clock' if e.get('ttft_before_server_clock') else '-'}")
def mean(xs):
    return sum(xs) / len(xs) if xs else None
from pytest_specbench.stats.quantile import percentile  # the plugin's own p99 (interpolated)
for r, lg in sorted(rows, key=lambda t: (t[0].get("max_concurrency") or 0, str(t[0].get("tag")))):
    c, ttft = r.get("max_concurrency"), r.get("mean_ttft_ms")
    s_ms = n = None
    ins = srvs = dls = sends = []
    if lg:
        n = lg["after"][1] - lg["before"][1]
        s_ms = (lg["after"][0] - lg["before"][0]) / n * 1e3 if n > 0 else None
        reqs = [x for x in lg["requests"][1:] if x.get("ok") and x.get("read") and x.get("received")]  # [0]: warm-up
        ins = [(x["received"] - x["sent"]) * 1e3 for x in reqs]
        srvs = [(x["first_sent"] - x["received"]) * 1e3 for x in reqs]
        dls = sorted((x["read"] - x["first_sent"]) * 1e3 for x in reqs)
        sends = [(x["body_sent"] - x["sent"]) * 1e3 for x in reqs if x.get("body_sent")]
    print(f"bench_serving c{c} {r.get('tag') or 'per-request'}: {r.get('completed')} requests, output "
          f"{f(r.get('output_throughput'), '{:.1f}')} tok/s, mean TTFT {f(ttft)} ms, the server's over its window "
          f"{f(s_ms)} ms ({f(n, '{:g}')} requests), diff {f(None if ttft is None or s_ms is None else ttft - s_ms, '{:+.2f}')} ms, "
          f"legs of {len(dls)}: send {f(mean(sends))} intake {f(mean(ins))} server {f(mean(srvs))} delivery {f(mean(dls))} "
          f"(p99 {f(percentile(dls, 99))}) ms, duration {f(r.get('duration'))} s")
for c, rs in sorted(bench.items(), key=lambda t: t[0] or 0):
    xs = [x.get("output_throughput") for x in rs if x.get("output_throughput")]
    if xs:
        print(f"bench_serving c{c}: {len(xs)} passes, output tok/s mean {mean(xs):.1f}, min {min(xs):.1f}, max {max(xs):.1f}")
ab = sorted((out / "clock-logs" / "ab").glob("plugin-*.json"), key=lambda q: int(q.stem.split("-")[1]))
ab_bench = [r for r, _ in rows if r.get("tag") == "ab"]
if ab:
    import math
    print("interleaved throughput (AB, BA, ...): the plugin's timed round against bench_serving's pass, same workload")
    logs = []
    for i, q in enumerate(ab):
        cells = json.loads(q.read_text()).get("benchmarks") or []
        tot = cells[0]["extra_info"].get("output_tokens_per_s_total") if cells else None
        bt = ab_bench[i].get("output_throughput") if i < len(ab_bench) else None
        if tot and bt:
            logs.append(math.log(tot / bt))
        print(f"  pair {i + 1} ({'AB' if i % 2 == 0 else 'BA'}): plugin {f(tot, '{:.1f}')} tok/s, bench_serving "
              f"{f(bt, '{:.1f}')} tok/s, ratio {f(tot / bt if tot and bt else None, '{:.4f}')}")
    if len(logs) >= 2:
        n, m = len(logs), sum(logs) / len(logs)
        sd = (sum((x - m) ** 2 for x in logs) / (n - 1)) ** 0.5
        t = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365}.get(n - 1, 2.0)
        h = t * sd / n ** 0.5
        print(f"  plugin / bench_serving: x{math.exp(m):.4f} [{math.exp(m - h):.4f}, {math.exp(m + h):.4f}] "
              f"(geometric mean of {n} pairs, 95 % t-interval)")
p = out / "inproc-clock.json"
if p.exists():
    print("in-process sglang backend (client TTFT vs SGLang's histogram read in process):")
    for r in json.loads(p.read_text())["cells"]:
        cl, sv = r.get("client_ttft_ms_mean"), r.get("server_ttft_ms_mean")
        d = None if cl is None or sv is None else cl - sv
        print(f"  {r['cell']:28} client {f(cl)} ms, server {f(sv)} ms, diff {f(d, '{:+.2f}')} ms, "
              f"tok/s {f(r.get('output_tokens_per_s'), '{:.1f}')}, histograms from {r.get('histograms_from')}, "
              f"exclusive {r.get('server_latency_exclusive')}, errors {r.get('errors')}")
else:
    print("in-process sglang backend: not run (see clock-logs/walltimes.txt)")
EOF
echo "total $((SECONDS - T0)) s" | tee -a "$OUT/summary.txt"
