#!/usr/bin/env bash
# Installs what is needed, builds everything and runs every test (ctest).
# Usage: scripts/test.sh [extra ctest args]. Build directory: $PREFIXD_BUILD_DIR or ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIXD_WITH_TEST_TOOLS=1 scripts/setup.sh
build="${PREFIXD_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
# Tests run in parallel, one per core: each passes on a loaded machine, and the
# longest (tests/CMakeLists.txt gives them a COST) start first.
ctest --test-dir "$build" --output-on-failure --timeout 900 -j "$(nproc)" "$@"
