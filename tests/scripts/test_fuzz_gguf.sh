#!/usr/bin/env bash
# Fuzzes the GGUF parser (and the writer round trip) with libFuzzer +
# AddressSanitizer + UBSan for ${PREFIXD_FUZZ_SECONDS:-60} seconds, seeded with
# small valid GGUF files of every value type, the head of a real model, and
# headers whose counts declare far more than the file holds (a 4 GiB array in
# 4 KiB, 2^40 strings, huge keys, tensor counts and dimensions). The RSS limit
# (2 GiB) turns any allocation sized by such a count into a failure.
# Usage: bash tests/scripts/test_fuzz_gguf.sh BUILD_DIR (from the repo root).
# Exit 77 (skipped) when clang++ is missing; non-zero on any crash.
set -euo pipefail
build_dir="${1:-build}"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "clang++ not found: skipping the GGUF fuzzer"
  exit 77
fi
if ! compgen -G "$(clang++ --print-runtime-dir)/libclang_rt.fuzzer*.a" >/dev/null; then
  echo "clang's libFuzzer runtime is missing (Debian: libclang-rt-14-dev): skipping the GGUF fuzzer"
  exit 77
fi
src_dir="$(pwd)"
work="$build_dir/fuzz/gguf"
mkdir -p "$work/corpus"

clang++ -std=c++20 -gline-tables-only -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src_dir" "$src_dir/tests/fuzz/fuzz_gguf.cpp" "$src_dir/engine/model/gguf.cpp" \
  "$src_dir/engine/model/gguf_writer.cpp" "$src_dir/kernels/quant/dequantize.cpp" -o "$work/fuzz_gguf"

# Seeds: small valid files written by GgufWriter.
cat > "$work/make_seeds.cpp" <<'CPP'
#include <cstdio>
#include <string>
#include <vector>
#include "engine/model/gguf_writer.h"
using namespace prefixd;
static void save(const GgufWriter& w, const std::string& path) {
  std::vector<uint8_t> b = w.to_bytes();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::exit(1);
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}
// Raw little-endian bytes, for headers that declare more than they hold
// (GgufWriter only writes consistent files).
struct Raw {
  std::vector<uint8_t> b;
  Raw& u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i))); return *this; }
  Raw& u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i))); return *this; }
  Raw& str(const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); return *this; }
  Raw& fill(size_t n, uint8_t x) { b.insert(b.end(), n, x); return *this; }
  Raw& head(uint64_t n_tensors, uint64_t n_kv) { b = {'G', 'G', 'U', 'F'}; u32(3); u64(n_tensors); return u64(n_kv); }
};
static void save_raw(const Raw& r, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::exit(1);
  std::fwrite(r.b.data(), 1, r.b.size(), f);
  std::fclose(f);
}
static GgufValue scalar(GgufType t, uint64_t u, double x) {
  GgufValue v; v.type = t; v.u = u; v.i = static_cast<int64_t>(u); v.f = x; return v;
}
int main(int argc, char** argv) {
  if (argc < 2) return 1;
  std::string dir = argv[1];
  {  // every scalar type, arrays and nested arrays, v3
    GgufWriter w(3);
    w.set_string("general.architecture", "llama");
    for (uint32_t t : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 10u, 11u, 12u}) {
      w.set("k." + std::to_string(t), scalar(static_cast<GgufType>(t), 1, 0.5));
    }
    w.set_string_array("k.strs", {"<unk>", "\xE2\x96\x81the", ""});
    w.set_f32_array("k.f32s", {0.0f, -1.0f});
    w.set_i32_array("k.i32s", {1, 3, 6});
    GgufValue inner; inner.type = GgufType::ARRAY; inner.elem_type = GgufType::STRING;
    inner.array = {scalar(GgufType::STRING, 0, 0)};
    inner.array[0].str = "x";
    GgufValue outer; outer.type = GgufType::ARRAY; outer.elem_type = GgufType::ARRAY;
    outer.array = {inner, inner};
    w.set("k.nested", outer);
    w.add_tensor("a", GgmlType::F32, {4, 2}, std::vector<uint8_t>(32, 1));
    w.add_tensor("b", GgmlType::F16, {3}, std::vector<uint8_t>(6, 2));
    save(w, dir + "/seed_types_v3");
  }
  {  // v2, alignment 64, BF16 and Q8_0 tensors
    GgufWriter w(2, 64);
    w.set_u32("llama.block_count", 1);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.add_tensor("q", GgmlType::Q8_0, {32, 2}, std::vector<uint8_t>(68, 3));
    w.add_tensor("r", GgmlType::BF16, {2, 2, 2, 2}, std::vector<uint8_t>(32, 4));
    save(w, dir + "/seed_v2_align64");
  }
  {  // one small tensor of every weight type (two rows of one block each)
    GgufWriter w(3);
    for (const WeightTypeTraits& t : kWeightTypes) {
      if (!t.weight) continue;
      w.add_tensor(std::string("t.") + t.name, t.type, {t.block_elements, 2},
                   std::vector<uint8_t>(2 * t.block_bytes, 0x5a));
    }
    save(w, dir + "/seed_every_type");
  }
  {  // metadata only, and an empty file
    GgufWriter w(3);
    w.set_string("general.name", "empty");
    save(w, dir + "/seed_metadata_only");
    save(GgufWriter(3), dir + "/seed_empty");
  }
  // Amplification: counts that fit the bytes left badly or not at all, each
  // of which must be refused before anything of that size is allocated.
  save_raw(Raw().head(0, 1).str("x.big").u32(9).u32(0).u64(4ull << 30).fill(4096, 1),
           dir + "/seed_u8_array_4gib");                       // 4 GiB of uint8 in 4 KiB
  save_raw(Raw().head(0, 1).str("x.strs").u32(9).u32(8).u64(1ull << 40).fill(4096, 0),
           dir + "/seed_string_array_huge");                   // empty strings, 2^40 of them
  {
    Raw r;
    r.head(0, 1).str("x.nested").u32(9).u32(9).u64(64);
    for (int i = 0; i < 64; ++i) r.u32(0).u64(16000);        // 64 inner arrays, each "16000 bytes"
    r.fill(2048, 7);
    save_raw(r, dir + "/seed_nested_arrays");
  }
  save_raw(Raw().head(0, 1).u64(1ull << 40).fill(64, 'k'), dir + "/seed_key_length_huge");
  save_raw(Raw().head(1ull << 61, 1ull << 61).fill(256, 0), dir + "/seed_counts_huge");
  save_raw(Raw().head(1, 0).str("t").u32(4).u64(1ull << 40).u64(1ull << 40).u64(1).u64(1)
               .u32(0).u64(0).fill(64, 0),
           dir + "/seed_tensor_dims_huge");                    // 4 dims whose product overflows
  return 0;
}
CPP
clang++ -std=c++20 -O1 -I"$src_dir" "$work/make_seeds.cpp" "$src_dir/engine/model/gguf.cpp" \
  "$src_dir/engine/model/gguf_writer.cpp" -o "$work/make_seeds"
"$work/make_seeds" "$work/corpus"
# The head of a real model: all its metadata and tensor infos, tensor data cut off.
shared="${PREFIXD_SHARED_DIR:-$src_dir/../shared}"
if [[ -f "$shared/models/stories260K.gguf" ]]; then
  head -c 16384 "$shared/models/stories260K.gguf" > "$work/corpus/seed_stories_head"
fi

seconds="${PREFIXD_FUZZ_SECONDS:-60}"
"$work/fuzz_gguf" -max_total_time="$seconds" -max_len=20000 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 20
exit "${PIPESTATUS[0]}"
