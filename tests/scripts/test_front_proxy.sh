#!/usr/bin/env bash
# The shipped front proxy (ops/haproxy/haproxy-front.cfg) for real: starts
# prefixd (demo model) and HAProxy with that file on free loopback ports, sends
# a completion through the proxy, then what prefixd's HTTP library cannot bound
# by itself: a 64 MiB header line without '\n' (HAProxy must answer 400 or close
# within its 15 KiB buffer), 64 MiB of 8 KB header lines (400: at most 64
# lines) and a header sent too slowly (408 after `timeout http-request`). The daemon's peak RSS (VmHWM) must grow by less than
# 64 MiB, and it must still answer through the proxy afterwards.
# Exit 77 = skipped (haproxy, curl or python3 missing).
# Usage: test_front_proxy.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_front_proxy.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
config="$root/ops/haproxy/haproxy-front.cfg"
source "$(dirname "$0")/lib/prefixd_test.sh"

for tool in haproxy curl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found (Debian packages haproxy, curl, python3); skipping"
    exit 77
  fi
done
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }
[[ -f "$config" ]] || { echo "missing $config"; exit 1; }

work=$(mktemp -d)
haproxy_pid=""
cleanup() {
  if [[ -n "$haproxy_pid" ]] && kill -0 "$haproxy_pid" 2>/dev/null; then
    kill -TERM "$haproxy_pid" 2>/dev/null || true
    wait "$haproxy_pid" 2>/dev/null || true
  fi
  kill_prefixd
  rm -rf "$work"
}
trap cleanup EXIT

peak_rss_kib() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$PREFIXD_PID/status"; }

# --- prefixd and HAProxy ------------------------------------------------------
start_prefixd "$build_dir" "$work/daemon" --model demo --threads 1 --cache-dir "$build_dir/test-cache"
front_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
haproxy -c -q -f "$config" || { echo "haproxy -c refuses $config"; exit 1; }
PREFIXD_FRONT_BIND="127.0.0.1:$front_port" PREFIXD_BACKEND="127.0.0.1:$PREFIXD_PORT" \
  haproxy -db -f "$config" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
front="http://127.0.0.1:$front_port"
for _ in $(seq 1 100); do
  curl -fsS "$front/health" >/dev/null 2>&1 && break
  kill -0 "$haproxy_pid" 2>/dev/null || { echo "haproxy exited:"; cat "$work/haproxy.log"; exit 1; }
  sleep 0.1
done

completion() {
  curl -sS -o "$work/completion.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 2}' "$front/v1/completions"
}
code=$(completion)
[[ "$code" == 200 ]] || { echo "completion through the proxy: HTTP $code"; cat "$work/completion.json"; exit 1; }
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['usage']['completion_tokens'] == 2, d" \
  "$work/completion.json"
echo "completion through the proxy: 200"

# --- the attacks --------------------------------------------------------------
# attack.py PORT MODE: MODE "line" streams a 64 MiB header line without '\n',
# "headers" 64 MiB of 8 KB header lines (each stopping as soon as the proxy
# answers or closes, at most 60 s); "slow" sends a header line's start and then
# nothing. Prints the status the proxy answered ("closed" when it closed
# without one).
cat >"$work/attack.py" <<'PY'
import select, socket, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ")
piece = b"a" * 65536 if mode == "line" else b"\r\nX-Filler: " + b"a" * 8000
to_send = 0 if mode == "slow" else 64 << 20
answer, deadline = b"", time.time() + 60
s.setblocking(False)
while time.time() < deadline:
    r, w, _ = select.select([s], [s] if to_send > 0 else [], [], 0.1)
    if r:
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        answer += data
        if b"\r\n" in answer:
            break
    if w:
        try:
            to_send -= s.send(piece[: min(len(piece), to_send)])
        except BlockingIOError:
            pass
        except OSError:
            to_send = 0  # the proxy stopped reading: its answer may be queued
print(answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "closed")
PY

before=$(peak_rss_kib)
answer=$(python3 "$work/attack.py" "$front_port" line)
echo "64 MiB header line through the proxy: $answer"
[[ "$answer" == 400 || "$answer" == 408 || "$answer" == closed ]] ||
  { echo "the proxy let the line through (answer $answer)"; exit 1; }
answer=$(python3 "$work/attack.py" "$front_port" headers)
echo "64 MiB of 8 KB header lines through the proxy: $answer"
[[ "$answer" == 400 || "$answer" == closed ]] ||
  { echo "the proxy let the headers through (answer $answer)"; exit 1; }
start=$(date +%s)
answer=$(python3 "$work/attack.py" "$front_port" slow)
echo "a header line that stops coming: $answer after $(($(date +%s) - start)) s"
[[ "$answer" == 408 || "$answer" == closed ]] || { echo "expected 408 (timeout http-request)"; exit 1; }
after=$(peak_rss_kib)
growth=$((after - before))
echo "prefixd peak RSS grew by $growth KiB"
((growth < 64 * 1024)) || { echo "prefixd peak RSS grew by $growth KiB (limit 65536)"; exit 1; }

code=$(completion)
[[ "$code" == 200 ]] || { echo "completion after the attacks: HTTP $code"; exit 1; }
echo "completion through the proxy after the attacks: 200"
stop_prefixd "$work/daemon"
