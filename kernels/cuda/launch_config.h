// Host-side arithmetic of the CUDA backend: grid/block/shared-memory of every
// kernel from shapes, the packed device layout of a Batch, workspace and KV pool
// sizes, and the dtype dispatch table. Pure C++ (no CUDA headers), header-only,
// so tests/test_cuda_launch.cpp checks it on machines without nvcc or a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/op_math_ext.h"
#include "kernels/paging.h"
#include "kernels/quant/weight_type.h"

namespace prefixd::cuda {

// Device limits the configurations below must respect (sm_80 and sm_90).
inline constexpr size_t kSmemDefaultLimitBytes = 48 * 1024;      // without opt-in
inline constexpr size_t kSmemOptInLimitSm80Bytes = 163 * 1024;   // A100 per-block opt-in
inline constexpr size_t kSmemOptInLimitSm90Bytes = 227 * 1024;   // H100 per-block opt-in
inline constexpr uint32_t kMaxGridX = 0x7fffffffu;
inline constexpr uint32_t kMaxGridYZ = 65535u;
inline constexpr uint32_t kMaxBlockThreads = 1024u;
inline constexpr uint32_t kWarpSize = 32u;

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t volume() const { return uint64_t(x) * y * z; }
};

// One kernel launch. `smem_bytes` is the dynamic shared memory; a launcher
// skips the launch when empty() (zero work), it never launches a zero grid.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  size_t smem_bytes = 0;
  bool empty() const { return grid.volume() == 0; }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline uint32_t round_up_warp(int64_t n) {
  return static_cast<uint32_t>(ceil_div(std::max<int64_t>(n, 1), kWarpSize) * kWarpSize);
}

// --- elementwise and row kernels ---------------------------------------------

inline constexpr uint32_t kElementwiseThreads = 256;
inline constexpr uint32_t kElementwiseMaxBlocks = 65536;  // grid-stride beyond this

// Grid-stride loop over n elements (swiglu, add, add_bias, rope pairs, converts).
inline LaunchConfig elementwise_launch(int64_t n) {
  LaunchConfig c;
  c.block.x = kElementwiseThreads;
  c.grid.x = static_cast<uint32_t>(
      std::min<int64_t>(ceil_div(std::max<int64_t>(n, 0), kElementwiseThreads), kElementwiseMaxBlocks));
  return c;
}

// One block per row of `dim` elements (embed, rmsnorm, kv_store, gather rows);
// the block strides over the row. Threads: a warp multiple, at most 256.
inline constexpr uint32_t kRowMaxThreads = 256;
inline LaunchConfig row_launch(int64_t n_rows, int64_t dim) {
  LaunchConfig c;
  c.block.x = std::min(kRowMaxThreads, round_up_warp(dim));
  c.grid.x = static_cast<uint32_t>(std::max<int64_t>(n_rows, 0));
  if (dim <= 0) c.grid.x = 0;
  return c;
}

// RoPE: one thread per rotated pair, (n_tokens * n_heads * rope_dim / 2) pairs.
inline LaunchConfig rope_launch(int64_t n_tokens, int32_t n_heads, int32_t rope_dim) {
  return elementwise_launch(n_tokens * n_heads * (rope_dim / 2));
}

// --- attention -------------------------------------------------------------

// Lanes of a warp own head dims lane + 32 r, r < dims_per_lane; kernels are
// instantiated for dims_per_lane in {1, 2, 4, 8}, so head_dim <= 256.
inline constexpr int32_t kMaxHeadDim = 256;
inline int32_t attention_dims_per_lane(int32_t head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim) return 0;
  const int32_t d = static_cast<int32_t>(ceil_div(head_dim, kWarpSize));
  return d <= 1 ? 1 : d <= 2 ? 2 : d <= 4 ? 4 : 8;
}

// Prefill: a block of kPrefillWarps warps owns kPrefillTileQ query rows of one
// sequence and one query head (kPrefillRowsPerWarp rows per warp). It walks the
// sequence's K/V in tiles of kTileKeys positions staged in shared memory:
//   Q tile  (kPrefillTileQ, head_dim) f32
//   K tile  (kTileKeys, head_dim + 1) f32   (+1 pad: lane j reads row j without bank conflicts)
//   V tile  (kTileKeys, head_dim) f32
inline constexpr int32_t kPrefillWarps = 4;
inline constexpr int32_t kPrefillRowsPerWarp = 4;
inline constexpr int32_t kPrefillTileQ = kPrefillWarps * kPrefillRowsPerWarp;
inline constexpr int32_t kTileKeys = 32;  // one key per lane when scoring

inline size_t prefill_smem_bytes(int32_t head_dim) {
  return sizeof(float) * (static_cast<size_t>(kPrefillTileQ) * head_dim +
                          static_cast<size_t>(kTileKeys) * (head_dim + 1) +
                          static_cast<size_t>(kTileKeys) * head_dim);
}

// grid (n_tiles, n_heads); n_tiles = query tiles of all prefill sequences.
inline LaunchConfig attention_prefill_launch(int32_t n_tiles, int32_t n_heads, int32_t head_dim) {
  LaunchConfig c;
  c.block.x = kPrefillWarps * kWarpSize;
  c.grid.x = static_cast<uint32_t>(std::max(n_tiles, 0));
  c.grid.y = static_cast<uint32_t>(std::max(n_heads, 0));
  c.smem_bytes = prefill_smem_bytes(head_dim);
  return c;
}

// Decode: one query row per sequence, the keys of each sequence split over
// thread blocks (split-KV). The grid is (n_decode_seqs, blocks per sequence,
// n_splits); n_splits is one of a few powers of two (decode_split_count) and
// every other grid dimension depends only on the batch's sequence count and
// the model, never on sequence lengths, so a captured CUDA graph replays for
// any lengths. Each block reads its sequence's length, table and window from
// device memory and takes split s of its visible keys [window first key, pos0]
// (paging::split_range over kDecodeSplitChunkKeys-key chunks); splits beyond
// paging::split_count exit at once. With n_splits > 1 each block writes a
// partial (m, l, acc[head_dim]) and attention_decode_reduce merges a
// sequence's used splits (a sequence with one used split is written
// directly, and the reduce skips it).
inline constexpr int32_t kDecodeSplitChunkKeys = 64;  // granularity of the split partition
inline constexpr int32_t kDecodeMaxSplits = 64;       // a power of two
inline constexpr int32_t kDecodeTargetBlocksPerSm = 4;

// Splits for a decode launch with `blocks_per_split` blocks per split
// (n_decode_seqs * blocks per sequence): enough for about
// kDecodeTargetBlocksPerSm blocks per SM, no more than the longest visible
// key range has chunks, rounded up to a power of two (1, 2, 4 .. 64). Any
// value >= 1 is correct for any lengths: the count only sets the parallelism.
inline int32_t decode_split_count(int64_t blocks_per_split, int32_t max_kv_len, int32_t n_sms) {
  const int64_t blocks = std::max<int64_t>(blocks_per_split, 1);
  const int64_t want = ceil_div(int64_t(kDecodeTargetBlocksPerSm) * std::max(n_sms, 1), blocks);
  const int64_t useful = ceil_div(std::max(max_kv_len, 1), kDecodeSplitChunkKeys);
  const int64_t n = std::clamp<int64_t>(std::min(want, useful), 1, kDecodeMaxSplits);
  int32_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Flash decode (attention_decode.cu): one block per (sequence, KV head, split)
// holding all query heads of the KV head (or heads_per_block of them when a
// group has more than kFlashDecodeMaxHeads), so K and V are read once per
// group. A key row of head_dim elements is read as 16-byte vectors by
// lanes_per_key lanes (vecs_per_lane vectors each); a warp scores
// 32 / lanes_per_key keys at once and keys_per_group of them per step.
inline constexpr int32_t kFlashDecodeWarps = 4;
inline constexpr int32_t kFlashDecodeMaxHeads = 8;  // query heads per block
inline constexpr int32_t kVecBytes = 16;

// Keys one lane group loads per step: 4, or 2 with 8 heads per block (the
// query and accumulator registers grow with the heads).
PREFIXD_HD constexpr int32_t flash_decode_keys_per_group(int32_t heads_per_block) {
  return heads_per_block >= 8 ? 2 : 4;
}

struct FlashDecodeShape {
  bool supported = false;       // else the simple decode kernel runs
  int32_t vec_elems = 0;        // elements per 16-byte vector: 8 (F16/BF16) or 4 (F32)
  int32_t lanes_per_key = 0;    // power of two <= 32
  int32_t vecs_per_lane = 0;    // 1, or 2 (F32 rows over 128 elements)
  int32_t heads_per_block = 0;  // power of two <= kFlashDecodeMaxHeads (>= the group, or 8)
  int32_t head_groups = 0;      // blocks per KV head: ceil(group / heads_per_block)
  int32_t keys_per_group = 0;   // keys one lane group loads per step (registers: K, V of each)
};

inline int32_t pow2_ceil(int32_t n) {
  int32_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The flash decode layout of a shape: head_dim a multiple of 8 (whole
// 16-byte vectors of F16/BF16, an even number of F32 ones), at most
// kMaxHeadDim, query heads a multiple of KV heads. Otherwise unsupported (the
// simple kernel takes any head_dim <= 256).
inline constexpr int32_t kFlashDecodeHeadDimMultiple = 8;
inline FlashDecodeShape flash_decode_shape(DType kv, int32_t n_heads, int32_t n_kv_heads,
                                           int32_t head_dim) {
  FlashDecodeShape s;
  s.vec_elems = kVecBytes / static_cast<int32_t>(dtype_bytes(kv));
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % kFlashDecodeHeadDimMultiple != 0 ||
      n_kv_heads <= 0 || n_heads <= 0 || n_heads % n_kv_heads != 0)
    return s;
  const int32_t n_vec = head_dim / s.vec_elems;
  s.lanes_per_key = std::min<int32_t>(kWarpSize, pow2_ceil(n_vec));
  s.vecs_per_lane = static_cast<int32_t>(ceil_div(n_vec, s.lanes_per_key));
  const int32_t group = n_heads / n_kv_heads;
  s.heads_per_block = std::min(kFlashDecodeMaxHeads, pow2_ceil(group));
  s.head_groups = static_cast<int32_t>(ceil_div(group, s.heads_per_block));
  s.keys_per_group = flash_decode_keys_per_group(s.heads_per_block);
  s.supported = s.vecs_per_lane <= 2;
  return s;
}

// Key handled in step `step` by lane group `grp` (of 32 / lanes_per_key) of
// warp `warp`, slot r < keys_per_group, in a split whose keys start at
// `begin`: a warp step covers keys_per_group * (32 / lanes_per_key)
// consecutive keys, consecutive groups read consecutive keys, and the warps
// take steps in turn. Keys at or past the split's end are masked.
PREFIXD_HD constexpr int32_t flash_decode_key(int32_t begin, int32_t step, int32_t warp, int32_t r,
                                              int32_t grp, int32_t lanes_per_key,
                                              int32_t keys_per_group) {
  const int32_t groups = 32 / lanes_per_key;
  return begin + (step * kFlashDecodeWarps + warp) * keys_per_group * groups + r * groups + grp;
}

// Dynamic shared memory of flash decode: the warps' partials,
// (kFlashDecodeWarps, heads_per_block, head_dim + 2) f32: m, l, acc.
inline size_t flash_decode_smem_bytes(const FlashDecodeShape& s, int32_t head_dim) {
  return sizeof(float) * static_cast<size_t>(kFlashDecodeWarps) * s.heads_per_block *
         (head_dim + 2);
}

// grid (n_seqs, n_kv_heads * head_groups, n_splits), block kFlashDecodeWarps warps.
inline LaunchConfig flash_decode_launch(int32_t n_seqs, int32_t n_kv_heads, int32_t head_dim,
                                        const FlashDecodeShape& s, int32_t n_splits) {
  LaunchConfig c;
  c.block.x = kFlashDecodeWarps * kWarpSize;
  c.grid.x = static_cast<uint32_t>(std::max(n_seqs, 0));
  c.grid.y = static_cast<uint32_t>(std::max(n_kv_heads, 0) * s.head_groups);
  c.grid.z = static_cast<uint32_t>(std::max(n_splits, 0));
  c.smem_bytes = flash_decode_smem_bytes(s, head_dim);
  return c;
}

// Simple decode (attention_decode_simple.cu; any head_dim <= 256, the
// fallback and the reference of the start-up self-check): a block of
// kDecodeWarps warps owns one (sequence, query head, split); warps take
// 32-key chunks of the split in turn, each keeping its own online-softmax
// state, merged through shared memory:
//   q      (head_dim) f32
//   merge  (kDecodeWarps, head_dim + 2) f32: m, l, acc per warp
inline constexpr int32_t kDecodeWarps = 4;

inline size_t decode_smem_bytes(int32_t head_dim) {
  return sizeof(float) * (static_cast<size_t>(head_dim) +
                          static_cast<size_t>(kDecodeWarps) * (head_dim + 2));
}

// grid (n_seqs, n_heads, n_splits).
inline LaunchConfig attention_decode_launch(int32_t n_seqs, int32_t n_heads, int32_t head_dim,
                                            int32_t n_splits) {
  LaunchConfig c;
  c.block.x = kDecodeWarps * kWarpSize;
  c.grid.x = static_cast<uint32_t>(std::max(n_seqs, 0));
  c.grid.y = static_cast<uint32_t>(std::max(n_heads, 0));
  c.grid.z = static_cast<uint32_t>(std::max(n_splits, 0));
  c.smem_bytes = decode_smem_bytes(head_dim);
  return c;
}

// Reduction of the splits (both decode kernels): grid (n_seqs, n_heads), one
// thread per head dim.
inline LaunchConfig attention_decode_reduce_launch(int32_t n_seqs, int32_t n_heads, int32_t head_dim) {
  LaunchConfig c;
  c.block.x = round_up_warp(head_dim);
  c.grid.x = static_cast<uint32_t>(std::max(n_seqs, 0));
  c.grid.y = static_cast<uint32_t>(std::max(n_heads, 0));
  return c;
}

// Floats of one split partial: m, l, acc[head_dim] (paging.h's layout).
inline size_t decode_partial_floats(int32_t head_dim) { return static_cast<size_t>(head_dim) + 2; }
// Workspace of a decode launch: (n_seqs, n_heads, n_splits, head_dim + 2) f32; 0 for one split.
inline size_t decode_workspace_bytes(int32_t n_seqs, int32_t n_heads, int32_t head_dim,
                                     int32_t n_splits) {
  if (n_splits <= 1) return 0;
  return sizeof(float) * static_cast<size_t>(n_seqs) * n_heads * n_splits *
         decode_partial_floats(head_dim);
}

// Whether a configuration fits: grid and block limits, dynamic shared memory
// within `smem_limit_bytes` (kSmemDefaultLimitBytes, or an opt-in limit when
// the launcher raises cudaFuncAttributeMaxDynamicSharedMemorySize).
inline bool launch_fits(const LaunchConfig& c, size_t smem_limit_bytes) {
  return c.grid.x >= 1 && c.grid.x <= kMaxGridX && c.grid.y >= 1 && c.grid.y <= kMaxGridYZ &&
         c.grid.z >= 1 && c.grid.z <= kMaxGridYZ && c.block.volume() >= 1 &&
         c.block.volume() <= kMaxBlockThreads && c.block.x % kWarpSize == 0 &&
         c.smem_bytes <= smem_limit_bytes;
}

// --- the packed batch ----------------------------------------------------------

// Fields of one sequence in the packed layout.
inline constexpr int32_t kSeqWords = 5;  // q_start, n_q, pos0, table_start, n_table
inline constexpr int32_t kSectionAlignWords = 4;  // 16-byte aligned sections

// A Batch flattened into one int32 array, uploaded with one copy. Offsets are
// in int32 words from the start of `words`.
struct PackedBatch {
  std::vector<int32_t> words;
  int32_t tokens_off = 0;         // [n_tokens]
  int32_t positions_off = 0;      // [n_tokens]
  int32_t slots_off = 0;          // [n_tokens]
  int32_t seqs_off = 0;           // [n_seqs][kSeqWords]
  int32_t tables_off = 0;         // [block_tables.size()]
  int32_t output_rows_off = 0;    // [n_output_rows]
  int32_t prefill_tiles_off = 0;  // [n_prefill_tiles][2]: seq index, first row within the seq
  int32_t decode_seqs_off = 0;    // [n_decode_seqs]: seq index of each one-row sequence
  int32_t n_tokens = 0;
  int32_t n_seqs = 0;
  int32_t n_output_rows = 0;
  int32_t n_prefill_tiles = 0;
  int32_t n_decode_seqs = 0;
  int32_t max_decode_kv_len = 0;  // longest pos0 + 1 over decode sequences
  int32_t max_block_id = -1;      // largest block id referenced (tables and slots)
  int32_t max_token = -1;         // largest token id
};

// Checks the invariants the kernels rely on: rows of sequences contiguous and
// in order, positions = pos0 + row, slots through the table, tables long enough.
inline Status validate_batch(const Batch& b, int32_t block_size) {
  if (block_size <= 0) return Status::error("block_size must be positive");
  const size_t n = b.tokens.size();
  if (b.positions.size() != n || b.slots.size() != n)
    return Status::error("tokens, positions and slots differ in length");
  int32_t row = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const BatchSeq& s = b.seqs[i];
    const std::string at = "seq " + std::to_string(i) + ": ";
    if (s.q_start != row) return Status::error(at + "rows not contiguous");
    if (s.n_q <= 0 || s.pos0 < 0) return Status::error(at + "empty or negative position");
    const int64_t kv_len = int64_t(s.pos0) + s.n_q;
    if (s.n_table < ceil_div(kv_len, block_size)) return Status::error(at + "block table too short");
    if (s.table_start < 0 || int64_t(s.table_start) + s.n_table > int64_t(b.block_tables.size()))
      return Status::error(at + "block table out of range");
    for (int32_t r = 0; r < s.n_q; ++r) {
      const int32_t pos = s.pos0 + r;
      if (b.positions[s.q_start + r] != pos) return Status::error(at + "position mismatch");
      if (b.slots[s.q_start + r] !=
          paging::slot_of(b.block_tables.data() + s.table_start, block_size, pos))
        return Status::error(at + "slot does not follow the block table");
    }
    row += s.n_q;
  }
  if (static_cast<size_t>(row) != n) return Status::error("sequences do not cover the batch");
  for (int32_t id : b.block_tables)
    if (id < 0) return Status::error("negative block id");
  int32_t prev = -1;
  for (int32_t r : b.output_rows) {
    if (r <= prev || r >= row) return Status::error("output rows not ascending or out of range");
    prev = r;
  }
  for (int32_t t : b.tokens)
    if (t < 0) return Status::error("negative token id");
  return Status::ok_status();
}

// Flattens a validated batch. Sequences with n_q == 1 go to the decode kernel;
// longer ones are cut into kPrefillTileQ-row tiles for the prefill kernel.
inline PackedBatch pack_batch(const Batch& b, int32_t block_size) {
  PackedBatch p;
  auto section = [&](size_t n_words) {
    const size_t off = ceil_div(static_cast<int64_t>(p.words.size()), kSectionAlignWords) * kSectionAlignWords;
    p.words.resize(off + n_words, 0);
    return static_cast<int32_t>(off);
  };
  const size_t n = b.tokens.size();
  p.n_tokens = static_cast<int32_t>(n);
  p.n_seqs = static_cast<int32_t>(b.seqs.size());
  p.n_output_rows = static_cast<int32_t>(b.output_rows.size());
  p.tokens_off = section(n);
  std::copy(b.tokens.begin(), b.tokens.end(), p.words.begin() + p.tokens_off);
  p.positions_off = section(n);
  std::copy(b.positions.begin(), b.positions.end(), p.words.begin() + p.positions_off);
  p.slots_off = section(n);
  std::copy(b.slots.begin(), b.slots.end(), p.words.begin() + p.slots_off);
  p.seqs_off = section(b.seqs.size() * kSeqWords);
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const BatchSeq& s = b.seqs[i];
    int32_t* w = p.words.data() + p.seqs_off + i * kSeqWords;
    w[0] = s.q_start;
    w[1] = s.n_q;
    w[2] = s.pos0;
    w[3] = s.table_start;
    w[4] = s.n_table;
  }
  p.tables_off = section(b.block_tables.size());
  std::copy(b.block_tables.begin(), b.block_tables.end(), p.words.begin() + p.tables_off);
  p.output_rows_off = section(b.output_rows.size());
  std::copy(b.output_rows.begin(), b.output_rows.end(), p.words.begin() + p.output_rows_off);

  std::vector<int32_t> tiles;  // pairs (seq, row0)
  std::vector<int32_t> decode;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const BatchSeq& s = b.seqs[i];
    if (s.n_q == 1) {
      decode.push_back(static_cast<int32_t>(i));
      p.max_decode_kv_len = std::max(p.max_decode_kv_len, s.pos0 + 1);
    } else {
      for (int32_t r = 0; r < s.n_q; r += kPrefillTileQ) {
        tiles.push_back(static_cast<int32_t>(i));
        tiles.push_back(r);
      }
    }
    for (int32_t t = 0; t < s.n_table; ++t)
      p.max_block_id = std::max(p.max_block_id, b.block_tables[s.table_start + t]);
  }
  for (int32_t slot : b.slots) p.max_block_id = std::max(p.max_block_id, slot / block_size);
  for (int32_t t : b.tokens) p.max_token = std::max(p.max_token, t);
  p.n_prefill_tiles = static_cast<int32_t>(tiles.size() / 2);
  p.n_decode_seqs = static_cast<int32_t>(decode.size());
  p.prefill_tiles_off = section(tiles.size());
  std::copy(tiles.begin(), tiles.end(), p.words.begin() + p.prefill_tiles_off);
  p.decode_seqs_off = section(decode.size());
  std::copy(decode.begin(), decode.end(), p.words.begin() + p.decode_seqs_off);
  section(0);  // total length a multiple of the alignment
  return p;
}

// --- dtype dispatch --------------------------------------------------------------

// How a weight type is held on the device and multiplied. F32/F16/BF16: the
// matrix in its own type, activations converted to it, one cublasGemmEx.
// Block (quantized) types: the raw ggml rows as in the file; decode
// (n <= kMatvecMaxRows) runs quant_matvec on them, prefill dequantizes slabs
// of rows into the backend's F16 scratch and runs cublasGemmEx on each.
// Always F32 output and CUBLAS_COMPUTE_32F accumulation.
struct GemmDispatch {
  bool supported = false;         // a weight type this backend takes
  bool blocks = false;            // held as raw ggml blocks (see above)
  DType stored = DType::F32;      // what cublasGemmEx reads: the matrix, or the F16 scratch
  DType activation = DType::F32;  // x converted to this before the GEMM
};
inline GemmDispatch gemm_dispatch(WeightType w) {
  switch (w) {
    case WeightType::F32: return {true, false, DType::F32, DType::F32};
    case WeightType::F16: return {true, false, DType::F16, DType::F16};
    case WeightType::BF16: return {true, false, DType::BF16, DType::BF16};
    default: break;
  }
  const WeightTypeTraits* t = weight_type_traits(static_cast<uint32_t>(w));
  if (t == nullptr || !t->weight) return {};  // unknown, or activation-only (Q8_1, Q8_K)
  return {true, true, DType::F16, DType::F16};
}

// Index of the attention kernel instantiation for (KV dtype, dims per lane):
// 3 dtypes x 4 lane widths = 12 entries; -1 when the head dim is unsupported.
inline int32_t attention_variant(DType kv, int32_t head_dim) {
  const int32_t dpl = attention_dims_per_lane(head_dim);
  if (dpl == 0) return -1;
  const int32_t lane_idx = dpl == 1 ? 0 : dpl == 2 ? 1 : dpl == 4 ? 2 : 3;
  return static_cast<int32_t>(kv) * 4 + lane_idx;
}

// Bytes of the activation copy converted for a GEMM over (n, cols) inputs.
inline size_t gemm_activation_bytes(int64_t n, int64_t cols, DType activation) {
  return activation == DType::F32 ? 0 : static_cast<size_t>(n) * cols * dtype_bytes(activation);
}

// --- weights kept as ggml blocks -------------------------------------------------
// Kernels decode 8-value chunks of a block (quant_chunk.h, kQuantChunkValues).

// Decode: quant_matvec reads the blocks directly, one warp per output row,
// kMatvecWarps rows per thread block, for up to kMatvecMaxRows rows of x at
// once (kernels instantiated for 1, 2, 4 and 8 rows, the unused ones masked).
inline constexpr int32_t kMatvecWarps = 4;
inline constexpr int32_t kMatvecMaxRows = 8;

enum class QuantMatmulPath : uint8_t {
  kMatvec,       // n <= kMatvecMaxRows: blocks read in place
  kDequantGemm,  // larger n: F16 slabs in the scratch + cublasGemmEx
};
inline QuantMatmulPath quant_matmul_path(int64_t n) {
  return n <= kMatvecMaxRows ? QuantMatmulPath::kMatvec : QuantMatmulPath::kDequantGemm;
}

// Rows of x the matvec kernel is instantiated for: the smallest of 1, 2, 4, 8
// holding n; 0 outside [1, kMatvecMaxRows].
inline int32_t matvec_rows_variant(int64_t n) {
  if (n < 1 || n > kMatvecMaxRows) return 0;
  return n == 1 ? 1 : n == 2 ? 2 : n <= 4 ? 4 : 8;
}

// grid (ceil(rows / kMatvecWarps)), block kMatvecWarps warps.
inline LaunchConfig quant_matvec_launch(int64_t rows, int64_t cols) {
  LaunchConfig c;
  c.block.x = kMatvecWarps * kWarpSize;
  c.grid.x = static_cast<uint32_t>(ceil_div(std::max<int64_t>(rows, 0), kMatvecWarps));
  if (cols <= 0) c.grid.x = 0;
  return c;
}

// Dequantization to F16: one thread per 8-value chunk, grid-stride.
inline LaunchConfig dequantize_launch(int64_t n_values) { return elementwise_launch(n_values / 8); }

// Embedding rows of a block table: one thread block per token, threads stride
// over the row's 8-value chunks.
inline LaunchConfig embed_blocks_launch(int64_t n_tokens, int64_t cols) {
  return row_launch(n_tokens, cols / 8);
}

// Prefill dequantizes at most this many bytes of F16 rows at a time: the
// backend's one scratch holds min(largest matrix, this) and larger matrices
// (the output projection of a big vocabulary) run as several slab GEMMs.
inline constexpr size_t kDequantScratchMaxBytes = size_t(128) << 20;
inline constexpr int64_t kDequantSlabRowMultiple = 64;  // slabs of a split matrix

// Rows of one dequantized slab of a (rows, cols) matrix: all of them when the
// F16 copy fits in `max_bytes`, else the most that fit rounded down to a
// multiple of kDequantSlabRowMultiple (at least one row).
inline int64_t dequant_slab_rows(int64_t rows, int64_t cols,
                                 size_t max_bytes = kDequantScratchMaxBytes) {
  const size_t row_bytes = static_cast<size_t>(cols) * 2;
  if (rows <= 0 || cols <= 0) return 0;
  if (static_cast<size_t>(rows) * row_bytes <= max_bytes) return rows;
  int64_t fit = static_cast<int64_t>(max_bytes / row_bytes);
  if (fit >= kDequantSlabRowMultiple) fit -= fit % kDequantSlabRowMultiple;
  return std::max<int64_t>(fit, 1);
}

// Bytes of F16 scratch a (rows, cols) block matrix needs for prefill.
inline size_t dequant_scratch_bytes(int64_t rows, int64_t cols,
                                    size_t max_bytes = kDequantScratchMaxBytes) {
  return static_cast<size_t>(dequant_slab_rows(rows, cols, max_bytes)) *
         static_cast<size_t>(cols) * 2;
}

// Whether a (rows, cols) matrix of `type` can be uploaded: a weight type this
// backend takes and whole blocks per row.
inline Status check_weight_shape(WeightType type, int64_t rows, int64_t cols) {
  const GemmDispatch g = gemm_dispatch(type);
  if (!g.supported)
    return Status::error("weight type " + std::to_string(static_cast<uint32_t>(type)) +
                         " is not supported by the CUDA backend");
  if (rows <= 0 || cols <= 0) return Status::error("matrix has a non-positive dimension");
  const int32_t block = weight_type_traits(type).block_elements;
  if (cols % block != 0)
    return Status::error(std::string(weight_type_name(type)) + " row of " +
                         std::to_string(cols) + " values is not a whole number of " +
                         std::to_string(block) + "-value blocks");
  return Status::ok_status();
}

// --- pool sizing ---------------------------------------------------------------

// Blocks that fit in `budget_bytes` (one K and one V allocation per layer).
inline int32_t kv_pool_blocks_for_bytes(const KvGeometry& g, size_t budget_bytes) {
  const size_t per = g.block_bytes();
  if (per == 0) return 0;
  return static_cast<int32_t>(std::min<size_t>(budget_bytes / per, 0x7fffffff));
}

// Blocks for a fraction of the device's free memory after `reserve_bytes`
// (weights, scratch and cuBLAS workspace kept out of the pool).
inline int32_t kv_pool_blocks_for_free_fraction(const KvGeometry& g, size_t free_bytes,
                                                double fraction, size_t reserve_bytes) {
  const double usable = static_cast<double>(free_bytes) * std::clamp(fraction, 0.0, 1.0) -
                        static_cast<double>(reserve_bytes);
  if (usable <= 0) return 0;
  return kv_pool_blocks_for_bytes(g, static_cast<size_t>(usable));
}

// Bytes of one layer's K (or V) allocation.
inline size_t kv_layer_bytes(const KvGeometry& g) {
  return g.layer_block_bytes() * static_cast<size_t>(g.n_blocks);
}

// --- batched block transfers -----------------------------------------------------

// Pinned staging of a batched transfer (write_blocks / read_blocks): at most
// this many bytes, or one block when a block is larger.
inline constexpr size_t kBlockStagingMaxBytes = 64ull << 20;

// A run: staging slots [first_slot, first_slot + n_blocks) holding blocks
// first_block, first_block + 1, ...: contiguous in every layer's K and V
// allocation, so one copy per layer and side moves the whole run.
struct BlockRun {
  int32_t first_slot = 0;
  int32_t first_block = 0;
  int32_t n_blocks = 0;
};
// A group: the list entries staged at once, in staging order (ascending block
// id, whatever the list order). Staging layout (layer-major, so a run is
// contiguous there too): layer l, side s (0 = K, 1 = V), slot j at
// ((2 * l + s) * entries.size() + j) * layer_block_bytes (block_staging_offset).
struct BlockGroup {
  std::vector<int32_t> entries;  // slot j holds list entry entries[j]
  std::vector<BlockRun> runs;    // ascending, covering every slot
};

// Orders the list by block id, cuts it into groups of at most
// max(1, max_staging_bytes / block_bytes) entries, and each group into runs
// of consecutive ids. Block ids must be distinct.
inline std::vector<BlockGroup> plan_block_transfer(const std::vector<int32_t>& block_ids, size_t block_bytes,
                                                   size_t max_staging_bytes) {
  std::vector<int32_t> order(block_ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return block_ids[a] < block_ids[b]; });
  const size_t per_group = std::max<size_t>(1, block_bytes == 0 ? 1 : max_staging_bytes / block_bytes);
  std::vector<BlockGroup> groups;
  for (size_t g0 = 0; g0 < order.size(); g0 += per_group) {
    BlockGroup g;
    g.entries.assign(order.begin() + static_cast<std::ptrdiff_t>(g0),
                     order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), g0 + per_group)));
    for (size_t j = 0; j < g.entries.size(); ++j) {
      const int32_t id = block_ids[g.entries[j]];
      if (!g.runs.empty() && g.runs.back().first_block + g.runs.back().n_blocks == id) {
        ++g.runs.back().n_blocks;
      } else {
        g.runs.push_back(BlockRun{static_cast<int32_t>(j), id, 1});
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// Byte offset of (layer, side, slot j) in a group's staging (see BlockGroup).
inline size_t block_staging_offset(int32_t layer, int32_t side, int32_t j, size_t group_blocks,
                                   size_t layer_block_bytes) {
  return ((2 * static_cast<size_t>(layer) + side) * group_blocks + j) * layer_block_bytes;
}

}  // namespace prefixd::cuda
