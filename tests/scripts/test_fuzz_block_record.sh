#!/usr/bin/env bash
# Fuzzes the block record parser with libFuzzer + AddressSanitizer for
# ${PREFIXD_FUZZ_SECONDS:-30} seconds, starting from a valid record.
# Usage: bash tests/scripts/test_fuzz_block_record.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) when clang++ is missing.
set -euo pipefail
build_dir="${1:-build}"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "clang++ not found: skipping the block record fuzzer"
  exit 77
fi
src_dir="$(pwd)"
work="$build_dir/fuzz_block_record"
mkdir -p "$work/corpus"
xxhash_flags="$(pkg-config --cflags --libs libxxhash 2>/dev/null || echo -lxxhash)"

clang++ -std=c++20 -gline-tables-only -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src_dir" "$src_dir/tests/fuzz/fuzz_block_record.cpp" "$src_dir/storage/block_record.cpp" \
  $xxhash_flags -o "$work/fuzz_block_record"

# Seed: one valid record in the geometry the target expects, plus a truncated one.
cat > "$work/make_seed.cpp" <<'CPP'
#include <cstdio>
#include <vector>
#include "storage/block_record.h"
int main(int argc, char** argv) {
  using namespace prefixd;
  BlockRecordInfo info;
  info.geometry = BlockGeometry{4, 2, 2, 8, kKvDtypeF16};
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<uint8_t> payload(info.geometry.payload_bytes(), 7);
  RecordPtr rec = encode_block_record(info, tokens, payload);
  if (!rec || argc < 2) return 1;
  FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  std::fwrite(rec->data(), 1, rec->size(), f);
  std::fclose(f);
  return 0;
}
CPP
clang++ -std=c++20 -O1 -I"$src_dir" "$work/make_seed.cpp" "$src_dir/storage/block_record.cpp" \
  $xxhash_flags -o "$work/make_seed"
"$work/make_seed" "$work/corpus/seed_valid"
head -c 100 "$work/corpus/seed_valid" > "$work/corpus/seed_truncated"

seconds="${PREFIXD_FUZZ_SECONDS:-30}"
"$work/fuzz_block_record" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 15
exit "${PIPESTATUS[0]}"
