#!/usr/bin/env bash
# Installs what is needed, builds everything and runs every test (ctest).
# Usage: scripts/test.sh [extra ctest args]. Build directory: $PREFIXD_BUILD_DIR or ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIXD_WITH_TEST_TOOLS=1 scripts/setup.sh
build="${PREFIXD_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --timeout 900 "$@"
