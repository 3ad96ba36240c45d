#!/usr/bin/env bash
# The one script a GPU session runs on the device: unpacks a bundle made by
# scripts/bundle.sh, then runs, each step under `timeout` within one overall
# budget (default 420 s), logs in $OUT (default $TMPDIR/prefixd-gpu-check/out):
#   ops        test_cuda_ops (every op, every block format, golden forward passes)
#   cudnn      the cuDNN the backend loads (version, path) and the GPU's device
#              description, saved as $OUT/cudnn_h100_device.json: commit it as
#              tests/data/cudnn_h100_device.json (the deviceless plan test's)
#   sanitize   compute-sanitizer memcheck and racecheck on the rope and attention
#              cases (skipped when compute-sanitizer is not installed)
#   e2e        stories260K served with --backend cuda and --backend cpu: greedy
#              48-token texts must be equal; disk tier hit after a restart on cuda
#   gen        prefixd gen-model --preset llama-1b --dtype bf16 (2.2 GB), timed
#   forward    bench_forward --backend cuda on llama-1b: pp512, pp2048, tg128
#   engine     bench_engine --backend cuda, llama-1b, RAG shape 8000 + 100, 16 out:
#              cold / warm TTFT, decode at 1/4/16 sequences, host / disk restores
#   restart    scripts/bench_restart.sh on llama-1b, 8000 + 100, pool 300 MiB,
#              --backend cuda --host-cache-gb 4 (the issue's daemon figures)
#   tput       the daemon on llama-1b (--kv-pool-mib 8192 --max-concurrent 64):
#              prefixctl bench, 8 system prompts x 2000 tokens, 16 clients, 64
#              requests, 64 out; then one client decoding 256 tokens at context 500
#   hf         only with GPU_CHECK_HF=FILE: python3 FILE, the HF transformers
#              anchor on the same shape (../shared/gpu/hf_anchor.py, carried in)
# and prints one summary table (also $OUT/summary.txt).
#
#   scripts/gpu_check.sh BUNDLE.tar.xz
#   GPU_CHECK_STEPS=ops,e2e scripts/gpu_check.sh ...   (a subset, in the order above)
#   GPU_CHECK_BUDGET_S=420                             (overall seconds)
#   GPU_CHECK_CUDA_GRAPHS=off  forward and engine with every decode op launched on
#                          its own (with PREFIXD_CUDNN_LIB=off: the "before" figures)
#   PREFIXD_CUDNN_LIB=off  the simple attention kernels only (the "before" figures);
#                          unset: PyTorch's cuDNN (python3's nvidia/cudnn/lib) when
#                          there is one, else the backend's own search (auto)
#   GPU_CHECK_DRY_CPU=1   the same steps on the CPU with the `tiny` preset and a
#                         1000 + 100 shape: checks this script's plumbing on a
#                         machine without a GPU (its figures mean nothing)
set -uo pipefail

[[ $# -eq 1 && -f "$1" ]] || { echo "usage: scripts/gpu_check.sh BUNDLE.tar.xz (from scripts/bundle.sh)" >&2; exit 2; }
bundle_tar=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=${TMPDIR:-/tmp}/prefixd-gpu-check
OUT=${OUT:-$work/out}
steps=",${GPU_CHECK_STEPS:-ops,cudnn,sanitize,e2e,gen,forward,engine,restart,tput,hf},"
budget_s=${GPU_CHECK_BUDGET_S:-420}
dry=${GPU_CHECK_DRY_CPU:-0}
graphs=${GPU_CHECK_CUDA_GRAPHS:-on}
backend=cuda preset=llama-1b system=8000 pool_mib=300 threads=8
if [[ "$dry" == 1 ]]; then backend=cpu preset=tiny system=1000 pool_mib=80 threads=2; fi
t_start=$(date +%s)
summary=()
say() { echo "== $(date +%T) $*"; }

# $work/tmp is kept: a rerun of some steps reuses the generated 1B model.
rm -rf "$work/prefixd-bundle"
mkdir -p "$work/tmp" "$OUT"
export TMPDIR="$work/tmp"  # the benchmarks' generated models: $TMPDIR/prefixd-bench-models
tar -xJf "$bundle_tar" -C "$work" || { echo "gpu_check: cannot unpack $bundle_tar" >&2; exit 1; }
B="$work/prefixd-bundle"
run="$B/bin/run"
model="$TMPDIR/prefixd-bench-models/$preset-bf16.gguf"

# step NAME MAX_S CMD...: runs CMD under `timeout` (the smaller of MAX_S and
# what is left of the budget) with output in $OUT/NAME.log; sets LAST_STATUS
# and LAST_SECS for `record`.
step() {
  local name=$1 max_s=$2; shift 2
  local left=$((budget_s - ($(date +%s) - t_start)))
  local limit=$((max_s < left ? max_s : left))
  if ((limit < 10)); then
    LAST_STATUS="no time" LAST_SECS="-"
    return 1
  fi
  say "$name (limit ${limit}s): $*"
  local t0 rc status=ok
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  ((rc == 0)) || status="rc=$rc"
  ((rc == 77)) && status=skipped
  ((rc == 124 || rc == 137)) && status=timeout
  LAST_STATUS=$status
  LAST_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
  tail -n 15 "$OUT/$name.log"
  return $rc
}
# record NAME RESULT: one summary row for the last step.
record() {
  local result=$2
  [[ "$LAST_STATUS" == "no time" ]] && result="budget of ${budget_s}s spent before this step"
  summary+=("$(printf '%-10s %-8s %6s  %s' "$1" "$LAST_STATUS" "$LAST_SECS" "$result")")
}
want() { [[ "$steps" == *",$1,"* ]]; }

# cuDNN for prefill attention: PyTorch's, else the backend's own search (auto,
# the daemon's default), unless PREFIXD_CUDNN_LIB names one (or "off"). Each
# plan bucket is checked first by bin/prefixd-cudnn-probe in a child process.
if [[ -z "${PREFIXD_CUDNN_LIB:-}" ]]; then
  export PREFIXD_CUDNN_LIB=auto
  cudnn_dir=$(python3 -c 'import os, nvidia.cudnn; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n "$cudnn_dir" && -e "$cudnn_dir/libcudnn.so.9" ]] && export PREFIXD_CUDNN_LIB=$cudnn_dir
fi
say "setup: bundle $bundle_tar, out $OUT, backend $backend, cuDNN ${PREFIXD_CUDNN_LIB:-searched by the backend}"
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  else
    echo "no nvidia-smi"
  fi
  echo "nproc $(nproc)"
  for p in prefixd test_cuda_ops; do echo "ldd $p:"; "$run" ldd "$B/bin/$p"; done
} >"$OUT/setup.log" 2>&1
head -n 1 "$OUT/setup.log"
grep -E "not found|cublas|cudart" "$OUT/setup.log"

# ops: each cuDNN plan bucket the tests meet is first checked in a child
# process (2-3 s each, ~20-30 buckets): a longer limit than the tests alone need.
if want ops; then
  step ops 240 "$run" test_cuda_ops --duration=true
  record ops "$(grep -E '^skipped|^\[doctest\] (test cases|assertions)' "$OUT/ops.log" | tr -s ' ' | tr '\n' ' ')"
fi

if want cudnn; then
  if [[ -x "$B/bin/test_cudnn_deviceless" ]]; then
    step cudnn 60 "$run" test_cudnn_deviceless --dump "$OUT/cudnn_h100_device.json"
    record cudnn "$(grep -E '^cuDNN|^skipped|^wrote' "$OUT/cudnn.log" | tr '\n' ' ')"
  else
    summary+=("$(printf '%-10s %-8s %6s  %s' cudnn skipped - "bundle built without cuDNN headers")")
  fi
fi

if want sanitize; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [[ -z "$cs" ]]; then
    summary+=("$(printf '%-10s %-8s %6s  %s' sanitize skipped - "compute-sanitizer not installed")")
  else
    for tool in memcheck racecheck; do
      # --target-processes all: the cuDNN buckets' child checks (prefixd-cudnn-probe) are checked too.
      step "$tool" 90 "$run" "$cs" --tool "$tool" --target-processes all --error-exitcode 3 "$B/bin/test_cuda_ops" \
        "-tc=rope*,kv_store and paged attention*"
      record "$tool" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -n 1)"
    done
  fi
fi

# The e2e step: a function run by `timeout bash -c`, so everything it uses is
# exported; every daemon it starts is listed in $work/daemon.pids and killed
# at the end even if the step timed out.
export run OUT work backend
export E2E_PORT=$((20000 + RANDOM % 20000))
export E2E_PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day,"
: >"$work/daemon.pids"
start_daemon() {  # start_daemon NAME ARGS...: waits for /health (30 s); sets dpid
  local name=$1; shift
  "$run" prefixd --host 127.0.0.1 --port "$E2E_PORT" "$@" >"$OUT/daemon-$name.log" 2>&1 &
  dpid=$!
  echo "$dpid" >>"$work/daemon.pids"
  for _ in $(seq 300); do
    curl -fsS "127.0.0.1:$E2E_PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
  done
  echo "daemon $name did not start:"; tail -n 20 "$OUT/daemon-$name.log"; return 1
}
stop_daemon() { kill -TERM "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
attention_health() {  # attention_health NAME: /health to $OUT/health-NAME.json; prints the attention paths
  curl -fsS --max-time 10 "127.0.0.1:$E2E_PORT/health" >"$OUT/health-$1.json" 2>/dev/null || return 0
  python3 -c 'import json,sys; a=json.load(open(sys.argv[1])).get("attention") or {}
for k, v in a.items():
    if isinstance(v, str): print("ATTENTION %s: %s" % (k, v))
for n, p in (a.get("paths") or {}).items(): print("ATTENTION path %s: %s, %d calls (%s)" % (n, "on" if p["enabled"] else "off", p["calls"], p["detail"]))
for c in a.get("self_checks") or []: print("SELF-CHECK %s %s: %s (max error %s, tolerance %s) %s" % (c["path"], c["shape"], "passed" if c["passed"] else "FAILED", c["max_error"], c["tolerance"], c["error"]))' "$OUT/health-$1.json"
}
complete() {  # greedy 48 tokens of $E2E_PROMPT: prints the text (JSON), then cached tokens
  python3 -c 'import json,os; print(json.dumps({"prompt": os.environ["E2E_PROMPT"], "max_tokens": 48, "temperature": 0}))' |
    curl -fsS --max-time 30 "127.0.0.1:$E2E_PORT/v1/completions" -H 'Content-Type: application/json' -d @- |
    python3 -c 'import json,sys; r=json.load(sys.stdin); u=r["usage"]
print(json.dumps(r["choices"][0]["text"])); print((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0))'
}
e2e() {
  local bad=0 cached
  start_daemon cpu --backend cpu -t 8 && complete >"$OUT/e2e-cpu.txt"; stop_daemon
  rm -rf "$work/disk"
  if start_daemon cuda --backend "$backend" --disk-cache-dir "$work/disk"; then
    complete >"$OUT/e2e-cuda.txt"; complete >"$OUT/e2e-cuda-again.txt"; attention_health e2e; stop_daemon
    start_daemon cuda-restart --backend "$backend" --disk-cache-dir "$work/disk" && complete >"$OUT/e2e-cuda-restart.txt"
    stop_daemon
  fi
  echo "cpu:  $(head -n 1 "$OUT/e2e-cpu.txt" 2>/dev/null)"
  echo "$backend: $(head -n 1 "$OUT/e2e-cuda.txt" 2>/dev/null)"
  if [[ -s "$OUT/e2e-cpu.txt" ]] && cmp -s <(head -n 1 "$OUT/e2e-cpu.txt") <(head -n 1 "$OUT/e2e-cuda.txt"); then
    echo "E2E: $backend text == cpu text"
  else
    echo "E2E: TEXT DIFFERS"; bad=1
  fi
  cached=$(sed -n 2p "$OUT/e2e-cuda-restart.txt" 2>/dev/null)
  echo "after the restart: cached_tokens ${cached:-none}"
  [[ -n "$cached" && "$cached" -gt 0 ]] || bad=1
  return $bad
}
export -f start_daemon stop_daemon attention_health complete e2e
if want e2e; then
  step e2e 60 bash -c e2e
  record e2e "$(grep -E '^E2E' "$OUT/e2e.log") ($(grep -E '^after the restart' "$OUT/e2e.log"))"
fi

if want gen; then
  mkdir -p "$(dirname "$model")"
  step gen 90 "$run" prefixd gen-model --preset "$preset" --dtype bf16 -o "$model"
  record gen "$preset bf16: $(stat -c %s "$model" 2>/dev/null || echo 0) bytes"
fi

if want forward; then
  step forward 90 "$run" bench_forward --backend "$backend" --models "$preset:bf16" --reps 2 --threads "$threads" --cuda-graphs "$graphs"
  record forward "$(grep -E "^$preset" "$OUT/forward.log" | awk '{printf "pp512 %s, pp2048 %s, tg128 %s t/s", $3, $4, $5}')"
fi

if want engine; then
  step engine 150 "$run" bench_engine --backend "$backend" --cuda-graphs "$graphs" --model "$preset:bf16" --system "$system" \
    --question 100 --out 16 --reps 2 --threads "$threads" --tiers "$work/tiers"
  record engine "$(awk '
    function ttft(line) { sub(/.*TTFT +/, "", line); sub(/ ms.*/, "", line); return line }
    function gbps(line) { sub(/ GB\/s.*/, "", line); sub(/.*, /, "", line); return line }
    /^cold TTFT \(/ { c = $5 } /^warm TTFT \(/ { w = $8 }
    /from host RAM/ { h = ttft($0) " ms, restore " gbps($0) " GB/s" }
    /from disk after reopening/ { d = ttft($0) " ms, restore " gbps($0) " GB/s" }
    /^1 +[0-9.]+ +[0-9.]+$/ { t1 = $2 } /^16 +[0-9.]+ +[0-9.]+$/ { t16 = $2 }
    END { printf "cold %s ms, warm %s ms; host hit %s; disk after reopen %s; decode %s t/s (1 seq), %s t/s (16)",
                 c, w, h, d, t1, t16 }' "$OUT/engine.log")"
fi

if want restart; then
  step restart 120 "$run" bash "$B/scripts/bench_restart.sh" --build "$B/bin" --model "$model" \
    --system-tokens "$system" --question-tokens 100 --output-tokens 16 --pool-mib "$pool_mib" \
    -- --backend "$backend" --host-cache-gb 4
  record restart "$(awk -F'  +' '/^cold TTFT|^host-tier hit|^first request/{printf "%s: %s; ", $1, $2}' "$OUT/restart.log")"
fi

# The tput step: as e2e, a function under `timeout bash -c`.
export model
tput() {
  start_daemon tput --backend "$backend" --model "$model" --kv-pool-mib 8192 --max-concurrent 64 || return 1
  "$run" prefixctl --port "$E2E_PORT" bench -q --system-prompts 8 --system-tokens 2000 --question-tokens 100 \
    --concurrency 16 --requests 64 --output-tokens 64 --vocab-lo 300 --vocab-hi 31000 >"$OUT/tput-16.txt"
  local rc=$?
  "$run" prefixctl --port "$E2E_PORT" bench -q --system-prompts 1 --system-tokens 500 --question-tokens 10 \
    --concurrency 1 --requests 2 --output-tokens 256 --vocab-lo 300 --vocab-hi 31000 --seed 9 >"$OUT/tput-1.txt"
  rc=$((rc | $?))
  attention_health tput
  stop_daemon
  echo "16 clients:"; cat "$OUT/tput-16.txt"; echo "1 client, 256 out:"; cat "$OUT/tput-1.txt"
  return $rc
}
export -f tput
if want tput; then
  step tput 120 bash -c tput
  grep -E '^(ATTENTION|SELF-CHECK)' "$OUT/tput.log" | head -n 12
  record tput "16 clients: $(grep -iE 'output tok' "$OUT/tput-16.txt" | head -n 1 | tr -s ' '); 1 client: $(grep -iE 'output tok' "$OUT/tput-1.txt" | head -n 1 | tr -s ' ')"
fi

if want hf && [[ -n "${GPU_CHECK_HF:-}" ]]; then
  step hf 120 python3 "$GPU_CHECK_HF"
  record hf "$(grep -E '^hf ' "$OUT/hf.log" | sed -E 's/ \(.*//' | tr '\n' ';')"
fi

# Daemons a timed-out step left behind (by pid, never by name).
while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$work/daemon.pids"
total=$(( $(date +%s) - t_start ))
{
  echo
  echo "prefixd gpu_check: $(head -n 1 "$OUT/setup.log"), backend $backend, ${total}s of ${budget_s}s"
  printf '%-10s %-8s %6s  %s\n' step status secs result
  for l in "${summary[@]}"; do echo "$l"; done
} | tee "$OUT/summary.txt"
