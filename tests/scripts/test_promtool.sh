#!/usr/bin/env bash
# Runs prefixd on stories260K, sends a small workload (plain, streamed, cached
# and invalid requests), fetches /metrics and checks it with
# `promtool check metrics` (Debian package `prometheus`). Exit 77 = skipped.
# Usage: test_promtool.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_promtool.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
model="$root/../shared/models/stories260K.gguf"
source "$(dirname "$0")/lib/prefixd_test.sh"

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found (install the Debian package prometheus); skipping"
  exit 77
fi
if ! command -v curl >/dev/null 2>&1; then
  echo "curl not found; skipping"
  exit 77
fi
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }
[[ -f "$model" ]] || { echo "missing $model"; exit 1; }

work=$(mktemp -d)
cleanup() {
  kill_prefixd
  rm -rf "$work"
}
trap cleanup EXIT

start_prefixd "$build_dir" "$work/daemon" --model "$model" --threads 1 --cache-dir "$work/cache"
port=$PREFIXD_PORT
url="http://127.0.0.1:$port"

post() { curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$url$1"; }
prompt='Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'
[[ $(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0}") == 200 ]]
[[ $(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true}") == 200 ]]
[[ $(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 4}") == 200 ]]
[[ $(post /v1/completions '{"prompt": ') == 400 ]]

curl -sS "$url/metrics" >"$work/metrics.txt"
echo "--- /metrics (first lines)"
head -n 20 "$work/metrics.txt"
grep -q '^prefixd_requests_total{status="completed"} 3$' "$work/metrics.txt" || {
  echo "expected 3 completed requests"; exit 1; }
grep -q '^prefixd_generated_tokens_total 20$' "$work/metrics.txt" || { echo "expected 20 generated tokens"; exit 1; }
echo "--- promtool check metrics"
promtool check metrics <"$work/metrics.txt"

stop_prefixd "$work/daemon"
echo "ok"
