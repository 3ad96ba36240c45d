#!/usr/bin/env bash
# The dashboard in a real browser: installs playwright-core into
# tests/node/dashboard (npm ci), starts prefixd (demo model, API key set) on a
# free port and runs tests/node/dashboard/dashboard_test.mjs, which drives the
# Debian chromium headless. The screenshot is kept as BUILD_DIR/artifacts/dashboard.png.
# Exit 77 = skipped (Node.js < 20, npm or chromium missing, or npm ci failed).
# Usage: test_dashboard_browser.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_dashboard_browser.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
node_dir="$root/tests/node/dashboard"
chromium_bin=/usr/bin/chromium

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node or npm not found; skipping"
  exit 77
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "node $(node --version) is older than 20; skipping"
  exit 77
fi
if [[ ! -x "$chromium_bin" ]]; then
  echo "$chromium_bin not found (Debian package chromium); skipping"
  exit 77
fi
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }

if [[ ! -f "$node_dir/node_modules/playwright-core/package.json" ]]; then
  if ! (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "npm ci of playwright-core failed; skipping"
    exit 77
  fi
fi

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

key="dash-key-$$"
"$build_dir/prefixd" --model demo --port 0 --threads 1 --api-key "$key" \
  --cache-dir "$build_dir/test-cache" >"$work/out" 2>"$work/err" &
pid=$!
port=""
for _ in $(seq 1 1200); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$work/out" | head -n1)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "prefixd exited:"; cat "$work/err"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "prefixd did not start"; cat "$work/err"; exit 1; }

mkdir -p "$build_dir/artifacts"
rc=0
node "$node_dir/dashboard_test.mjs" "http://127.0.0.1:$port" "$key" "$build_dir/artifacts/dashboard.png" || rc=$?
kill -TERM "$pid"
stop_rc=0
wait "$pid" || stop_rc=$?
pid=""
if ((stop_rc != 0)); then
  echo "prefixd exited with $stop_rc after SIGTERM"
  cat "$work/err"
  exit 1
fi
exit "$rc"
