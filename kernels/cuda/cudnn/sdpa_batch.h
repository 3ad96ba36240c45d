// Host arithmetic of the cuDNN prefill attention path: the shape of one
// cuDNN plan (SdpaShape, the key of the plan cache) and its buckets, the
// per-sequence words cuDNN reads on the device (sequence lengths and a padded
// page table), and the runs of rows and prefill tiles each path serves.
// Pure C++ (no CUDA or cuDNN headers), checked on the CPU by
// tests/test_cudnn_sdpa_batch.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/launch_config.h"

namespace prefixd::cuda {

// Plans are built per bucket of query rows and keys: powers of two, at least
// kSdpaMinBucket (a plan takes ~0.6 s to compile, so buckets stay few). The
// actual lengths reach the plan through its sequence-length tensors.
inline constexpr int32_t kSdpaMinBucket = 128;
inline constexpr int32_t kSdpaMaxBucket = 1 << 30;

// The smallest power of two >= max(n, kSdpaMinBucket); n <= kSdpaMaxBucket.
inline int32_t sdpa_bucket(int32_t n) {
  int32_t b = kSdpaMinBucket;
  while (b < n && b < kSdpaMaxBucket) b *= 2;
  return b;
}

// The shape of one plan. Q, O: (1, n_heads, max_q, head_dim) views of the
// batch's (n_tokens, n_heads * head_dim) rows starting at a sequence's first
// row; K, V: the layer's pool (n_pool_blocks, block_size, n_kv_heads,
// head_dim) read through a page table of table_len() entries.
struct SdpaShape {
  DType dtype = DType::BF16;      // pool and Q operand: BF16 or F16
  DType out_dtype = DType::F32;   // O as the plan writes it: F32, or `dtype`
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t n_pool_blocks = 0;
  bool windowed = false;          // a sliding-window band; its width is a run-time value
  int32_t max_q = 0;              // bucket: query rows of a sequence
  int32_t max_kv = 0;             // bucket: keys of a sequence (>= max_q)

  bool operator==(const SdpaShape&) const = default;
  int32_t table_len() const { return static_cast<int32_t>(ceil_div(max_kv, block_size)); }
  // "bf16 32/8 heads d64 block 16" (+ " window"): what a log line names.
  std::string shape_class() const {
    return std::string(dtype_name(dtype)) + " " + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) +
           " heads d" + std::to_string(head_dim) + " block " + std::to_string(block_size) +
           (windowed ? " window" : "");
  }
  // shape_class() + " q<=128 kv<=8192"
  std::string describe() const {
    return shape_class() + " q<=" + std::to_string(max_q) + " kv<=" + std::to_string(max_kv);
  }
};

// Why prefixd does not ask cuDNN `version` (cudnnGetVersion()) for a plan
// of `s`, or "" when it does: pools other than BF16/F16; rows of Q, O or a
// pool slot that are not a multiple of 16 bytes (a sequence's Q and O views
// start at any row; cuDNN's tensors are declared 16-byte aligned); buckets
// that are not whole blocks (block sizes above 128); a container of
// 2^31 elements or more (kernel index arithmetic); and limits that
// cudnn-frontend's support checks name for the composite attention graph
// (paged K/V with head dim > 128 before 9.10; a bottom-right band before 9.6;
// on 9.9 and older a band with max_q == max_kv). cuDNN refuses the rest
// itself when it builds the plan.
inline std::string sdpa_known_limits(const SdpaShape& s, size_t version) {
  if (s.dtype != DType::BF16 && s.dtype != DType::F16)
    return std::string("cuDNN attention takes BF16 or F16 pools, not ") + dtype_name(s.dtype);
  if ((int64_t(s.n_heads) * s.head_dim) % 8 != 0 || (int64_t(s.n_kv_heads) * s.head_dim) % 8 != 0)
    return "rows of " + std::to_string(s.head_dim) + "-dim heads are not 16-byte aligned";
  const int64_t elements = int64_t(s.n_pool_blocks) * s.block_size * s.n_kv_heads * s.head_dim;
  if (elements >= (int64_t(1) << 31))
    return "a layer's pool holds " + std::to_string(elements) + " elements (2^31 or more)";
  if (s.max_kv % s.block_size != 0)
    return "a bucket of " + std::to_string(s.max_kv) + " keys is not whole blocks of " + std::to_string(s.block_size);
  if (s.head_dim > 128 && version < 91000) return "paged attention with head dim > 128 needs cuDNN 9.10";
  if (s.windowed && version < 90600) return "a sliding window with bottom-right alignment needs cuDNN 9.6";
  if (s.windowed && version < 91000 && s.max_q == s.max_kv)
    return "a sliding window with max_q == max_kv needs cuDNN 9.10";
  return "";
}

// One sequence of the batch with more than one query row.
struct PrefillSeq {
  int32_t seq = 0;          // index in Batch::seqs
  int32_t q_start = 0;      // first row in the batch
  int32_t n_q = 0;          // rows (> 1)
  int32_t kv_len = 0;       // keys: pos0 + n_q
  int32_t table_start = 0;  // its block table in Batch::block_tables
  int32_t first_tile = 0;   // its tiles in PackedBatch's prefill tile list
  int32_t n_tiles = 0;
  int32_t max_q() const { return sdpa_bucket(n_q); }
  int32_t max_kv() const { return std::max(sdpa_bucket(kv_len), max_q()); }
};

// The sequences with n_q > 1, in batch order, their tiles numbered as
// pack_batch numbers them (kPrefillTileQ rows per tile).
inline std::vector<PrefillSeq> prefill_seqs(const Batch& b) {
  std::vector<PrefillSeq> out;
  int32_t tile = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const BatchSeq& s = b.seqs[i];
    if (s.n_q <= 1) continue;
    PrefillSeq p;
    p.seq = static_cast<int32_t>(i);
    p.q_start = s.q_start;
    p.n_q = s.n_q;
    p.kv_len = s.pos0 + s.n_q;
    p.table_start = s.table_start;
    p.first_tile = tile;
    p.n_tiles = static_cast<int32_t>(ceil_div(s.n_q, kPrefillTileQ));
    tile += p.n_tiles;
    out.push_back(p);
  }
  return out;
}

// Device words of one sequence (int32, each section 16-byte aligned as
// cuDNN's tensors require):
//   [kSdpaQLenWord]   rows of the sequence (cuDNN's seq_len_q)
//   [kSdpaKvLenWord]  keys (seq_len_kv)
//   [kSdpaTableWord, + table_len)  page table: the blocks of keys
//                     [0, kv_len), then its last block again up to table_len
//                     (entries past the keys name a block of the sequence, so
//                     a kernel that reads them stays inside the pool).
inline constexpr int32_t kSdpaQLenWord = 0;
inline constexpr int32_t kSdpaKvLenWord = 4;
inline constexpr int32_t kSdpaTableWord = 8;

inline int32_t sdpa_meta_words(int32_t table_len) {
  return kSdpaTableWord + static_cast<int32_t>(ceil_div(table_len, 4) * 4);
}

// Writes sdpa_meta_words(table_len) words for `p`; `table` is the
// sequence's block table (at least ceil(kv_len / block_size) entries).
inline void write_sdpa_meta(const PrefillSeq& p, const int32_t* table, int32_t block_size, int32_t table_len,
                            int32_t* words) {
  std::fill(words, words + sdpa_meta_words(table_len), 0);
  words[kSdpaQLenWord] = p.n_q;
  words[kSdpaKvLenWord] = p.kv_len;
  const int32_t used = static_cast<int32_t>(ceil_div(p.kv_len, block_size));
  for (int32_t i = 0; i < table_len; ++i) words[kSdpaTableWord + i] = table[std::min(i, used - 1)];
}

// A run [first, first + count) of rows or tiles.
struct IndexRun {
  int32_t first = 0;
  int32_t count = 0;
};

// Runs of the sequences where `take[i]` holds: their rows (q_start, n_q) when
// `tiles` is false, their prefill tiles when true; adjacent ones merged.
inline std::vector<IndexRun> sequence_runs(const std::vector<PrefillSeq>& seqs, const std::vector<uint8_t>& take,
                                           bool tiles) {
  std::vector<IndexRun> runs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!take[i]) continue;
    const int32_t first = tiles ? seqs[i].first_tile : seqs[i].q_start;
    const int32_t count = tiles ? seqs[i].n_tiles : seqs[i].n_q;
    if (!runs.empty() && runs.back().first + runs.back().count == first)
      runs.back().count += count;
    else
      runs.push_back(IndexRun{first, count});
  }
  return runs;
}

}  // namespace prefixd::cuda
