// The host side of the cuDNN prefill path, on the CPU (no CUDA, no cuDNN):
// plan buckets, the prefill sequences and their tile numbering (the same as
// pack_batch's), the per-sequence words cuDNN reads (lengths, padded page
// table), the runs of rows and tiles each path serves, the limits prefixd
// keeps from cuDNN by version, and the order in which libcudnn.so.9 is searched.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "engine/batch_builder.h"
#include "kernels/cuda/cudnn/cudnn_search.h"
#include "kernels/cuda/cudnn/sdpa_batch.h"
#include "kernels/cuda/launch_config.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using namespace prefixd::cuda;

namespace {

std::vector<int32_t> iota_table(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = first + 3 * i;
  return t;
}

// A batch of: a 37-row suffix over 20 cached keys, a decode row, a cold
// 5-row prompt, another decode row, a 300-row chunk at position 1000.
Batch mixed_batch(int32_t bs) {
  BatchBuilder b(bs);
  std::vector<int32_t> tok37(37, 1), tok1(1, 2), tok5(5, 3), tok300(300, 4);
  b.add(tok37, 20, iota_table(0, 4), LogitsWanted::kAll);
  b.add(tok1, 700, iota_table(100, 44), LogitsWanted::kLast);
  b.add(tok5, 0, iota_table(300, 1), LogitsWanted::kLast);
  b.add(tok1, 16, iota_table(400, 2), LogitsWanted::kLast);
  b.add(tok300, 1000, iota_table(500, 82), LogitsWanted::kLast);
  return b.batch();
}

}  // namespace

TEST_CASE("buckets are powers of two from 128") {
  CHECK(sdpa_bucket(1) == 128);
  CHECK(sdpa_bucket(2) == 128);
  CHECK(sdpa_bucket(128) == 128);
  CHECK(sdpa_bucket(129) == 256);
  CHECK(sdpa_bucket(8100) == 8192);
  CHECK(sdpa_bucket(8192) == 8192);
  CHECK(sdpa_bucket(16385) == 32768);
}

TEST_CASE("prefill sequences: rows, keys, buckets, and tiles numbered as pack_batch numbers them") {
  const int32_t bs = 16;
  const Batch b = mixed_batch(bs);
  REQUIRE(validate_batch(b, bs).ok());
  const std::vector<PrefillSeq> seqs = prefill_seqs(b);
  REQUIRE(seqs.size() == 3);
  CHECK(seqs[0].seq == 0);
  CHECK(seqs[0].q_start == 0);
  CHECK(seqs[0].n_q == 37);
  CHECK(seqs[0].kv_len == 57);
  CHECK(seqs[1].seq == 2);
  CHECK(seqs[1].q_start == 38);
  CHECK(seqs[1].kv_len == 5);
  CHECK(seqs[2].seq == 4);
  CHECK(seqs[2].q_start == 44);
  CHECK(seqs[2].n_q == 300);
  CHECK(seqs[2].kv_len == 1300);
  CHECK(seqs[2].max_q() == 512);
  CHECK(seqs[2].max_kv() == 2048);
  CHECK(seqs[1].max_q() == 128);
  CHECK(seqs[1].max_kv() == 128);
  // The tiles pack_batch lists: (seq, first row) pairs, in order.
  const PackedBatch p = pack_batch(b, bs);
  int32_t total = 0;
  for (const PrefillSeq& s : seqs) {
    CHECK(s.n_tiles == int32_t(ceil_div(s.n_q, kPrefillTileQ)));
    for (int32_t t = 0; t < s.n_tiles; ++t) {
      CHECK(p.words[p.prefill_tiles_off + 2 * (s.first_tile + t)] == s.seq);
      CHECK(p.words[p.prefill_tiles_off + 2 * (s.first_tile + t) + 1] == t * kPrefillTileQ);
    }
    total += s.n_tiles;
  }
  CHECK(total == p.n_prefill_tiles);
}

TEST_CASE("a sequence's words: lengths, its blocks, then its last block up to the bucket's table") {
  const int32_t bs = 16;
  const Batch b = mixed_batch(bs);
  const std::vector<PrefillSeq> seqs = prefill_seqs(b);
  const PrefillSeq& s = seqs[0];  // 57 keys: 4 blocks
  const int32_t table_len = int32_t(ceil_div(s.max_kv(), bs));
  CHECK(table_len == 8);
  CHECK(sdpa_meta_words(table_len) == 16);
  CHECK(sdpa_meta_words(5) == 16);
  CHECK(sdpa_meta_words(9) == 20);
  std::vector<int32_t> words(sdpa_meta_words(table_len), -7);
  write_sdpa_meta(s, b.block_tables.data() + s.table_start, bs, table_len, words.data());
  CHECK(words[kSdpaQLenWord] == 37);
  CHECK(words[kSdpaKvLenWord] == 57);
  CHECK(words[1] == 0);
  const std::vector<int32_t> want = {0, 3, 6, 9, 9, 9, 9, 9};
  for (int32_t i = 0; i < table_len; ++i) CHECK(words[kSdpaTableWord + i] == want[i]);
  // 16-byte aligned sections for cuDNN's tensors.
  CHECK(kSdpaKvLenWord % 4 == 0);
  CHECK(kSdpaTableWord % 4 == 0);
}

TEST_CASE("runs of rows and tiles of the sequences each path serves") {
  const int32_t bs = 16;
  const std::vector<PrefillSeq> seqs = prefill_seqs(mixed_batch(bs));
  // All three on one path: rows break at the decode rows between them, tiles do not.
  std::vector<IndexRun> rows = sequence_runs(seqs, {1, 1, 1}, false);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].first == 0);
  CHECK(rows[0].count == 37);
  CHECK(rows[2].first == 44);
  CHECK(rows[2].count == 300);
  std::vector<IndexRun> tiles = sequence_runs(seqs, {1, 1, 1}, true);
  REQUIRE(tiles.size() == 1);
  CHECK(tiles[0].first == 0);
  CHECK(tiles[0].count == 3 + 1 + 19);
  tiles = sequence_runs(seqs, {1, 0, 1}, true);
  REQUIRE(tiles.size() == 2);
  CHECK(tiles[1].first == 4);
  CHECK(tiles[1].count == 19);
  CHECK(sequence_runs(seqs, {0, 0, 0}, true).empty());
}

TEST_CASE("limits prefixd keeps from cuDNN, by version") {
  SdpaShape s;
  s.dtype = DType::BF16;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.block_size = 16;
  s.n_pool_blocks = 4096;
  s.max_q = 128;
  s.max_kv = 8192;
  CHECK(sdpa_known_limits(s, 90500).empty());
  CHECK(sdpa_known_limits(s, 91900).empty());
  SdpaShape f32 = s;
  f32.dtype = DType::F32;
  CHECK(sdpa_known_limits(f32, 91900).find("BF16 or F16") != std::string::npos);
  SdpaShape wide = s;
  wide.head_dim = 256;
  CHECK_FALSE(sdpa_known_limits(wide, 90900).empty());
  CHECK(sdpa_known_limits(wide, 91002).empty());
  SdpaShape band = s;
  band.windowed = true;
  CHECK_FALSE(sdpa_known_limits(band, 90500).empty());
  CHECK(sdpa_known_limits(band, 90600).empty());
  band.max_kv = band.max_q;
  CHECK_FALSE(sdpa_known_limits(band, 90900).empty());
  CHECK(sdpa_known_limits(band, 91002).empty());
  SdpaShape odd = s;
  odd.n_heads = 3;
  odd.n_kv_heads = 1;
  odd.head_dim = 12;  // 36-value rows: 72 bytes
  CHECK(sdpa_known_limits(odd, 91900).find("16-byte") != std::string::npos);
  odd.head_dim = 8;   // 24 and 8 values: 48 and 16 bytes
  CHECK(sdpa_known_limits(odd, 91900).empty());
  SdpaShape big_blocks = s;
  big_blocks.block_size = 256;
  big_blocks.max_kv = 128;
  CHECK(sdpa_known_limits(big_blocks, 91900).find("whole blocks") != std::string::npos);
  big_blocks.max_kv = 512;
  CHECK(sdpa_known_limits(big_blocks, 91900).empty());
  SdpaShape huge = s;
  huge.n_pool_blocks = int32_t((int64_t(1) << 31) / (16 * 8 * 64));
  CHECK(sdpa_known_limits(huge, 91900).find("2^31") != std::string::npos);
  huge.n_pool_blocks -= 1;
  CHECK(sdpa_known_limits(huge, 91900).empty());
}

TEST_CASE("libcudnn.so.9 is searched: a named path alone, else the loader, then Python environments") {
  testing::TempDir tmp;
  namespace fs = std::filesystem;
  auto make_lib = [&](const std::string& rel) {
    const fs::path p = fs::path(tmp.path) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "";
    return p.string();
  };
  const std::string venv = make_lib("venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string local12 = make_lib("home/.local/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string local10 = make_lib("home/.local/lib/python3.10/dist-packages/nvidia/cudnn/lib/libcudnn.so.9");
  const std::string sys = make_lib("usr/local/lib/python3.11/dist-packages/nvidia/cudnn/lib/libcudnn.so.9");
  make_lib("venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.13");  // not cuDNN

  CudnnSearch s;
  s.python_prefixes = {tmp.path + "/venv", tmp.path + "/nowhere", tmp.path + "/home/.local"};
  s.system_prefixes = {tmp.path + "/usr/local"};
  const std::vector<std::string> c = cudnn_library_candidates(s);
  REQUIRE(c.size() == 5);
  CHECK(c[0] == "libcudnn.so.9");  // the dynamic loader's search first
  CHECK(c[1] == venv);
  CHECK(c[2] == local10);  // python3.10 before python3.12
  CHECK(c[3] == local12);
  CHECK(c[4] == sys);

  // A prefix given twice is searched once.
  s.system_prefixes.push_back(tmp.path + "/venv");
  CHECK(cudnn_library_candidates(s).size() == 5);

  // An operator-named file or folder is tried alone; "off" tries nothing.
  s.explicit_lib = sys;
  CHECK(cudnn_library_candidates(s) == std::vector<std::string>{sys});
  s.explicit_lib = fs::path(venv).parent_path().string();
  CHECK(cudnn_library_candidates(s) == std::vector<std::string>{venv});
  s.explicit_lib = "/no/such/libcudnn.so.9";
  CHECK(cudnn_library_candidates(s) == std::vector<std::string>{"/no/such/libcudnn.so.9"});
  // The environment of the first python3 on PATH.
  make_lib("venv/bin/python3");
  CHECK(python_prefix_on_path("/no/such/bin:" + tmp.path + "/venv/bin:/usr/bin") == tmp.path + "/venv");
  CHECK(python_prefix_on_path(tmp.path + "/venv/bin/") == tmp.path + "/venv");
  CHECK(python_prefix_on_path(tmp.path + "/nowhere") == "");
  CHECK(python_prefix_on_path("") == "");
  s.explicit_lib = "off";
  CHECK(cudnn_disabled(s));
  CHECK(cudnn_library_candidates(s).empty());
}
