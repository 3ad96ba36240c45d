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
#                         [--configs "off idle batch:10"] [--segments G] [-- extra prefixd flags]
#
# A configuration is `off` (no disk tier) or a --cache-writer-priority value
# (disk tier on, write-through). With --segments G each configuration's M
# minutes are served as G segments taken in turn (off, idle, batch:10, off,
# ...), each on a fresh daemon and disk directory, so that a shared machine's
# drift falls on every configuration alike; the figures add up the segments
# (lag: the largest p99 and max). Throughput is given as a fraction of the
# first configuration's. Without --model it generates smol-135m BF16.
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
segments=1
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
    --segments) segments="$2"; shift 2 ;;
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

# run_config NAME SECONDS: serves rounds for SECONDS on a fresh daemon, appends
# one JSON line of figures to $work/results.
run_config() {
  local name=$1 seconds=$2 port disk_flags=()
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
  local t0 t1 round=0 requests=0 end
  t0=$(date +%s.%N)
  end=$(( $(date +%s) + seconds ))
  while (( $(date +%s) < end )); do
    round=$((round + 1))
    "$build/prefixctl" --port "$port" bench -q --seed "$((segment * 1000 + round))" --system-prompts "$K" \
      --requests "$N" --concurrency "$C" --order random --system-tokens "$S" --question-tokens "$Q" \
      --output-tokens "$O" >"$work/bench.txt"
    requests=$((requests + N))
  done
  t1=$(date +%s.%N)
  curl -fsS "http://127.0.0.1:$port/v1/cache/stats" >"$work/stats_end.json"
  # Writes still queued when the load stopped: wait for them (bounded); the
  # lag figures include them.
  for _ in $(seq 600); do
    curl -fsS "http://127.0.0.1:$port/v1/cache/stats" >"$work/stats.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["tiers"]["disk"]; sys.exit(0 if d.get("pending_write_bytes",0)==0 else 1)' \
      "$work/stats.json" && break
    sleep 0.1
  done
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
  python3 - "$name" "$work/stats_end.json" "$work/stats.json" "$t0" "$t1" "$requests" >>"$work/results" <<'EOF'
import json, sys
name, end_path, path, t0, t1, requests = sys.argv[1:]
end, s = json.load(open(end_path)), json.load(open(path))
disk = s["tiers"]["disk"]
print(json.dumps({"name": name, "wall_s": float(t1) - float(t0), "requests": int(requests),
                  "tokens": end["prefill_tokens"] + end["generated_tokens"],
                  "saved": end["tokens_saved"], "prompt": end["prompt_tokens"],
                  "lag": disk.get("write_lag_ms"), "dropped": disk.get("writes_dropped", 0)}))
EOF
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
echo "prefixd bench_soak: $(basename "$model"), $minutes min per configuration in $segments segment(s), C=$C K=$K (new per round) N=$N S=$S Q=$Q O=$O"
echo "CPU: $cpu, $(nproc) cores"
seconds=$(( minutes * 60 / segments ))
for segment in $(seq "$segments"); do
  for c in $configs; do run_config "$c" "$seconds"; done
done
python3 - "$work/results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = None
for name in dict.fromkeys(r["name"] for r in rows):
    rs = [r for r in rows if r["name"] == name]
    wall = sum(r["wall_s"] for r in rs)
    req = sum(r["requests"] for r in rs)
    tok = sum(r["tokens"] for r in rs) / wall
    base = tok if base is None else base
    line = (f"{name:>9}: {req:5d} requests in {wall:6.1f} s, {req / wall:6.2f} req/s, {tok:8.1f} tok/s "
            f"(prefill+generated; {tok / base:.3f} of {rows[0]['name']}), hit "
            f"{sum(r['saved'] for r in rs) / max(1, sum(r['prompt'] for r in rs)):.3f}")
    lags = [r["lag"] for r in rs if r["lag"] and name != "off"]
    if lags:
        line += (f"\n           disk: {sum(l['count'] for l in lags)} blocks written, "
                 f"{sum(r['dropped'] for r in rs)} dropped, lag p50 {max(l['p50'] for l in lags):.1f} ms, "
                 f"p99 {max(l['p99'] for l in lags):.1f} ms, max {max(l['max'] for l in lags):.1f} ms")
    print(line)
EOF
