// Rows of the ggml block formats to F32 on a set's vector layer: a loop over
// formats/registry.h, each block decoded by its header's dequant_vec<Vec>
// (Vec::N values at a time with the Vec::q_* integer lanes, the same
// arithmetic as the scalar reference) where it has one (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), else by the scalar reference.
// Included by kernels/cpu/<isa>/kernels.cpp only (through quant_gemm.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/generic/row_ops.h"
#include "kernels/quant/quant_blocks.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace dequant {

static_assert(16 % Vec::N == 0, "a half block of 16 is whole vectors");

// dst (n_blocks * Block::kValues) f32 = the n_blocks blocks of one row at src.
template <typename Block>
inline void blocks(const uint8_t* src, float* dst, int64_t n_blocks) {
  const auto* b = reinterpret_cast<const Block*>(src);
  for (int64_t i = 0; i < n_blocks; ++i) quant::dequant_vec<Vec>(b[i], dst + i * Block::kValues);
}

// dst (K) f32 = one row of `type` (F16 or a block type).
inline void row(WeightType type, const uint8_t* src, float* dst, int64_t K) {
  switch (type) {
    case WeightType::F16: rows::f16_to_f32_n(reinterpret_cast<const uint16_t*>(src), dst, K); return;
#define PREFIXD_DEQUANT_ROW(T, Block) \
  case WeightType::T: blocks<quant::Block>(src, dst, K / quant::Block::kValues); return;
      PREFIXD_BLOCK_FORMATS(PREFIXD_DEQUANT_ROW)
#undef PREFIXD_DEQUANT_ROW
    default: PREFIXD_CHECK(false, "not a row-layout weight type");
  }
}

}  // namespace dequant

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
