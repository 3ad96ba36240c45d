#!/usr/bin/env bash
# Soak run (not a ctest test): one prefixd daemon (demo model, host and disk
# tiers) under 64 streaming clients for MINUTES minutes. Every 10 s it prints
# requests and tokens per second, errors so far, and the daemon's RSS; at the
# end, RSS at start, after 1 minute and at the end, and whether it grew after
# warm-up. Prompts mix 8 shared system prompts (cache hits) with unique
# questions and some wholly unique prompts (misses, evictions, disk writes).
# Usage: tests/soak/soak.sh MINUTES [BUILD_DIR] [-- extra prefixd flags]
# Environment: SOAK_CLIENTS (64), SOAK_MAX_TOKENS (32), SOAK_MODEL (demo).
set -euo pipefail
minutes=${1:?usage: soak.sh MINUTES [BUILD_DIR] [-- prefixd flags]}
shift
build_dir=build
if [[ $# -gt 0 && "$1" != "--" ]]; then build_dir=$1; shift; fi
[[ $# -gt 0 && "$1" == "--" ]] && shift
build_dir=$(cd "$build_dir" && pwd)
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd (build the prefixd target)"; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed"; exit 1; }

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

: >"$work/out"  # exists before the loop reads it (see start_prefixd in tests/scripts/lib)
"$build_dir/prefixd" --port 0 --model "${SOAK_MODEL:-demo}" --threads 2 \
  --cache-dir "$build_dir/test-cache" --host-cache-gb 0.25 --disk-cache-dir "$work/disk" \
  --disk-cache-gb 1 --max-concurrent 64 "$@" >"$work/out" 2>"$work/err" &
pid=$!
port=""
for _ in $(seq 1 1200); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$work/out" | head -n1)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "prefixd exited:"; cat "$work/err"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "prefixd did not start"; cat "$work/err"; exit 1; }
echo "prefixd pid $pid on port $port; $minutes min, ${SOAK_CLIENTS:-64} streaming clients"

python3 - "$port" "$pid" "$minutes" "${SOAK_CLIENTS:-64}" "${SOAK_MAX_TOKENS:-32}" <<'PY'
import http.client, json, random, sys, threading, time

port, pid, minutes, n_clients, max_tokens = (int(sys.argv[1]), int(sys.argv[2]),
                                             float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
words = ("the a cat dog little big house tree river story girl boy happy sad run jump play "
         "sun moon star friend ball park garden door window red blue green").split()
systems = [" ".join(random.Random(k).choice(words) for _ in range(120)) for k in range(8)]
lock = threading.Lock()
done = {"requests": 0, "tokens": 0, "errors": 0}
last_error = [""]
deadline = time.time() + minutes * 60

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1

def client(i):
    rng = random.Random(1000 + i)
    conn = None
    n = 0
    while time.time() < deadline:
        n += 1
        question = " ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))
        prompt = (question if n % 10 == 0 else systems[rng.randrange(8)] + " " + question)
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.7,
                           "seed": n, "stream": True})
        tokens, ok = 0, False
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    ok = True
                    break
                event = json.loads(payload)
                if "error" in event:
                    raise RuntimeError(event["error"].get("message", "error event"))
                choices = event.get("choices") or [{}]
                if choices[0].get("finish_reason") is None:
                    tokens += 1
            r.read()
            if not ok:
                raise RuntimeError("stream ended without [DONE]")
        except Exception as e:  # counted; a new connection next time
            with lock:
                done["errors"] += 1
                last_error[0] = repr(e)[:200]
            if conn is not None:
                conn.close()
            conn = None
            continue
        with lock:
            done["requests"] += 1
            done["tokens"] += tokens

threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_clients)]
t0 = time.time()
rss = {0: rss_kib()}
for t in threads:
    t.start()
prev = (t0, 0, 0)
samples = []
while time.time() < deadline:
    time.sleep(max(0.0, min(10.0, deadline - time.time())))
    now = time.time()
    with lock:
        req, tok, err = done["requests"], done["tokens"], done["errors"]
    r = rss_kib()
    samples.append((now - t0, r))
    dt = now - prev[0]
    print(f"t={now - t0:6.0f}s  {(req - prev[1]) / dt:6.1f} req/s  {(tok - prev[2]) / dt:7.1f} tok/s"
          f"  requests {req}  errors {err}  RSS {r / 1024:7.1f} MiB", flush=True)
    prev = (now, req, tok)
for t in threads:
    t.join(timeout=150)
at_1min = next((r for s, r in samples if s >= 60), samples[-1][1] if samples else -1)
end = samples[-1][1] if samples else -1
print(f"RSS: start {rss[0] / 1024:.1f} MiB, 1 min {at_1min / 1024:.1f} MiB, end {end / 1024:.1f} MiB"
      f" (after warm-up {'+' if end >= at_1min else ''}{(end - at_1min) / 1024:.1f} MiB)")
print(f"requests {done['requests']}, tokens {done['tokens']}, errors {done['errors']}"
      + (f" (last: {last_error[0]})" if done["errors"] else ""))
PY
curl -sS "http://127.0.0.1:$port/v1/cache/stats" | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = d["tiers"]
print("cache: device %d blocks, host %d, disk %d; prompt tokens %d, cached %d" % (
    t["device"]["blocks"], t["host"]["blocks"], t["disk"]["blocks"], d["prompt_tokens"], d["tokens_saved"]))'
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
echo "prefixd exited with $rc after SIGTERM"
