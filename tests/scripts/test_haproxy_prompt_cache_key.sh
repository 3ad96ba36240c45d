#!/usr/bin/env bash
# ops/haproxy/haproxy.cfg routes on OpenAI's prompt_cache_key and on
# Anthropic's system prompt: 3 prefixd replicas (stories260K for completions,
# demo for /v1/messages) behind HAProxy on loopback. Checks:
#   1. completions with one prompt_cache_key and 8 different prompts all go to
#      one replica, while the same 8 prompts without the key go to more than one
#      (the key, not the prompt, keeps them together);
#   2. each of 12 keys keeps its requests on one replica, and the keys use more
#      than one replica;
#   3. /v1/messages bodies with one `system` (a string, or its first text
#      block) and different user turns go to one replica.
# Every wait is bounded. Exit 77 = skipped (haproxy, curl or python3 missing).
# Usage: test_haproxy_prompt_cache_key.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_haproxy_prompt_cache_key.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/lib/prefixd_test.sh"
config="$root/ops/haproxy/haproxy.cfg"
model="$root/../shared/models/stories260K.gguf"
for tool in haproxy curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found; skipping"; exit 77; }
done
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }

work=$(mktemp -d)
pids=() ports=() haproxy_pid=""
cleanup() {
  local p
  for p in "$haproxy_pid" "${pids[@]}"; do
    [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -s "$work/haproxy.log" ]] && tail -n 15 "$work/haproxy.log"
  exit 1
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_cluster() {  # start_cluster NAME MODEL: 3 replicas and HAProxy in front of them
  local i
  for i in 0 1 2; do
    start_prefixd "$build_dir" "$work/r$i-$1" -m "$2" --threads 1 --host-cache-gb 0 \
      --cache-dir "$build_dir/test-cache"
    pids+=("$PREFIXD_PID")
    ports+=("$PREFIXD_PORT")
  done
  PREFIXD_PID=""
  front_port=$(free_port)
  export PREFIXD_CLUSTER_BIND="127.0.0.1:$front_port" PREFIXD_REPLICA_1="127.0.0.1:${ports[0]}" \
    PREFIXD_REPLICA_2="127.0.0.1:${ports[1]}" PREFIXD_REPLICA_3="127.0.0.1:${ports[2]}"
  haproxy -c -q -f "$config" || fail "haproxy -c refuses $config"
  haproxy -db -f "$config" >"$work/haproxy.log" 2>&1 &
  haproxy_pid=$!
  front="http://127.0.0.1:$front_port"
  for _ in $(seq 1 100); do
    curl -fsS "$front/health" >/dev/null 2>&1 && return 0
    kill -0 "$haproxy_pid" 2>/dev/null || fail "haproxy exited"
    sleep 0.1
  done
  fail "no /health through HAProxy"
}
stop_cluster() {
  local p
  for p in "$haproxy_pid" "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=() ports=() haproxy_pid=""
}
# replica PATH BODY: POSTs BODY through HAProxy; prints the answering replica (r1..r3).
replica() {
  local headers
  headers=$(curl -fsS -o /dev/null -D - "$front$1" -H 'Content-Type: application/json' -d "$2") ||
    fail "POST $1 failed: $2"
  tr -d '\r' <<<"$headers" | sed -n 's/^[Xx]-[Pp]refixd-[Rr]eplica: //p'
}
distinct() { sort -u | wc -l; }

start_cluster stories "$model"
prompts=("Once upon a time" "Lily had a red ball" "The sun was hot" "Tom saw a big dog"
         "A little bird sang" "One day the cat" "Mom made a cake" "The boat was blue")
with_key=() without_key=()
for p in "${prompts[@]}"; do
  with_key+=("$(replica /v1/completions "{\"prompt\": \"$p\", \"max_tokens\": 1, \"prompt_cache_key\": \"caller-A\"}")")
  without_key+=("$(replica /v1/completions "{\"prompt\": \"$p\", \"max_tokens\": 1}")")
done
n=$(printf '%s\n' "${with_key[@]}" | distinct)
((n == 1)) || fail "one prompt_cache_key went to $n replicas: ${with_key[*]}"
n=$(printf '%s\n' "${without_key[@]}" | distinct)
((n > 1)) || fail "8 different prompts without a key all went to ${without_key[0]}: the check would not tell"
echo "ok   one prompt_cache_key, 8 prompts: ${with_key[0]} (without the key: ${without_key[*]})"

firsts=()
for k in $(seq 1 12); do
  a=$(replica /v1/completions "{\"prompt\": \"Once upon a time\", \"max_tokens\": 1, \"prompt_cache_key\": \"user-$k\"}")
  b=$(replica /v1/completions "{\"prompt\": \"The boat was blue\", \"max_tokens\": 1, \"prompt_cache_key\": \"user-$k\"}")
  [[ "$a" == "$b" ]] || fail "prompt_cache_key user-$k went to $a and $b"
  firsts+=("$a")
done
n=$(printf '%s\n' "${firsts[@]}" | distinct)
((n > 1)) || fail "12 keys all went to ${firsts[0]}"
echo "ok   12 keys, each on one replica, $n replicas used"
stop_cluster

start_cluster demo demo
system="You are a patient guide to the sea. Answer in one short sentence."
msgs=()
for q in "What is a tide?" "Why is the sea salty?" "How deep is the ocean?" "What is a reef?"; do
  msgs+=("$(replica /v1/messages "{\"model\": \"demo\", \"max_tokens\": 1, \"system\": \"$system\", \"messages\": [{\"role\": \"user\", \"content\": \"$q\"}]}")")
  msgs+=("$(replica /v1/messages "{\"model\": \"demo\", \"max_tokens\": 1, \"system\": [{\"type\": \"text\", \"text\": \"$system\"}], \"messages\": [{\"role\": \"user\", \"content\": \"$q\"}]}")")
done
n=$(printf '%s\n' "${msgs[@]}" | distinct)
((n == 1)) || fail "one Anthropic system prompt went to $n replicas: ${msgs[*]}"
echo "ok   one Anthropic system prompt (string and block), 8 requests: ${msgs[0]}"
