#!/usr/bin/env bash
# Installs what is needed, builds prefixd and starts it.
# Usage: scripts/run.sh [prefixd arguments]; with none, runs the built-in demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build="${PREFIXD_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target prefixd prefixctl
if [[ $# -eq 0 ]]; then
  set -- generate --model demo --prompt "Once upon a time" -n 32
fi
exec "$build/prefixd" "$@"
