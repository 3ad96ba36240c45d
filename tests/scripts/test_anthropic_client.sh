#!/usr/bin/env bash
# Drives prefixd's /v1/messages (demo model, API key set, --min-cache-tokens
# 32) with the official `@anthropic-ai/sdk` npm package: installs it into
# tests/node/anthropic with npm, starts the daemon on a free port and runs
# tests/node/anthropic_client_test.mjs. Exit 77 = skipped (Node.js < 18, npm
# missing, or the package cannot be installed).
# Usage: test_anthropic_client.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "${1:?usage: test_anthropic_client.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
node_dir="$root/tests/node"
source "$(dirname "$0")/lib/prefixd_test.sh"

require_node18
[[ -x "$build_dir/prefixd" ]] || { echo "missing $build_dir/prefixd"; exit 1; }

if [[ ! -f "$node_dir/anthropic/node_modules/@anthropic-ai/sdk/package.json" ]]; then
  if ! (cd "$node_dir/anthropic" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "npm install of the @anthropic-ai/sdk package failed; skipping"
    exit 77
  fi
fi

work=$(mktemp -d)
cleanup() {
  kill_prefixd
  rm -rf "$work"
}
trap cleanup EXIT

key="test-key-$$"
# The demo model is generated once into the build directory's test cache.
start_prefixd "$build_dir" "$work/daemon" --model demo --threads 1 --api-key "$key" \
  --min-cache-tokens 32 --cache-dir "$build_dir/test-cache"
port=$PREFIXD_PORT

rc=0
node "$node_dir/anthropic_client_test.mjs" "$port" "$key" demo || rc=$?
stop_prefixd "$work/daemon"
exit "$rc"
