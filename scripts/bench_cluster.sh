#!/usr/bin/env bash
# Benchmark (prints numbers; not a test) of issue 12: `prefixctl bench`
# through HAProxy (ops/haproxy/haproxy.cfg) in front of 3 prefixd replicas,
# RAG shape (K system prompts of S tokens, Q-token questions, O output
# tokens, drawn at random), each replica's device pool holding about 3
# prompts and no host or disk tier, so what one replica cannot hold comes
# from the remote tier or is recomputed. Every run starts from empty caches.
#   (a) round robin, no remote tier   (b) round robin + remote tier
#   (c) affinity + remote tier        (d) one replica alone (no remote tier;
#                                         1 GB of host RAM: every prompt fits)
# Then a remote-tier hit against a host-tier hit (direct requests).
#
#   scripts/bench_cluster.sh [--build DIR] [--prefixctl FILE] [--model FILE] [--requests N] [--threads T]
#                            [--system-prompts K] [--system-tokens S]
#                            [--question-tokens Q] [--output-tokens O] [--vocab-hi V]
#                            [--setups abcde]   (e: the direct host-hit vs remote-hit requests)
#                            [--keep-json DIR]  (each setup's prefixctl bench JSON, per request)
# Needs memcached and haproxy. Without --model it generates smol-135m BF16.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
prefixctl=""
model=""
N=40
T=2
K=8
S=2000
Q=100
O=16
VH=1000
setups=abcde
keep=""
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --prefixctl) prefixctl="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --requests) N="$2"; shift 2 ;;
    --threads) T="$2"; shift 2 ;;
    --system-prompts) K="$2"; shift 2 ;;
    --system-tokens) S="$2"; shift 2 ;;
    --question-tokens) Q="$2"; shift 2 ;;
    --output-tokens) O="$2"; shift 2 ;;
    --vocab-hi) VH="$2"; shift 2 ;;
    --setups) setups="$2"; shift 2 ;;
    --keep-json) keep="$2"; shift 2 ;;
    *) echo "bench_cluster: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$prefixctl" ]] || prefixctl="$build/prefixctl"
for tool in memcached haproxy curl jq python3; do
  command -v "$tool" >/dev/null || { echo "bench_cluster: $tool not found" >&2; exit 1; }
done

work=$(mktemp -d)
pids=() mc_pids=() haproxy_pid=""
stop_all() {
  local p
  for p in "$haproxy_pid" "${pids[@]}"; do [[ -n "$p" ]] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "$haproxy_pid" "${pids[@]}"; do [[ -n "$p" ]] && wait "$p" 2>/dev/null || true; done
  pids=() haproxy_pid=""
}
cleanup() {
  stop_all
  local p
  for p in "${mc_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [[ -z "$model" ]]; then
  model="$work/smol-135m-bf16.gguf"
  "$build/prefixd" gen-model --preset smol-135m --dtype bf16 -o "$model" >/dev/null
fi
# smol-135m: 22.5 KiB of f16 KV per token; a pool of about 3 prompts.
pool_mib=$((3 * (S + Q) * 45 / 2 / 1024 + 4))

# Two memcached servers, large enough for every prompt's blocks.
user=()
[[ $(id -u) == 0 ]] && user=(-u root)
mc_ports=()
for i in 0 1; do
  port=$(free_port)
  memcached -l 127.0.0.1 -p "$port" -U 0 -m 1024 "${user[@]}" >"$work/memcached$i.log" 2>&1 &
  mc_pids+=($!)
  mc_ports+=("$port")
done
sleep 0.5
pool="memcached://127.0.0.1:${mc_ports[0]},127.0.0.1:${mc_ports[1]}"
head -c 32 /dev/urandom | base64 >"$work/secret"
chmod 600 "$work/secret"
flush_pool() {
  local p
  for p in "${mc_ports[@]}"; do
    python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.sendall(b"flush_all\r\n"); s.recv(100)' "$p"
  done
}

# start_replicas N HOST_GB [prefixd flags...]: N fresh replicas; sets ports.
ports=()
start_replicas() {
  local n=$1 host_gb=$2 i port
  shift 2
  ports=()
  for ((i = 0; i < n; i++)); do
    port=$(free_port)
    "$build/prefixd" -m "$model" --port "$port" --threads "$T" --kv-pool-mib "$pool_mib" \
      --host-cache-gb "$host_gb" "$@" >"$work/replica$i.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 1200); do
      curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && continue 2
      sleep 0.1
    done
    echo "bench_cluster: a replica did not start; its log:" >&2
    cat "$work"/replica*.log >&2
    exit 1
  done
}
# start_haproxy BALANCE: HAProxy in front of the replicas; sets front.
start_haproxy() {
  local port i
  port=$(free_port)
  local env=(PREFIXD_CLUSTER_BIND="127.0.0.1:$port" PREFIXD_BALANCE="$1")
  for i in "${!ports[@]}"; do env+=("PREFIXD_REPLICA_$((i + 1))=127.0.0.1:${ports[$i]}"); done
  env "${env[@]}" haproxy -db -f ops/haproxy/haproxy.cfg >"$work/haproxy.log" 2>&1 &
  haproxy_pid=$!
  front=$port
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench_cluster: haproxy did not start" >&2
  cat "$work/haproxy.log" >&2
  exit 1
}
# bench PORT LABEL: prints a table row.
bench() {
  "$prefixctl" --port "$1" bench -q --system-prompts "$K" --system-tokens "$S" \
    --question-tokens "$Q" --output-tokens "$O" --requests "$N" --order random \
    --vocab-hi "$VH" --json "$work/bench.json" >/dev/null || true  # failures are in the JSON
  [[ -z "$keep" ]] || cp "$work/bench.json" "$keep/bench-${2:1:1}.json"
  local row
  row=$(jq -r '.summary | [.hit_ratio.total * 100, (.hit_ratio.remote // 0) * 100, .ttft_ms.p50,
    .ttft_ms.p95, .failed] | @tsv' "$work/bench.json")
  # shellcheck disable=SC2086
  printf '%-34s %7.1f%% %7.1f%% %9.0f %6.0f  %s failed\n' "$2" $row
}

echo "prefixd bench_cluster: $(basename "$model"), 3 replicas x $T threads, pool $pool_mib MiB each" \
  "(about 3 prompts), no host/disk tier; K=$K S=$S Q=$Q O=$O, $N requests, random order, 1 client"
printf "%-34s %8s %8s %9s %6s\n" setup "hit" "remote" "TTFT p50" "p95 ms"
# cluster_setup LETTER BALANCE LABEL [prefixd flags...]: 3 fresh replicas
# behind HAProxy, one bench row; skipped unless LETTER is in --setups.
cluster_setup() {
  local letter=$1 balance=$2 label=$3
  shift 3
  [[ $setups == *$letter* ]] || return 0
  flush_pool
  start_replicas 3 0 "$@"
  start_haproxy "$balance"
  bench "$front" "$label"
  stop_all
}
remote=(--remote-cache "$pool" --cache-secret-file "$work/secret")
cluster_setup a roundrobin "(a) round robin, no remote tier"
cluster_setup b roundrobin "(b) round robin + remote tier" "${remote[@]}"
cluster_setup c affinity "(c) affinity + remote tier" "${remote[@]}"
if [[ $setups == *d* ]]; then
  # The reference: one replica that sees every request, with host RAM for
  # every prompt (what one big node would reach).
  start_replicas 1 1
  bench "${ports[0]}" "(d) one replica alone, 1 GB host"
  stop_all
fi
[[ $setups == *e* ]] || exit 0

# A remote-tier hit against a host-tier hit: X computes 3 prompts, then 3
# more (its pool holds 3: the first 3 go to host RAM); the first 3 again on
# X (host hits) and on Y (remote hits, Y has never seen them).
flush_pool
start_replicas 2 1 --remote-cache "$pool" --cache-secret-file "$work/secret"
one() {  # one PORT SEED QUESTION: prints the request's JSON record
  "$prefixctl" --port "$1" bench -q --system-prompts 1 --system-tokens "$S" \
    --question-tokens "$Q" --output-tokens "$O" --requests 1 --seed "$2" --first-question "$3" \
    --vocab-hi "$VH" --json "$work/one.json" >/dev/null || true
  jq -c '.requests[0]' "$work/one.json"
}
for seed in 11 12 13 14 15 16; do one "${ports[0]}" "$seed" 0 >/dev/null; done
sleep 2  # the remote tier's writes are asynchronous
: >"$work/hits.jsonl"
for seed in 11 12 13; do
  one "${ports[0]}" "$seed" 1 | jq -c '. + {where: "host"}' >>"$work/hits.jsonl"
  one "${ports[1]}" "$seed" 2 | jq -c '. + {where: "remote"}' >>"$work/hits.jsonl"
done
stop_all
echo
echo "direct requests, 3 each: TTFT ms (client / server), tokens from host or remote tier"
jq -sr 'group_by(.where)[] | "\(.[0].where) hits: " + (map("\(.ttft_ms | floor)/\(.server_ttft_ms | floor) (host \(.host_tokens), remote \(.remote_tokens // 0))") | join(", "))' \
  "$work/hits.jsonl"
jq -sr 'def med: sort | .[length / 2 | floor];
  (map(select(.where == "host") | .ttft_ms) | med) as $h |
  (map(select(.where == "remote") | .ttft_ms) | med) as $r |
  "median client TTFT: host hit \($h | floor) ms, remote hit \($r | floor) ms: remote/host = \($r / $h * 100 | round / 100)"' \
  "$work/hits.jsonl"
