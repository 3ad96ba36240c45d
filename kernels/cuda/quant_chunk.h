// Decoding of one chunk (8 consecutive values) of a ggml weight block, per
// format, for the CUDA kernels (quant_matvec.cu, quant_dequantize.cu): each
// format's decoder is its header's in kernels/quant/formats/ (decode_chunk),
// the one its scalar reference quant::dequantize_row loops over, so host and
// device decode from one source and each value equals dequantize_row's bit for
// bit (tests/test_cuda_launch.cpp runs the chunks on the CPU against it). The
// formats are formats/registry.h's list.
//
// Block addresses only need 2-byte alignment (every block size is even and
// rows are runs of whole blocks), so multi-byte fields are read as 16-bit words
// (quant::chunk, formats/decode_ops.h). Everything lives in registers: no
// array is indexed with a runtime value.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/result.h"
#include "kernels/quant/quant_blocks.h"
#include "kernels/quant/weight_type.h"

namespace prefixd::cuda {

inline constexpr int32_t kQuantChunkValues = 8;  // values decoded at once

namespace chunk = quant::chunk;  // the chunk arithmetic (formats/decode_ops.h)

// Chunks<T>::decode(block, c, v): v (8) f32 = values 8c .. 8c + 7 of the block
// at `block`, c in [0, kBlockValues / 8): the block's decode_chunk.
template <typename Block>
struct BlockChunks {
  static constexpr int kBlockValues = Block::kValues, kBlockBytes = sizeof(Block);
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) { Block::decode_chunk(b, c, v); }
};

template <WeightType T>
struct Chunks;
#define PREFIXD_CHUNKS(T, Block) \
  template <>                    \
  struct Chunks<WeightType::T> : BlockChunks<quant::Block> {};
PREFIXD_BLOCK_FORMATS(PREFIXD_CHUNKS)
#undef PREFIXD_CHUNKS

template <WeightType T>
using BlockTypeTag = std::integral_constant<WeightType, T>;

// Calls f(BlockTypeTag<T>{}) with the weight block type `type` as a compile-time
// value (host code: kernel template instantiation). Aborts for F32/F16/BF16
// and the activation-only formats, which have no Chunks.
template <typename F>
void dispatch_block_type(WeightType type, F&& f) {
  switch (type) {
#define PREFIXD_DISPATCH(T, Block) \
  case WeightType::T: f(BlockTypeTag<WeightType::T>{}); return;
    PREFIXD_BLOCK_FORMATS(PREFIXD_DISPATCH)
#undef PREFIXD_DISPATCH
    default: break;
  }
  PREFIXD_CHECK(false, "not a weight block type");
}

}  // namespace prefixd::cuda
