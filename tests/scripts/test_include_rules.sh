#!/usr/bin/env bash
# The include-direction check (cmake/check_includes.cmake) accepts the tree as
# it is and rejects, by name, an include that runs against a direction: the
# text folder including the engine thread, storage including HTTP/daemon code,
# the client including the engine.
# Usage: bash tests/scripts/test_include_rules.sh [BUILD_DIR] (run from the repository root).
set -euo pipefail
src_dir="$(pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

check() {  # check TREE -> prints cmake's output, returns its status
  cmake -DSOURCE_DIR="$1" -DSTAMP="$work/stamp" -P "$src_dir/cmake/check_includes.cmake" 2>&1
}

check "$src_dir" >/dev/null || { echo "FAIL: the tree as committed breaks its own include rules"; check "$src_dir"; exit 1; }

expect_refused() {  # expect_refused FILE INCLUDE [<]: with "<", a library header #include <INCLUDE>
  local tree="$work/tree"
  rm -rf "$tree"; mkdir -p "$tree"
  cp -r "$src_dir"/{common,kernels,storage,engine,daemon,client} "$tree"/
  rm -rf "$tree/daemon/monitoring/web/node_modules"
  local line="#include \"$2\""
  [[ "${3:-}" == "<" ]] && line="#include <$2>"
  printf '%s\n' "$line" >>"$tree/$1"
  local out
  if out="$(check "$tree")"; then
    echo "FAIL: $1 including $2 was accepted"; exit 1
  fi
  if ! grep -qF "$1: $line" <<<"$out"; then
    echo "FAIL: the refusal does not name $1 and $2:"; echo "$out"; exit 1
  fi
  echo "refused as expected: $1 -> $2"
}

expect_refused engine/text/tokenizer.h engine/engine.h
expect_refused engine/kv/block_manager.h engine/model/model.h
expect_refused engine/model/forward.cpp engine/text/tokenizer.h
expect_refused storage/tier_manager.cpp daemon/server.h
expect_refused kernels/backend.h engine/model/model.h
expect_refused client/client.cpp engine/engine.h
expect_refused daemon/http/request_bounds.cpp engine/engine.h
expect_refused daemon/validation/request_validation.cpp daemon/api/routes.h
expect_refused daemon/monitoring/metrics.cpp httplib.h "<"
echo "include rules: ok"
