#!/usr/bin/env bash
# scripts/bundle.sh makes a bundle that runs away from the build: packs the
# build (xz -0, for speed), unpacks it to another folder, and with an
# environment that names neither the build nor the source tree (env -i, no
# LD_LIBRARY_PATH) checks through bin/run that
#  - `prefixd generate` on the bundle's stories260K gives the build's text,
#    and without --model finds the default model in the bundle's models/
#    (PREFIXD_MODELS_DIR pointed elsewhere makes it fail, naming that path);
#  - the CPU test binary test_forward_golden passes its stories260K golden
#    case from the bundle's shared/ (PREFIXD_SHARED_DIR pointed at an empty
#    folder makes it fail: the variable, not the compiled path, is used);
#  - the libraries come from the bundle's lib/.
# Usage: bash tests/scripts/test_bundle.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) when a program the bundle packs is not built, or tar, xz,
# ldd or strip is missing.
set -euo pipefail
build_dir="$(cd "${1:-build}" && pwd)"
src_dir="$(pwd)"
for p in prefixd prefixctl tests/test_cuda_ops tests/test_cuda_launch tests/test_forward_golden \
         tests/bench_forward tests/bench_engine; do
  if [[ ! -x "$build_dir/$p" ]]; then
    echo "skipping: $build_dir/$p is not built (the bundle packs it)"
    exit 77
  fi
done
for tool in tar xz ldd strip; do
  command -v "$tool" >/dev/null || { echo "skipping: '$tool' is not installed"; exit 77; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $1"; [[ -n "${2:-}" && -f "$2" ]] && tail -n 30 "$2"; exit 1; }

bash scripts/bundle.sh "$tmp/b.tar.xz" --build "$build_dir" --xz-level 0 --max-mib 200 >"$tmp/bundle.log" 2>&1 ||
  fail "scripts/bundle.sh failed" "$tmp/bundle.log"
cat "$tmp/bundle.log"
mkdir -p "$tmp/elsewhere" "$tmp/home" "$tmp/empty"
tar -xJf "$tmp/b.tar.xz" -C "$tmp/elsewhere"
U="$tmp/elsewhere/prefixd-bundle"
[[ -x "$U/bin/run" ]] || fail "no bin/run in the bundle"
clean=(env -i PATH=/usr/bin:/bin HOME="$tmp/home")

# Libraries: every non-system library resolves into the bundle's lib/.
"${clean[@]}" "$U/bin/run" ldd "$U/bin/prefixd" >"$tmp/ldd.txt" 2>&1 || fail "ldd through bin/run" "$tmp/ldd.txt"
grep -q "not found" "$tmp/ldd.txt" && fail "unresolved libraries from the bundle" "$tmp/ldd.txt"
grep -q "=> $U/lib/" "$tmp/ldd.txt" || fail "no library resolved from $U/lib" "$tmp/ldd.txt"

# Same greedy text as the build, on the bundle's copy of the model.
args=(generate --prompt "Once upon a time" -n 24 -t 2)
"$build_dir/prefixd" "${args[@]}" --model "$src_dir/../shared/models/stories260K.gguf" >"$tmp/want.txt" 2>"$tmp/want.err" ||
  fail "the build's prefixd generate" "$tmp/want.err"
"${clean[@]}" "$U/bin/run" prefixd "${args[@]}" --model "$U/shared/models/stories260K.gguf" >"$tmp/got.txt" 2>"$tmp/got.err" ||
  fail "bin/run prefixd generate --model" "$tmp/got.err"
# The text, without the speed line ("prompt N tokens, prefill X tokens/s; ...").
text() { grep -v "tokens/s" "$1"; }
[[ -n "$(text "$tmp/want.txt")" ]] || fail "the build's prefixd generate printed no text"
cmp -s <(text "$tmp/want.txt") <(text "$tmp/got.txt") || { diff "$tmp/want.txt" "$tmp/got.txt"; fail "bundle text differs"; }
# The default model (no --model) is the bundle's, through PREFIXD_MODELS_DIR.
"${clean[@]}" "$U/bin/run" prefixd "${args[@]}" >"$tmp/default.txt" 2>"$tmp/default.err" ||
  fail "bin/run prefixd generate without --model" "$tmp/default.err"
cmp -s <(text "$tmp/want.txt") <(text "$tmp/default.txt") || fail "default-model text differs from the build's"
if "${clean[@]}" PREFIXD_MODELS_DIR="$tmp/empty" "$U/bin/run" prefixd "${args[@]}" >/dev/null 2>"$tmp/nomodel.err"; then
  fail "prefixd generate found a default model outside PREFIXD_MODELS_DIR"
fi
grep -q "'$tmp/empty/stories260K.gguf'" "$tmp/nomodel.err" || fail "the missing-model error does not name the path" "$tmp/nomodel.err"

# A CPU test binary from the bundle reads the bundle's test data.
golden=(test_forward_golden "-tc=full forward pass matches llama.cpp*" --subcase=stories260K)
"${clean[@]}" "$U/bin/run" "${golden[@]}" >"$tmp/golden.txt" 2>&1 || fail "bundled test_forward_golden" "$tmp/golden.txt"
grep -q "Status: SUCCESS" "$tmp/golden.txt" || fail "test_forward_golden did not report success" "$tmp/golden.txt"
if "${clean[@]}" PREFIXD_SHARED_DIR="$tmp/empty" "$U/bin/run" "${golden[@]}" >"$tmp/golden-empty.txt" 2>&1; then
  fail "test_forward_golden passed without test data: PREFIXD_SHARED_DIR is not used" "$tmp/golden-empty.txt"
fi
echo "bundle: runs from $U without the build (prefixd generate, test_forward_golden, libraries from lib/)"
