#!/usr/bin/env bash
# Tokenizer oracles: installs llama-tokenizer-js (Llama 2 SPM) and
# llama3-tokenizer-js (Llama 3 BPE) with npm, dumps their vocabularies and their
# own encode() of a 200+ string corpus (tests/node/dump_oracles.mjs), then runs
# the oracle cases of test_tokenizer_spm and test_tokenizer_bpe on that dump
# (ids must be identical; valid UTF-8 must round-trip).
# Usage: bash tests/scripts/test_tokenizer_oracles.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) when node >= 18 / npm is missing or the registry is unreachable.
set -euo pipefail
build_dir="$(cd "${1:-build}" && pwd)"
src_dir="$(pwd)"

source "$(dirname "$0")/lib/prefixd_test.sh"
require_node18
for bin in test_tokenizer_spm test_tokenizer_bpe; do
  if [ ! -x "$build_dir/tests/$bin" ]; then
    echo "missing $build_dir/tests/$bin: build the tests first" >&2
    exit 1
  fi
done

work="$build_dir/tokenizer_oracles"
mkdir -p "$work/node"
cp "$src_dir/tests/node/package.json" "$src_dir/tests/node/package-lock.json" \
   "$src_dir/tests/node/dump_oracles.mjs" "$work/node/"
if ! (cd "$work/node" && npm ci --no-audit --no-fund --loglevel=error); then
  echo "npm ci failed (registry unreachable?): skipping the tokenizer oracles"
  exit 77
fi
node "$work/node/dump_oracles.mjs" "$work"

export PREFIXD_TOKENIZER_ORACLE_DIR="$work"
"$build_dir/tests/test_tokenizer_spm"
"$build_dir/tests/test_tokenizer_bpe"
echo "tokenizer oracles passed"
