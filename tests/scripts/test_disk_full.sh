#!/usr/bin/env bash
# The disk tier on a full disk: the daemon's --disk-cache-dir lies on an 8 MiB
# tmpfs mounted in a private mount namespace, and a filler file leaves too
# little room for RocksDB's next flush. Checks that when the disk fills,
# disk writes stop and are counted (prefixd_disk_write_errors_total,
# /v1/cache/stats), one warning is logged, every request still succeeds with
# the same tokens as a daemon without tiers; and that once the filler is
# removed the tier writes again, and a restarted daemon finds those records.
# Exit 77 = skipped (no mount namespace with tmpfs: neither root nor
# unprivileged user namespaces; or curl / python3 missing).
# Usage: test_disk_full.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_disk_full.sh BUILD_DIR}" && pwd)
source "$(dirname "$0")/lib/prefixd_test.sh"

for tool in curl python3 unshare mount; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found; skipping"
    exit 77
  fi
done
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }

# Re-run this script in a private mount namespace (as root, or as root of a
# new user namespace), so that the tmpfs is gone when it exits.
if [[ -z "${PREFIXD_DISK_FULL_IN_NS:-}" ]]; then
  export PREFIXD_DISK_FULL_IN_NS=1
  if [[ $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private bash "$0" "$@"
  elif unshare -Urm true 2>/dev/null; then
    exec unshare -Urm bash "$0" "$@"
  fi
  echo "cannot create a mount namespace (not root, and unprivileged user namespaces are off); skipping"
  exit 77
fi

work=$(mktemp -d)
mnt="$work/mnt"
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=8m,mode=0700 tmpfs "$mnt" 2>"$work/mount.err"; then
  echo "cannot mount a tmpfs in the namespace ($(cat "$work/mount.err")); skipping"
  rm -rf "$work"
  exit 77
fi
cleanup() {
  kill_prefixd
  umount "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

model="$(cd "$(dirname "$0")/../.." && pwd)/../shared/models/stories260K.gguf"
[[ -f "$model" ]] || model="$(cd "$(dirname "$0")/../.." && pwd)/models/stories260K.gguf"
common=(--model "$model" --threads 1 --kv-dtype f32 --cache-dir "$build_dir/test-cache")
# 32 MB of capacity (memtable 2 MiB) on an 8 MiB disk: the disk fills first.
disk=(--disk-cache-dir "$mnt/db" --disk-cache-gb 0.032 --restore-policy always)

py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3  # starts faster than a pyenv shim
json_get() {  # json_get PYTHON_EXPR: evaluates it with `d` = the JSON on stdin
  "$py" -c "import json, sys; d = json.load(sys.stdin); print($1)"
}
# $work/prompt_I.json: prompt I, 180 token ids (11 blocks of 16), distinct for each I.
"$py" - "$work" <<'PY'
import sys
for i in range(64):
    with open(f"{sys.argv[1]}/prompt_{i}.json", "w") as f:
        f.write(str([1] + [3 + (i * 131 + t * 17 + (t * t) % 7) % 500 for t in range(1, 180)]))
PY
# complete PORT I: the token ids of prompt I's greedy continuation (8 tokens);
# fails unless the answer is 200.
complete() {
  local out
  out=$(curl -sS -o - -w '\n%{http_code}' "http://127.0.0.1:$1/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"prompt\": $(cat "$work/prompt_$2.json"), \"max_tokens\": 8, \"temperature\": 0}")
  if [[ "${out##*$'\n'}" != 200 ]]; then
    echo "prompt $2: HTTP ${out##*$'\n'}: ${out%$'\n'*}" >&2
    return 1
  fi
  echo "${out%$'\n'*}" | json_get 'd["choices"][0]["token_ids"]'
}
disk_stat() {  # disk_stat PORT FIELD: a field of /v1/cache/stats' disk tier
  curl -sS "http://127.0.0.1:$1/v1/cache/stats" | json_get "d['tiers']['disk']['$2']"
}
fail() {
  echo "FAIL: $*"
  [[ -f "$work/daemon.err" ]] && { echo "--- daemon stderr"; cat "$work/daemon.err"; }
  [[ -f "$mnt/db/LOG" ]] && { echo "--- RocksDB LOG (errors)"; grep -i "error\|resum" "$mnt/db/LOG" | tail -n 20; }
  exit 1
}

# --- reference answers from a daemon without host or disk tiers --------------
n_prompts=64
start_prefixd "$build_dir" "$work/ref" "${common[@]}" --host-cache-gb 0
declare -a reference
for ((i = 0; i < n_prompts; ++i)); do reference[i]=$(complete "$PREFIXD_PORT" "$i"); done
stop_prefixd "$work/ref"

# --- the disk fills ------------------------------------------------------------
start_prefixd "$build_dir" "$work/daemon" "${common[@]}" "${disk[@]}"
port=$PREFIXD_PORT
avail=$(df --output=avail -B1 "$mnt" | tail -n1)
# Leave 1.5 MiB: less than one memtable flush (2 MiB of records).
head -c $((avail - 1536 * 1024)) /dev/zero >"$mnt/filler" 2>/dev/null || true
echo "tmpfs: $(df --output=avail -B1 "$mnt" | tail -n1) bytes free after the filler"

next=0
check_next() {  # sends prompt $next and checks its answer against the reference
  local got
  got=$(complete "$port" "$next") || fail "prompt $next was not answered"
  [[ "$got" == "${reference[next]}" ]] || fail "prompt $next: got $got, expected ${reference[next]}"
  next=$((next + 1))
}
while ((next < 40)); do
  check_next
  [[ $(disk_stat "$port" write_errors) -gt 0 ]] && break
done
# Writes are asynchronous: wait (bounded) for the first failed write.
for _ in $(seq 1 100); do
  [[ $(disk_stat "$port" write_errors) -gt 0 ]] && break
  sleep 0.1
done
errors=$(disk_stat "$port" write_errors)
((errors > 0)) || fail "no write error after $next prompts on a full disk"
[[ $(disk_stat "$port" writes_stopped) == True ]] || fail "writes_stopped is not true"
echo "disk full after $next prompts: $errors write errors"
# More requests while the disk is full: all answered as before.
stop_at=$((next + 10))
while ((next < stop_at)); do check_next; done
metrics=$(curl -sS "http://127.0.0.1:$port/metrics")
grep -q '^prefixd_disk_write_errors_total [1-9]' <<<"$metrics" || fail "prefixd_disk_write_errors_total is 0"
grep -q '^prefixd_disk_writes_stopped 1' <<<"$metrics" || fail "prefixd_disk_writes_stopped is not 1"
n_lines=$(grep -c "a write failed" "$work/daemon.err" || true)
[[ "$n_lines" == 1 ]] || fail "expected one 'a write failed' log line, found $n_lines"

# --- space returns -------------------------------------------------------------
inserts_before=$(disk_stat "$port" blocks)
rm -f "$mnt/filler"
# And the tmpfs grows past the tier's capacity: the prompts sent until the
# retry succeeds (more on a loaded machine) cannot fill it again before the
# restart below, whose records the shutdown's final flush must write.
mount -o remount,size=64m "$mnt" || fail "cannot grow the tmpfs"
resumed=0
for _ in $(seq 1 60); do
  ((next < n_prompts)) || break
  check_next
  if [[ $(disk_stat "$port" writes_stopped) == False ]]; then
    resumed=1
    break
  fi
  sleep 0.5
done
((resumed == 1)) || fail "writes did not resume within 30 s after the filler was removed"
last=$((next - 1))
# One more prompt after resumption; its blocks are written (wait for them).
check_next
last=$((next - 1))
for _ in $(seq 1 100); do
  (($(disk_stat "$port" blocks) >= inserts_before + 11)) && break
  sleep 0.1
done
blocks_after=$(disk_stat "$port" blocks)
((blocks_after >= inserts_before + 11)) || fail "no new disk blocks after resuming ($inserts_before -> $blocks_after)"
grep -q "writes resumed" "$work/daemon.err" || fail "no 'writes resumed' log line"
n_lines=$(grep -c "a write failed" "$work/daemon.err" || true)
[[ "$n_lines" == 1 ]] || fail "expected one 'a write failed' log line in all, found $n_lines"
echo "writes resumed: disk blocks $inserts_before -> $blocks_after"
stop_prefixd "$work/daemon"

# --- the records written after resuming are on disk ---------------------------
start_prefixd "$build_dir" "$work/daemon2" "${common[@]}" "${disk[@]}"
lookup=$(curl -sS "http://127.0.0.1:$PREFIXD_PORT/v1/cache/lookup" -H 'Content-Type: application/json' \
  -d "{\"prompt\": $(cat "$work/prompt_$last.json")}")
disk_tokens=$(json_get 'd["disk_tokens"]' <<<"$lookup")
if [[ "$disk_tokens" != 176 ]]; then
  echo "--- first daemon's stderr"; cat "$work/daemon.err"
  cp "$work/daemon2.err" "$work/daemon.err"
  fail "after restart prompt $last has $disk_tokens disk tokens, expected 176"
fi
got=$(complete "$PREFIXD_PORT" "$last")
[[ "$got" == "${reference[last]}" ]] || fail "after restart prompt $last: got $got"
stop_prefixd "$work/daemon2"
echo "PASS: disk full survived ($errors write errors, one warning), writes resumed, records kept"
