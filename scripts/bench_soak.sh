#!/usr/bin/env bash
# Benchmark (prints numbers; not a test): write-through under sustained load.
# For each configuration the real daemon serves `prefixctl bench` rounds back
# to back for M minutes with C streaming clients (enough to keep every compute
# thread busy); each round brings K new system prompts (its own seed) shared
# by its requests, so new prefixes keep arriving while old ones are hit. Then
# it prints the serving throughput and what the disk tier did: blocks
# written, writes dropped, and the lag from a block's queueing (when it was
# computed, before its request finished) to its record being stored.
#
#   scripts/bench_soak.sh [--model FILE] [--build DIR] [--minutes M] [--concurrency C]
#                         [--system-prompts K] [--requests-per-round N]
#                         [--system-tokens S] [--question-tokens Q] [--output-tokens O]
#                         [--configs "off idle batch:10"] [-- extra prefixd flags]
#
# A configuration is `off` (no disk tier) or a --cache-writer-priority value
# (disk tier on, write-through). Without --model it generates smol-135m BF16.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
model=""
minutes=10
C=4
K=2
N=16
S=1000
Q=100
O=16
configs="off batch:10"
extra=()
while (($#)); do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --concurrency) C="$2"; shift 2 ;;
    --system-prompts) K="$2"; shift 2 ;;
    --requests-per-round) N="$2"; shift 2 ;;
    --system-tokens) S="$2"; shift 2 ;;
    --question-tokens) Q="$2"; shift 2 ;;
    --output-tokens) O="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_soak: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "bench_soak: needs python3" >&2; exit 2; }

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -z "$model" ]]; then
  model="$work/smol-135m-bf16.gguf"
  "$build/prefixd" gen-model --preset smol-135m --dtype bf16 -o "$model" >/dev/null
fi

free_port() {
  for _ in $(seq 100); do
    local p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "bench_soak: no free port" >&2
  exit 1
}

# run_config NAME: serves M minutes of rounds, prints one result line.
run_config() {
  local name=$1 port disk_flags=()
  port=$(free_port)
  rm -rf "$work/disk"
  if [[ "$name" != off ]]; then disk_flags=(--disk-cache-dir "$work/disk" --cache-writer-priority "$name"); fi
  "$build/prefixd" -m "$model" --port "$port" "${disk_flags[@]}" "${extra[@]}" >"$work/daemon.log" 2>&1 &
  pid=$!
  local healthy=0
  for _ in $(seq 1200); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then healthy=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if ((healthy == 0)); then
    echo "bench_soak: prefixd did not become healthy; its log:" >&2
    cat "$work/daemon.log" >&2
    exit 1
  fi
  local t0 t1 round=0 requests=0
  t0=$(date +%s.%N)
  local end=$(( $(date +%s) + minutes * 60 ))
  while (( $(date +%s) < end )); do
    round=$((round + 1))
    "$build/prefixctl" --port "$port" bench -q --seed "$round" --system-prompts "$K" --requests "$N" \
      --concurrency "$C" --order random --system-tokens "$S" --question-tokens "$Q" --output-tokens "$O" \
      >"$work/bench.txt"
    requests=$((requests + N))
  done
  t1=$(date +%s.%N)
  curl -fsS "http://127.0.0.1:$port/v1/cache/stats" >"$work/stats_end.json"
  # Queued writes still pending when the load stopped: wait for them (bounded).
  for _ in $(seq 600); do
    curl -fsS "http://127.0.0.1:$port/v1/cache/stats" >"$work/stats.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["tiers"]["disk"]; sys.exit(0 if d.get("pending_write_bytes",0)==0 else 1)' \
      "$work/stats.json" && break
    sleep 0.1
  done
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
  python3 - "$name" "$work/stats_end.json" "$work/stats.json" "$t0" "$t1" "$requests" <<'EOF'
import json, sys
name, end_path, path, t0, t1, requests = sys.argv[1:]
end, s = json.load(open(end_path)), json.load(open(path))
wall = float(t1) - float(t0)
tokens = end["prefill_tokens"] + end["generated_tokens"]
line = (f"{name:>9}: {int(requests):5d} requests in {wall:6.1f} s, {int(requests) / wall:6.2f} req/s, "
        f"{tokens / wall:8.1f} tok/s (prefill+generated), hit {end['tokens_saved'] / max(1, end['prompt_tokens']):.3f}")
disk = s["tiers"]["disk"]
if name != "off":
    lag = disk["write_lag_ms"]
    line += (f"\n           disk: {lag['count']} blocks written"
             f", {disk['writes_dropped']} dropped, lag p50 {lag['p50']:.1f} ms,"
             f" p99 {lag['p99']:.1f} ms, max {lag['max']:.1f} ms")
print(line)
EOF
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
echo "prefixd bench_soak: $(basename "$model"), $minutes min per configuration, C=$C K=$K (new per round) N=$N S=$S Q=$Q O=$O"
echo "CPU: $cpu, $(nproc) cores"
for c in $configs; do run_config "$c"; done
