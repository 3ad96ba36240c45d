#!/usr/bin/env bash
# Installs what is needed, builds prefixd and starts it.
# Usage: scripts/run.sh [prefixd arguments]; with none, serves the bundled stories260K model
# (models/README.md) on http://127.0.0.1:8080.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build="${PREFIXD_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target prefixd prefixctl
# No arguments: serve HTTP on 127.0.0.1:8080 with the bundled stories260K model.
exec "$build/prefixd" "$@"
