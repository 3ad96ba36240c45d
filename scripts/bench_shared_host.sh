#!/usr/bin/env bash
# Decode on a shared host: how the CPU backend's thread pool behaves when
# another process wants the same cores (prefixd beside a RAG backend). Runs
# bench_forward's decode (tg128, --prefill 0) in four settings and prints the
# tokens/s of each:
#   alone T      one decode with T threads (T = 1 and 2)
#   2 x T        two decodes started together, T threads each: the sum
#   beside busy  one 2-thread decode beside two busy loops (shell `:` loops)
# With --vs OTHER_BENCH_FORWARD the settings alternate between the two
# binaries, round by round (compare only figures of one run).
#
# Usage: scripts/bench_shared_host.sh [--bench build/tests/bench_forward]
#          [--vs OTHER] [--models smol-135m:q8_0] [--rounds 2] [--reps 3]
set -euo pipefail

bench=build/tests/bench_forward
other=""
models=smol-135m:q8_0
rounds=2
reps=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --vs) other=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "bench_shared_host.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for b in "$bench" ${other:+"$other"}; do
  [[ -x "$b" ]] || { echo "bench_shared_host.sh: '$b' is not an executable bench_forward" >&2; exit 2; }
done

tmp=$(mktemp -d)
busy_pids=()
cleanup() {
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# tg128 of one bench_forward log: the fifth column of the model's row.
tg() { awk -v m="${models%%:*}" '$1 == m { print $5 }' "$1"; }

# One decode of binary $1 with $2 threads; its log goes to $3.
# No plain read beside the reps (--plain-read 0): it would load the other decode.
decode() { "$1" --threads "$2" --reps "$reps" --prefill 0 --plain-read 0 --models "$models" >"$3" 2>&1; }

run_settings() {
  local b=$1 label=$2
  decode "$b" 1 "$tmp/a1"
  decode "$b" 2 "$tmp/a2"
  for t in 1 2; do
    decode "$b" "$t" "$tmp/p$t.x" & local p1=$!
    decode "$b" "$t" "$tmp/p$t.y" & local p2=$!
    wait "$p1" "$p2"
  done
  for i in 1 2; do (while :; do :; done) & busy_pids+=($!); done
  decode "$b" 2 "$tmp/busy"
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  busy_pids=()
  wait 2>/dev/null || true
  printf '%-10s alone 1: %6.1f  alone 2: %6.1f  2 x 1: %6.1f  2 x 2: %6.1f  beside busy: %6.1f t/s\n' "$label" \
    "$(tg "$tmp/a1")" "$(tg "$tmp/a2")" \
    "$(echo "$(tg "$tmp/p1.x") + $(tg "$tmp/p1.y")" | bc -l)" \
    "$(echo "$(tg "$tmp/p2.x") + $(tg "$tmp/p2.y")" | bc -l)" "$(tg "$tmp/busy")"
}

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $models, tg128 t/s"
for r in $(seq 1 "$rounds"); do
  run_settings "$bench" "bench"
  [[ -n "$other" ]] && run_settings "$other" "vs"
done
