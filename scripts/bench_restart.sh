#!/usr/bin/env bash
# Benchmark (prints numbers; not a test): TTFT of the first request after a
# restart, against a host-tier hit and a cold request, through the real
# daemon and `prefixctl bench`. RAG shape: S-token system prompts, Q-token
# questions, O output tokens, one client.
#
#   scripts/bench_restart.sh [--model FILE] [--build DIR] [--drop-caches] [--pool-mib N]
#                            [--system-tokens S] [--question-tokens Q] [--output-tokens O]
#                            [-- extra prefixd flags]
#
# 1. prefixd starts with a disk tier and a device pool that holds one prompt.
# 2. cold: system prompt A with its first question (nothing cached).
# 3. host hits: A and B alternate with new questions, so each request finds
#    its system prompt evicted from the pool to host RAM.
# 4. SIGTERM, optionally the page cache dropped (--drop-caches, root only:
#    a restart after a reboot), start again; start-up is timed to /health.
# 5. the first request after the restart: A with a new question (disk hit).
# Without --model it generates smol-135m BF16 (prefixd gen-model).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
model=""
pool_mib=""
drop=0
S=2000
Q=100
O=16
extra=()
while (($#)); do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --drop-caches) drop=1; shift ;;
    --pool-mib) pool_mib="$2"; shift 2 ;;
    --system-tokens) S="$2"; shift 2 ;;
    --question-tokens) Q="$2"; shift 2 ;;
    --output-tokens) O="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_restart: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

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

port=""
for _ in $(seq 100); do
  p=$((20000 + RANDOM % 20000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[[ -n "$port" ]] || { echo "bench_restart: no free port" >&2; exit 1; }

# A pool a little larger than one prompt (smol-135m: 22.5 KiB of f16 KV per
# token): B's blocks evict A's to host RAM and back. --pool-mib overrides.
[[ -n "$pool_mib" ]] || pool_mib=$(( (S + Q) * 45 / 2 / 1024 + 4 ))
serve=("$build/prefixd" -m "$model" --port "$port" --disk-cache-dir "$work/disk"
       --kv-pool-mib "$pool_mib" "${extra[@]}")

# Starts prefixd and sets `pid` and `startup_s` (seconds to a healthy /health).
start_daemon() {
  local t0 t1
  t0=$(date +%s.%N)
  "${serve[@]}" >>"$work/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      t1=$(date +%s.%N)
      startup_s=$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "bench_restart: prefixd did not become healthy; its log:" >&2
  cat "$work/daemon.log" >&2
  exit 1
}

stop_daemon() {
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
}

# bench K N FIRST: prints the p50 of the "TTFT" row and the hit ratio line.
bench() {
  "$build/prefixctl" --port "$port" bench -q --system-prompts "$1" --requests "$2" \
    --first-question "$3" --system-tokens "$S" --question-tokens "$Q" --output-tokens "$O" \
    --json "$work/bench.json" >"$work/bench.txt"
  awk '/^  TTFT  /{ttft=$4} /^cache /{sub(/^cache +/, ""); cache=$0} END{printf "%s ms  (%s)", ttft, cache}' \
    "$work/bench.txt"
  # The server's split of the last request's TTFT, where python3 is at hand.
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["requests"][-1]
print("\n    last request: server queue %.1f, restore %.1f, prefill %.1f ms" % tuple(
    r.get(k) or 0 for k in ("server_queue_ms", "server_restore_ms", "server_prefill_ms")), end="")' \
      "$work/bench.json"
  fi
}

start_daemon
echo "prefixd bench_restart: model $(basename "$model"), S=$S Q=$Q O=$O, pool $pool_mib MiB"
echo "start-up to /health (empty cache)       ${startup_s} s"
echo "cold TTFT                               $(bench 1 1 0)"
bench 2 2 100 >/dev/null  # B's first request is cold; A's is the first host hit
echo "host-tier hit TTFT (p50 of 6)           $(bench 2 6 200)"
stop_daemon
if ((drop)); then
  sync
  if ! echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then echo "(cannot drop the page cache: not root)"; fi
fi
start_daemon
echo "start-up to /health (restart)           ${startup_s} s"
echo "first request after the restart        $(bench 1 1 300)"
echo "second request after the restart       $(bench 1 1 301)"
stop_daemon
