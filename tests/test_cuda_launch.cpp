// CPU-only checks of the CUDA backend's host-side arithmetic (kernels/cuda/
// launch_config.h, kernels/op_math_ext.h): launch shapes for every test model
// and preset, shared-memory limits, batch packing, workspace and pool sizes,
// the dtype dispatch table, the shared softmax/RoPE math, and the block-format
// chunk decoding of the quantized-weight kernels against quant::dequantize_row.
// Runs everywhere.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/batch_builder.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/quant_chunk.h"
#include "kernels/op_math_ext.h"
#include "kernels/quant/dequantize.h"
#include "tests/random_blocks.h"

using namespace prefixd;
using namespace prefixd::cuda;

namespace {

struct Shape {
  std::string name;
  int32_t hidden, n_heads, n_kv_heads, head_dim, n_ff, n_vocab, n_layers;
};

// ../shared/models and the generated presets.
std::vector<Shape> shapes() {
  return {{"stories260K", 64, 8, 4, 8, 172, 512, 5},
          {"rand-mqa-f16", 256, 4, 1, 64, 704, 1024, 2},
          {"rand-qwen2-bf16", 256, 2, 2, 128, 512, 1024, 2},
          {"tiny", 256, 8, 4, 32, 768, 32000, 4},
          {"smol-135m", 576, 9, 3, 64, 1536, 49152, 30}};
}

void check_fits(const LaunchConfig& c, const char* what) {
  CAPTURE(what);
  CHECK_FALSE(c.empty());
  CHECK(launch_fits(c, kSmemDefaultLimitBytes));
}

}  // namespace

TEST_CASE("every kernel of every model shape has a non-empty launch within device limits") {
  for (const Shape& s : shapes()) {
    CAPTURE(s.name);
    const int32_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
    for (int32_t n : {1, 7, 16, 17, 512, 2048}) {
      CAPTURE(n);
      check_fits(row_launch(n, s.hidden), "embed/rmsnorm");
      check_fits(row_launch(n, kv_dim), "kv_store");
      check_fits(elementwise_launch(int64_t(n) * s.n_ff), "swiglu");
      check_fits(elementwise_launch(int64_t(n) * s.hidden), "add");
      check_fits(elementwise_launch(int64_t(n) * q_dim), "add_bias");
      check_fits(elementwise_launch(int64_t(n) * s.n_vocab), "convert");
      check_fits(rope_launch(n, s.n_heads, s.head_dim), "rope q");
      check_fits(rope_launch(n, s.n_kv_heads, s.head_dim), "rope k");
      const int32_t tiles = static_cast<int32_t>(ceil_div(n, kPrefillTileQ));
      check_fits(attention_prefill_launch(tiles, s.n_heads, s.head_dim), "prefill");
      for (int32_t kv_len : {1, 100, 4096, 32768}) {
        const int32_t splits = decode_split_count(int64_t(n) * s.n_heads, kv_len, 132);
        check_fits(attention_decode_launch(n, s.n_heads, s.head_dim, splits), "decode (simple)");
        check_fits(attention_decode_reduce_launch(n, s.n_heads, s.head_dim), "decode reduce");
        for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
          const FlashDecodeShape f = flash_decode_shape(kv, s.n_heads, s.n_kv_heads, s.head_dim);
          REQUIRE(f.supported);  // every shared model's head_dim is a multiple of 8
          const int32_t fs =
              decode_split_count(int64_t(n) * s.n_kv_heads * f.head_groups, kv_len, 132);
          check_fits(flash_decode_launch(n, s.n_kv_heads, s.head_dim, f, fs), "decode (flash)");
        }
      }
    }
    // Row kernels use a warp multiple of threads, never more than the row needs
    // rounded up to a warp, and at most 256.
    CHECK(row_launch(3, s.hidden).block.x == std::min<uint32_t>(256, round_up_warp(s.hidden)));
    CHECK(attention_dims_per_lane(s.head_dim) * 32 >= s.head_dim);
  }
}

TEST_CASE("launch shapes are exact for known inputs") {
  LaunchConfig e = elementwise_launch(1000);
  CHECK(e.grid.x == 4);
  CHECK(e.block.x == 256);
  CHECK(elementwise_launch(int64_t(1) << 40).grid.x == kElementwiseMaxBlocks);  // grid-stride
  CHECK(elementwise_launch(0).empty());
  CHECK(row_launch(0, 64).empty());
  CHECK(row_launch(5, 0).empty());
  LaunchConfig r = row_launch(5, 8);  // stories260K kv_store row: one warp
  CHECK(r.grid.x == 5);
  CHECK(r.block.x == 32);
  CHECK(row_launch(5, 576).block.x == 256);
  CHECK(rope_launch(3, 9, 64).grid.x == 4);  // 3 * 9 * 32 = 864 pairs
  LaunchConfig p = attention_prefill_launch(6, 9, 64);
  CHECK(p.grid.x == 6);
  CHECK(p.grid.y == 9);
  CHECK(p.block.x == 128);
  CHECK(attention_prefill_launch(0, 9, 64).empty());
  LaunchConfig d = attention_decode_reduce_launch(3, 4, 8);
  CHECK(d.block.x == 32);
  CHECK(attention_decode_reduce_launch(3, 2, 128).block.x == 128);
}

TEST_CASE("attention shared memory: exact bytes, default limit up to head_dim 128, opt-in for 256") {
  // (16 q rows * hd + 32 * (hd + 1) + 32 * hd) floats.
  CHECK(prefill_smem_bytes(8) == 4 * (128 + 288 + 256));
  CHECK(prefill_smem_bytes(32) == 4 * (512 + 1056 + 1024));
  CHECK(prefill_smem_bytes(64) == 4 * (1024 + 2080 + 2048));
  CHECK(prefill_smem_bytes(128) == 41088);
  CHECK(prefill_smem_bytes(128) <= kSmemDefaultLimitBytes);
  CHECK(prefill_smem_bytes(256) > kSmemDefaultLimitBytes);
  CHECK(prefill_smem_bytes(256) <= kSmemOptInLimitSm80Bytes);
  // q (hd) + 4 warps * (hd + 2) floats.
  CHECK(decode_smem_bytes(64) == 4 * (64 + 4 * 66));
  CHECK(decode_smem_bytes(256) <= kSmemDefaultLimitBytes);
  LaunchConfig big = attention_prefill_launch(1, 1, 256);
  CHECK_FALSE(launch_fits(big, kSmemDefaultLimitBytes));
  CHECK(launch_fits(big, kSmemOptInLimitSm80Bytes));
  CHECK(launch_fits(big, kSmemOptInLimitSm90Bytes));
}

TEST_CASE(
    "decode split count: a power of two up to 64, no more than the longest range has chunks") {
  for (int64_t blocks : {1, 3, 8, 32, 64, 256, 4096}) {
    for (int32_t kv : {1, 31, 63, 64, 65, 127, 128, 129, 500, 1000, 4096, 8100, 32768, 1 << 20}) {
      for (int32_t sms : {1, 108, 132}) {
        CAPTURE(blocks);
        CAPTURE(kv);
        CAPTURE(sms);
        const int32_t n = decode_split_count(blocks, kv, sms);
        CHECK(n >= 1);
        CHECK(n <= kDecodeMaxSplits);
        CHECK((n & (n - 1)) == 0);
        // Rounded up from min(wanted, chunks of the longest range): below 2x that.
        const int64_t chunks = ceil_div(kv, kDecodeSplitChunkKeys);
        CHECK(n < 2 * std::max<int64_t>(chunks, 1));
        const int64_t want = ceil_div(int64_t(kDecodeTargetBlocksPerSm) * sms, blocks);
        CHECK(n < 2 * std::max<int64_t>(want, 1));
      }
    }
  }
  // Llama-3.2-1B shapes on an H100 (132 SMs), flash decode: one sequence is
  // 8 blocks per split (8 KV heads, 4 query heads each).
  CHECK(decode_split_count(8, 8100, 132) == 64);  // 127 chunks, 66 splits wanted -> 64
  CHECK(decode_split_count(8, 500, 132) == 8);    // 8 chunks of 64 keys
  CHECK(decode_split_count(8, 1, 132) == 1);
  CHECK(decode_split_count(16 * 8, 2000, 132) == 8);  // 16 streams: 5 wanted -> 8
  CHECK(decode_split_count(64 * 9, 4096, 132) == 1);  // enough blocks already
  CHECK(decode_split_count(1, 1 << 20, 132) == kDecodeMaxSplits);
}

TEST_CASE("flash decode shapes: 16-byte vectors, lanes per key, heads per block") {
  // Llama-3.2-1B: 32 heads over 8 KV heads, head_dim 64, BF16 pool: a row is
  // 8 vectors read by 8 lanes, 4 rows per warp load, the 4 heads of a group
  // in one block, 4 keys per lane group per step.
  FlashDecodeShape l = flash_decode_shape(DType::BF16, 32, 8, 64);
  CHECK(l.supported);
  CHECK(l.vec_elems == 8);
  CHECK(l.lanes_per_key == 8);
  CHECK(l.vecs_per_lane == 1);
  CHECK(l.heads_per_block == 4);
  CHECK(l.head_groups == 1);
  CHECK(l.keys_per_group == 4);
  LaunchConfig c = flash_decode_launch(3, 8, 64, l, 16);
  CHECK(c.grid.x == 3);
  CHECK(c.grid.y == 8);
  CHECK(c.grid.z == 16);
  CHECK(c.block.x == 128);
  CHECK(c.smem_bytes == 4 * 4 * 4 * 66);
  // F32 rows of 256: 64 vectors, 32 lanes x 2.
  FlashDecodeShape f = flash_decode_shape(DType::F32, 4, 2, 256);
  CHECK(f.supported);
  CHECK(f.lanes_per_key == 32);
  CHECK(f.vecs_per_lane == 2);
  CHECK(f.heads_per_block == 2);
  // head_dim 96 in F16: 12 vectors on 16 lanes (4 idle); 3 heads per group -> blocks of 4 (one
  // idle).
  FlashDecodeShape o = flash_decode_shape(DType::F16, 9, 3, 96);
  CHECK(o.supported);
  CHECK(o.lanes_per_key == 16);
  CHECK(o.heads_per_block == 4);
  CHECK(o.head_groups == 1);
  // head_dim 8 (stories260K): one vector, one lane per key, 32 keys per warp load.
  CHECK(flash_decode_shape(DType::BF16, 8, 4, 8).lanes_per_key == 1);
  CHECK(flash_decode_shape(DType::F32, 8, 4, 8).lanes_per_key == 2);
  // Groups over 8 heads: blocks of 8 heads, 2 keys per lane group.
  FlashDecodeShape m = flash_decode_shape(DType::BF16, 20, 1, 64);
  CHECK(m.heads_per_block == 8);
  CHECK(m.head_groups == 3);
  CHECK(m.keys_per_group == 2);
  CHECK(flash_decode_launch(2, 1, 64, m, 4).grid.y == 3);
  // Not taken (the simple kernel runs): head_dim not a multiple of 8, over
  // 256, heads not a multiple of KV heads.
  CHECK_FALSE(flash_decode_shape(DType::BF16, 4, 2, 12).supported);
  CHECK_FALSE(flash_decode_shape(DType::F32, 4, 2, 4).supported);
  CHECK_FALSE(flash_decode_shape(DType::BF16, 4, 2, 264).supported);
  CHECK_FALSE(flash_decode_shape(DType::BF16, 6, 4, 64).supported);
  // Shared memory stays under the default limit for every supported shape.
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    for (int32_t hd = 8; hd <= kMaxHeadDim; hd += 8) {
      for (int32_t group : {1, 2, 3, 4, 5, 8, 12, 64}) {
        const FlashDecodeShape s = flash_decode_shape(kv, group * 2, 2, hd);
        CAPTURE(hd);
        CAPTURE(group);
        REQUIRE(s.supported);
        CHECK(s.lanes_per_key * s.vecs_per_lane * s.vec_elems >= hd);
        CHECK(s.lanes_per_key * s.vecs_per_lane * s.vec_elems < 2 * hd + 8);
        CHECK(s.heads_per_block * s.head_groups >= group);
        CHECK(s.heads_per_block * (s.head_groups - 1) < group);
        CHECK(launch_fits(flash_decode_launch(1, 2, hd, s, kDecodeMaxSplits),
                          kSmemDefaultLimitBytes));
      }
    }
  }
}

TEST_CASE("flash decode key assignment covers a split's keys exactly once, in warp steps") {
  for (int32_t lanes : {1, 2, 4, 8, 16, 32}) {
    for (int32_t kpg : {2, 4}) {
      for (int32_t n_keys : {1, 5, 64, 100, 129, 1000}) {
        CAPTURE(lanes);
        CAPTURE(kpg);
        CAPTURE(n_keys);
        const int32_t begin = 37, end = begin + n_keys, groups = 32 / lanes;
        std::vector<int32_t> seen(n_keys, 0);
        for (int32_t warp = 0; warp < kFlashDecodeWarps; ++warp) {
          // The kernel's loop: a warp steps while its first key is in range.
          for (int32_t step = 0; flash_decode_key(begin, step, warp, 0, 0, lanes, kpg) < end;
               ++step) {
            for (int32_t r = 0; r < kpg; ++r) {
              for (int32_t g = 0; g < groups; ++g) {
                const int32_t key = flash_decode_key(begin, step, warp, r, g, lanes, kpg);
                CHECK(key >= begin);
                if (key < end) ++seen[key - begin];
              }
            }
          }
        }
        for (int32_t i = 0; i < n_keys; ++i) CHECK(seen[i] == 1);
      }
    }
  }
  // Consecutive lane groups read consecutive keys (adjacent slots of a block).
  CHECK(flash_decode_key(0, 0, 0, 0, 1, 8, 4) == 1);
  CHECK(flash_decode_key(0, 0, 0, 1, 0, 8, 4) == 4);
  CHECK(flash_decode_key(0, 0, 1, 0, 0, 8, 4) == 16);
  CHECK(flash_decode_key(0, 1, 0, 0, 0, 8, 4) == 64);
}

TEST_CASE("decode workspace bytes") {
  CHECK(decode_workspace_bytes(8, 4, 64, 1) == 0);
  CHECK(decode_workspace_bytes(2, 4, 64, 32) == size_t(4) * 2 * 4 * 32 * 66);
  CHECK(decode_partial_floats(128) == 130);
}

TEST_CASE("batch packing: sections, prefill tiles and decode sequences") {
  BatchBuilder bb(16);
  std::vector<int32_t> a_tokens(20);
  for (int i = 0; i < 20; ++i) a_tokens[i] = 100 + i;
  std::vector<int32_t> a_table = {5, 3};
  std::vector<int32_t> b_table = {7, 1, 2};
  bb.add(a_tokens, 0, a_table, LogitsWanted::kLast);
  bb.add(std::vector<int32_t>{42}, 37, b_table, LogitsWanted::kLast);
  const Batch& batch = bb.batch();
  REQUIRE(validate_batch(batch, 16).ok());
  PackedBatch p = pack_batch(batch, 16);
  CHECK(p.n_tokens == 21);
  CHECK(p.n_seqs == 2);
  CHECK(p.n_output_rows == 2);
  for (int32_t off : {p.tokens_off, p.positions_off, p.slots_off, p.seqs_off, p.tables_off,
                      p.output_rows_off, p.prefill_tiles_off, p.decode_seqs_off}) {
    CHECK(off % kSectionAlignWords == 0);
  }
  CHECK(p.words.size() % kSectionAlignWords == 0);
  CHECK(p.tokens_off == 0);
  CHECK(p.positions_off == 24);  // 21 tokens padded to 24
  CHECK(p.words[p.tokens_off + 20] == 42);
  CHECK(p.words[p.positions_off + 20] == 37);
  CHECK(p.words[p.slots_off + 0] == 5 * 16);
  CHECK(p.words[p.slots_off + 17] == 3 * 16 + 1);
  CHECK(p.words[p.slots_off + 20] == 2 * 16 + 5);  // pos 37: block 2 of the table -> 2
  const int32_t* s1 = &p.words[p.seqs_off + kSeqWords];
  CHECK(s1[0] == 20);  // q_start
  CHECK(s1[1] == 1);   // n_q
  CHECK(s1[2] == 37);  // pos0
  CHECK(s1[3] == 2);   // table_start
  CHECK(s1[4] == 3);   // n_table
  CHECK(std::vector<int32_t>(p.words.begin() + p.tables_off, p.words.begin() + p.tables_off + 5) ==
        std::vector<int32_t>{5, 3, 7, 1, 2});
  CHECK(p.words[p.output_rows_off] == 19);
  CHECK(p.words[p.output_rows_off + 1] == 20);
  // 20 prefill rows -> tiles at rows 0 and 16 of sequence 0; sequence 1 decodes.
  REQUIRE(p.n_prefill_tiles == 2);
  CHECK(p.words[p.prefill_tiles_off + 0] == 0);
  CHECK(p.words[p.prefill_tiles_off + 1] == 0);
  CHECK(p.words[p.prefill_tiles_off + 2] == 0);
  CHECK(p.words[p.prefill_tiles_off + 3] == 16);
  REQUIRE(p.n_decode_seqs == 1);
  CHECK(p.words[p.decode_seqs_off] == 1);
  CHECK(p.max_decode_kv_len == 38);
  CHECK(p.max_block_id == 7);
  CHECK(p.max_token == 119);
}

TEST_CASE("batch validation refuses what the kernels cannot read safely") {
  BatchBuilder bb(16);
  std::vector<int32_t> table = {0, 1};
  bb.add(std::vector<int32_t>{1, 2, 3}, 14, table, LogitsWanted::kAll);
  const Batch good = bb.batch();
  REQUIRE(validate_batch(good, 16).ok());
  Batch b = good;
  b.slots[2] = 99;
  CHECK(validate_batch(b, 16).message().find("slot") != std::string::npos);
  b = good;
  b.seqs[0].n_table = 1;  // positions 14..16 need two blocks
  CHECK(validate_batch(b, 16).message().find("too short") != std::string::npos);
  b = good;
  b.output_rows = {1, 0};
  CHECK_FALSE(validate_batch(b, 16).ok());
  b = good;
  b.positions[1] = 3;
  CHECK(validate_batch(b, 16).message().find("position") != std::string::npos);
  b = good;
  b.seqs[0].q_start = 1;
  CHECK(validate_batch(b, 16).message().find("contiguous") != std::string::npos);
  b = good;
  b.tokens[0] = -1;
  CHECK_FALSE(validate_batch(b, 16).ok());
  CHECK_FALSE(validate_batch(good, 0).ok());
}

TEST_CASE("dtype dispatch table") {
  CHECK(gemm_dispatch(WeightType::F32).stored == DType::F32);
  CHECK(gemm_dispatch(WeightType::F32).activation == DType::F32);
  CHECK(gemm_dispatch(WeightType::F16).stored == DType::F16);
  CHECK(gemm_dispatch(WeightType::F16).activation == DType::F16);
  CHECK(gemm_dispatch(WeightType::BF16).stored == DType::BF16);
  CHECK(gemm_dispatch(WeightType::BF16).activation == DType::BF16);
  for (WeightType w : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    CHECK(gemm_dispatch(w).supported);
    CHECK_FALSE(gemm_dispatch(w).blocks);
  }
  // Every block (quantized) weight type: raw blocks on the device, F16 for prefill.
  for (const WeightTypeTraits& t : kWeightTypes) {
    CAPTURE(t.name);
    const GemmDispatch g = gemm_dispatch(t.type);
    CHECK(g.supported == t.weight);
    if (!t.weight || t.block_elements == 1) continue;
    CHECK(g.blocks);
    CHECK(g.stored == DType::F16);
    CHECK(g.activation == DType::F16);
  }
  CHECK(gemm_dispatch(WeightType::Q8_0).blocks);
  CHECK_FALSE(gemm_dispatch(WeightType::Q8_1).supported);  // activation-only formats
  CHECK_FALSE(gemm_dispatch(WeightType::Q8_K).supported);
  CHECK_FALSE(gemm_dispatch(static_cast<WeightType>(99)).supported);
  CHECK(gemm_activation_bytes(7, 576, DType::F32) == 0);
  CHECK(gemm_activation_bytes(7, 576, DType::BF16) == 7 * 576 * 2);

  CHECK(attention_dims_per_lane(8) == 1);
  CHECK(attention_dims_per_lane(32) == 1);
  CHECK(attention_dims_per_lane(33) == 2);
  CHECK(attention_dims_per_lane(64) == 2);
  CHECK(attention_dims_per_lane(96) == 4);
  CHECK(attention_dims_per_lane(128) == 4);
  CHECK(attention_dims_per_lane(256) == 8);
  CHECK(attention_dims_per_lane(257) == 0);
  CHECK(attention_dims_per_lane(0) == 0);
  CHECK(attention_variant(DType::F32, 8) == 0);
  CHECK(attention_variant(DType::F16, 64) == 5);
  CHECK(attention_variant(DType::BF16, 128) == 10);
  CHECK(attention_variant(DType::BF16, 256) == 11);
  CHECK(attention_variant(DType::F16, 300) == -1);
  std::set<int32_t> seen;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int32_t hd : {32, 64, 128, 256}) seen.insert(attention_variant(t, hd));
  CHECK(seen.size() == 12);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 11);
}

TEST_CASE("quantized matmul path, matvec variants and launch shapes") {
  CHECK(quant_matmul_path(1) == QuantMatmulPath::kMatvec);
  CHECK(quant_matmul_path(kMatvecMaxRows) == QuantMatmulPath::kMatvec);
  CHECK(quant_matmul_path(kMatvecMaxRows + 1) == QuantMatmulPath::kDequantGemm);
  CHECK(quant_matmul_path(2048) == QuantMatmulPath::kDequantGemm);
  CHECK(matvec_rows_variant(0) == 0);
  CHECK(matvec_rows_variant(1) == 1);
  CHECK(matvec_rows_variant(2) == 2);
  CHECK(matvec_rows_variant(3) == 4);
  CHECK(matvec_rows_variant(4) == 4);
  CHECK(matvec_rows_variant(5) == 8);
  CHECK(matvec_rows_variant(8) == 8);
  CHECK(matvec_rows_variant(9) == 0);
  for (int64_t n = 1; n <= kMatvecMaxRows; ++n) CHECK(matvec_rows_variant(n) >= n);

  const LaunchConfig mv = quant_matvec_launch(1026, 4096);  // 1026 rows, 4 per block
  CHECK(mv.grid.x == 257);
  CHECK(mv.block.x == kMatvecWarps * kWarpSize);
  CHECK(quant_matvec_launch(0, 256).empty());
  CHECK(quant_matvec_launch(10, 0).empty());
  CHECK(dequantize_launch(256 * 1024).grid.x == 128);  // 32768 chunks of 8, 256 threads
  CHECK(dequantize_launch(0).empty());
  CHECK(embed_blocks_launch(9, 256).grid.x == 9);
  CHECK(embed_blocks_launch(9, 256).block.x == 32);
  for (const Shape& s : shapes()) {
    CAPTURE(s.name);
    for (int64_t rows : {int64_t(s.hidden), int64_t(s.n_ff), int64_t(s.n_vocab)}) {
      check_fits(quant_matvec_launch(rows, s.hidden), "quant_matvec");
      check_fits(dequantize_launch(rows * s.hidden), "dequantize");
    }
    check_fits(embed_blocks_launch(2048, s.hidden), "embed blocks");
  }
  // Llama 3 8B's output projection: 128256 x 4096 rows of blocks.
  check_fits(quant_matvec_launch(128256, 4096), "quant_matvec vocab");
}

TEST_CASE("prefill dequantization scratch: one slab for most matrices, slabs for the largest") {
  // Everything up to kDequantScratchMaxBytes of F16 is one slab.
  CHECK(dequant_slab_rows(11008, 4096) == 11008);  // 90 MB
  CHECK(dequant_scratch_bytes(11008, 4096) == size_t(11008) * 4096 * 2);
  CHECK(dequant_slab_rows(16384, 4096) == 16384);  // exactly 128 MiB
  // A 128256 x 4096 output projection: 16384-row slabs (8 of them), 128 MiB.
  CHECK(dequant_slab_rows(128256, 4096) == 16384);
  CHECK(dequant_scratch_bytes(128256, 4096) == kDequantScratchMaxBytes);
  // Slabs of a split matrix are multiples of 64 rows, never more than the cap.
  const int64_t odd = dequant_slab_rows(100000, 3000);
  CHECK(odd % kDequantSlabRowMultiple == 0);
  CHECK(size_t(odd) * 3000 * 2 <= kDequantScratchMaxBytes);
  CHECK(size_t(odd + kDequantSlabRowMultiple) * 3000 * 2 > kDequantScratchMaxBytes);
  // At least one row even when a row alone is larger than the cap.
  CHECK(dequant_slab_rows(4, 1000, 1024) == 1);
  CHECK(dequant_slab_rows(100, 256, 10 * 512) == 10);  // fewer than 64 fit: not rounded
  CHECK(dequant_slab_rows(0, 256) == 0);

  CHECK(check_weight_shape(WeightType::Q4_K, 4, 512).ok());
  CHECK(check_weight_shape(WeightType::Q4_0, 4, 96).ok());
  CHECK(check_weight_shape(WeightType::F16, 3, 7).ok());
  CHECK(check_weight_shape(WeightType::Q4_K, 4, 96).message().find("256") != std::string::npos);
  CHECK_FALSE(check_weight_shape(WeightType::Q8_K, 4, 256).ok());
  CHECK_FALSE(check_weight_shape(WeightType::Q4_0, 0, 32).ok());
}

TEST_CASE("IQ4_NL code book packed for the device equals quant::iq4nl_value") {
  for (uint32_t i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(chunk::iq4nl(i) == quant::iq4nl_value(static_cast<int>(i)));
  }
}

TEST_CASE("chunk decoding of every block format equals quant::dequantize_row bit for bit") {
  // The kernels' per-chunk decoding (kernels/cuda/quant_chunk.h), run on the
  // host: chunk c of a block must give values 8c .. 8c + 7 of dequantize_row.
  // Small scales, and scales spanning F16 from subnormal to large.
  std::vector<WeightType> seen;
  for (WeightType type : testing::block_weight_types()) {
    for (auto [lo, hi] : {std::pair{1e-3f, 1e-2f}, std::pair{1e-7f, 3e4f}}) {
      CAPTURE(weight_type_name(type));
      CAPTURE(hi);
      const int64_t rows = 3, cols = 512;
      const std::vector<uint8_t> w = testing::random_weight_blocks(type, rows, cols, 7, lo, hi);
      std::vector<float> want(rows * cols), got(rows * cols);  // (rows, cols) f32
      const size_t row_bytes = weight_row_bytes(type, cols);
      for (int64_t r = 0; r < rows; ++r)
        quant::dequantize_row(type, w.data() + r * row_bytes, want.data() + r * cols, cols);
      dispatch_block_type(type, [&](auto tag) {
        using C = Chunks<decltype(tag)::value>;
        constexpr int kChunksPerBlock = C::kBlockValues / kQuantChunkValues;
        CHECK(C::kBlockValues == weight_type_traits(type).block_elements);
        CHECK(C::kBlockBytes == weight_type_traits(type).block_bytes);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols / kQuantChunkValues; ++c) {
            float v[8];
            C::decode(w.data() + r * row_bytes + (c / kChunksPerBlock) * C::kBlockBytes,
                      static_cast<int>(c % kChunksPerBlock), v);
            std::memcpy(&got[r * cols + c * kQuantChunkValues], v, sizeof(v));
          }
        }
      });
      int64_t mismatches = 0, first = -1;
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(&want[i], &got[i], 4) != 0) {
          if (first < 0) first = static_cast<int64_t>(i);
          ++mismatches;
        }
      }
      CHECK_MESSAGE(mismatches == 0, mismatches << " values differ, first at " << first << ": "
                                                << (first >= 0 ? got[first] : 0.0f) << " vs "
                                                << (first >= 0 ? want[first] : 0.0f));
      bool finite = true;
      for (float v : want) finite = finite && std::isfinite(v);
      CHECK(finite);
    }
    seen.push_back(type);
  }
  CHECK(seen.size() == 12);
}

TEST_CASE("KV pool and block size arithmetic") {
  KvGeometry g;  // smol-135m, F16 KV, 16-token blocks
  g.n_layers = 30;
  g.block_size = 16;
  g.n_kv_heads = 3;
  g.head_dim = 64;
  g.dtype = DType::F16;
  CHECK(g.layer_block_bytes() == 6144);
  CHECK(g.block_bytes() == 368640);
  CHECK(kv_pool_blocks_for_bytes(g, size_t(1) << 30) == 2912);
  CHECK(kv_pool_blocks_for_free_fraction(g, size_t(10) << 30, 0.9, size_t(1) << 30) == 23301);
  CHECK(kv_pool_blocks_for_free_fraction(g, size_t(1) << 30, 0.5, size_t(1) << 30) == 0);
  CHECK(kv_pool_blocks_for_free_fraction(g, size_t(1) << 30, 2.0, 0) == 2912);  // fraction clamped
  g.n_blocks = 100;
  CHECK(kv_layer_bytes(g) == 614400);
  CHECK(kv_layer_bytes(g) * 2 * g.n_layers == g.pool_bytes());
  KvGeometry empty;
  CHECK(kv_pool_blocks_for_bytes(empty, 1 << 20) == 0);
}

TEST_CASE("batched block transfers: ordered by id, groups fit the staging, runs join consecutive ids") {
  using cuda::BlockGroup;
  using cuda::BlockRun;
  auto runs_of = [](const BlockGroup& g) {
    std::vector<std::vector<int32_t>> out;  // (first_slot, first_block, n_blocks)
    for (const BlockRun& r : g.runs) out.push_back({r.first_slot, r.first_block, r.n_blocks});
    return out;
  };
  using Runs = std::vector<std::vector<int32_t>>;
  // One group, staged by id: 0 | 2 | 5 6 7 | 12 13 14 15, whatever the list order.
  std::vector<BlockGroup> g = cuda::plan_block_transfer({5, 6, 7, 2, 14, 15, 13, 12, 0}, 1000, 1 << 20);
  REQUIRE(g.size() == 1);
  CHECK(g[0].entries == std::vector<int32_t>{8, 3, 0, 1, 2, 7, 6, 4, 5});
  CHECK(runs_of(g[0]) == Runs{{0, 0, 1}, {1, 2, 1}, {2, 5, 3}, {5, 12, 4}});
  // Staging for 4 blocks: a run is cut where a group ends; a descending chain is one run.
  g = cuda::plan_block_transfer({9, 8, 6, 5, 4, 3, 2, 1}, 1000, 4000);
  REQUIRE(g.size() == 2);
  CHECK(g[0].entries == std::vector<int32_t>{7, 6, 5, 4});
  CHECK(runs_of(g[0]) == Runs{{0, 1, 4}});
  CHECK(g[1].entries == std::vector<int32_t>{3, 2, 1, 0});
  CHECK(runs_of(g[1]) == Runs{{0, 5, 2}, {2, 8, 2}});
  // A block larger than the staging still moves, one per group; an empty list has no groups.
  g = cuda::plan_block_transfer({3, 4}, 5000, 4000);
  REQUIRE(g.size() == 2);
  CHECK(g[1].entries == std::vector<int32_t>{1});
  CHECK(cuda::plan_block_transfer({}, 1000, 4000).empty());
  // The 1B shape: 512 KiB blocks, 128 per group of kBlockStagingMaxBytes.
  std::vector<int32_t> chain(513);
  for (int32_t i = 0; i < 513; ++i) chain[i] = 100 + i;
  g = cuda::plan_block_transfer(chain, 512 * 1024, cuda::kBlockStagingMaxBytes);
  REQUIRE(g.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(runs_of(g[i]) == Runs{{0, 100 + 128 * i, 128}});
  CHECK(runs_of(g[4]) == Runs{{0, 612, 1}});
  // Layer-major staging: (layer, side, slot) of a 5-block group, 16-byte layer blocks.
  CHECK(cuda::block_staging_offset(0, 0, 0, 5, 16) == 0);
  CHECK(cuda::block_staging_offset(0, 0, 4, 5, 16) == 64);
  CHECK(cuda::block_staging_offset(0, 1, 0, 5, 16) == 80);
  CHECK(cuda::block_staging_offset(2, 1, 3, 5, 16) == (5 * 5 + 3) * 16);
}

TEST_CASE("RoPE angles reduced in double keep float accuracy at large positions") {
  for (double base : {10000.0, 500000.0, 1e6}) {
    for (int32_t pos : {0, 1, 17, 511, 4095, 32767}) {
      for (int32_t i : {0, 1, 15, 31}) {
        const double inv = op::rope_inv_freq(i, 64, base);
        CHECK(inv == doctest::Approx(std::pow(base, -2.0 * i / 64)).epsilon(1e-15));
        float c, s;
        op::rope_cos_sin(pos, inv, &c, &s);
        const double theta = pos * inv;
        CHECK(std::fabs(c - std::cos(theta)) < 1e-6);
        CHECK(std::fabs(s - std::sin(theta)) < 1e-6);
      }
    }
  }
}

TEST_CASE("tile-wise online softmax equals per-score pushes and split merging") {
  std::vector<float> scores;
  for (int i = 0; i < 200; ++i) scores.push_back(std::sin(0.37f * i) * 7.0f + (i % 13 == 0 ? 9.0f : 0.0f));
  std::vector<float> values;
  for (int i = 0; i < 200; ++i) values.push_back(std::cos(0.11f * i));
  // Reference: exact softmax-weighted sum in double.
  double m = -1e30, l = 0, acc = 0;
  for (float s : scores) m = std::max(m, double(s));
  for (size_t i = 0; i < scores.size(); ++i) {
    l += std::exp(scores[i] - m);
    acc += std::exp(scores[i] - m) * values[i];
  }
  const double want = acc / l;

  // Per-score pushes (what a CPU loop does).
  op::SoftmaxState st = op::softmax_init();
  float a = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    float p;
    const float f = op::softmax_push(&st, scores[i], &p);
    a = a * f + p * values[i];
  }
  CHECK(a / st.l == doctest::Approx(want).epsilon(1e-5));

  // 32-score tiles with a masked tail (what a warp does), split in two ranges
  // [0, 96) and [96, 200) merged at the end (what split decode does).
  auto run_range = [&](int32_t begin, int32_t end, float* acc_out) {
    op::SoftmaxState t = op::softmax_init();
    float ac = 0;
    for (int32_t k0 = begin; k0 < end; k0 += 32) {
      float tmax = -INFINITY;
      for (int32_t j = k0; j < std::min(end, k0 + 32); ++j) tmax = std::max(tmax, scores[j]);
      const float f = op::softmax_fold_max(&t, tmax);
      ac *= f;
      for (int32_t j = k0; j < std::min(end, k0 + 32); ++j) {
        const float p = std::exp(scores[j] - t.m);
        t.l += p;
        ac += p * values[j];
      }
    }
    *acc_out = ac;
    return t;
  };
  float a1, a2, a3;
  op::SoftmaxState s1 = run_range(0, 96, &a1);
  op::SoftmaxState s2 = run_range(96, 200, &a2);
  op::SoftmaxState s3 = run_range(200, 200, &a3);  // an empty split
  CHECK(s3.m == -INFINITY);
  CHECK(s3.l == 0.0f);
  float sa, sb;
  op::SoftmaxState merged = op::softmax_merge(s1, s2, &sa, &sb);
  float am = a1 * sa + a2 * sb;
  merged = op::softmax_merge(merged, s3, &sa, &sb);
  am = am * sa + a3 * sb;
  CHECK(std::isfinite(am));
  CHECK(am / merged.l == doctest::Approx(want).epsilon(1e-5));
  // An all-masked tile before anything was seen leaves the state untouched.
  op::SoftmaxState e = op::softmax_init();
  CHECK(op::softmax_fold_max(&e, -INFINITY) == 1.0f);
  CHECK(e.m == -INFINITY);
  float z1, z2;
  op::SoftmaxState both_empty = op::softmax_merge(op::softmax_init(), op::softmax_init(), &z1, &z2);
  CHECK(both_empty.l == 0.0f);
  CHECK(z1 == 0.0f);
  CHECK(z2 == 0.0f);
}
