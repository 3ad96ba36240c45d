#!/usr/bin/env bash
# The dashboard in a real browser: installs playwright-core into
# tests/node/dashboard (npm ci), starts prefixd (demo model, API key set) on a
# free port and runs tests/node/dashboard/dashboard_test.mjs, which drives the
# Debian chromium headless. The screenshot is kept as BUILD_DIR/artifacts/dashboard.png.
# Exit 77 = skipped (Node.js missing or older than 18, Node 20 not installable
# from npm where the system has 18, npm or chromium missing, or npm ci failed).
# Usage: test_dashboard_browser.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_dashboard_browser.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
node_dir="$root/tests/node/dashboard"
chromium_bin=/usr/bin/chromium

source "$(dirname "$0")/lib/prefixd_test.sh"

require_node20
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
cleanup() {
  kill_prefixd
  rm -rf "$work"
}
trap cleanup EXIT

key="dash-key-$$"
start_prefixd "$build_dir" "$work/daemon" --model demo --threads 1 --api-key "$key" \
  --min-cache-tokens 32 --cache-dir "$build_dir/test-cache"
port=$PREFIXD_PORT

mkdir -p "$build_dir/artifacts"
rc=0
node "$node_dir/dashboard_test.mjs" "http://127.0.0.1:$port" "$key" "$build_dir/artifacts/dashboard.png" || rc=$?
stop_prefixd "$work/daemon"
exit "$rc"
