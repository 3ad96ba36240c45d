#!/usr/bin/env bash
# No function of prefixd's own code (client, common, daemon, engine, kernels,
# storage) is over 60 lines unless a `// Stays long:` comment above it says
# why (scripts/long_functions.py, which lists the ones it finds).
# Skips (77) without python3 or universal-ctags (Debian: universal-ctags).
# Usage: bash tests/scripts/test_long_functions.sh [BUILD_DIR] (from the repository root).
set -euo pipefail
command -v python3 >/dev/null || { echo "skipped: python3 not found"; exit 77; }
if ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "skipped: universal-ctags not found (Debian package universal-ctags)"
  exit 77
fi
exec python3 scripts/long_functions.py --limit 60
