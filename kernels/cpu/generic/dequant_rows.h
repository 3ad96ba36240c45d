// Rows of the ggml block formats to F32 on a set's vector layer, N values at a
// time with the Vec::q_* integer lanes: the same arithmetic as the scalar
// quant_blocks.h (which defines the formats), vectorized for the formats of
// common files (Q8_0, Q6_K here; Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K in their
// headers in kernels/quant/formats/). The rest (Q2_K, Q3_K, IQ4_NL, IQ4_XS)
// use the scalar blocks.
// Included by kernels/cpu/<isa>/kernels.cpp only (through quant_gemm.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/generic/row_ops.h"
#include "kernels/quant/quant_blocks.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace dequant {

using V = typename Vec::T;
using QI = typename Vec::QI;
constexpr int N = Vec::N;
static_assert(16 % N == 0, "a half block of 16 is whole vectors");

inline V scaled(QI q, float d) { return Vec::mul(Vec::q_float(q), Vec::set1(d)); }

inline void q8_0(const quant::BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
#pragma GCC unroll 8
  for (int e = 0; e < 32; e += N) Vec::store(y + e, scaled(Vec::q_i8(b.qs + e), d));
}

inline void q6_k(const quant::BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < 256; n += 128) {
#pragma GCC unroll 8
    for (int l = 0; l < 32; l += N) {
      const int is = l / 16;
      const QI a = Vec::q_u8(ql + l), c = Vec::q_u8(ql + 32 + l), h = Vec::q_u8(qh + l);
      const QI q1 = Vec::q_or(Vec::q_and(a, 0xF), Vec::template q_shl<4>(Vec::q_and(h, 3)));
      const QI q2 = Vec::q_or(Vec::q_and(c, 0xF), Vec::template q_shl<4>(Vec::q_and(Vec::template q_shr<2>(h), 3)));
      const QI q3 = Vec::q_or(Vec::template q_shr<4>(a), Vec::template q_shl<4>(Vec::q_and(Vec::template q_shr<4>(h), 3)));
      const QI q4 = Vec::q_or(Vec::template q_shr<4>(c), Vec::template q_shl<4>(Vec::template q_shr<6>(h)));
      Vec::store(y + l, scaled(Vec::q_sub(q1, 32), d * static_cast<float>(sc[is])));
      Vec::store(y + 32 + l, scaled(Vec::q_sub(q2, 32), d * static_cast<float>(sc[is + 2])));
      Vec::store(y + 64 + l, scaled(Vec::q_sub(q3, 32), d * static_cast<float>(sc[is + 4])));
      Vec::store(y + 96 + l, scaled(Vec::q_sub(q4, 32), d * static_cast<float>(sc[is + 6])));
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Runs f(block, out) over the n_blocks blocks of one row.
template <typename Block, typename F>
inline void each_block(const uint8_t* src, float* dst, int64_t n_blocks, int64_t block_elements, F f) {
  const auto* blocks = reinterpret_cast<const Block*>(src);
  for (int64_t b = 0; b < n_blocks; ++b) f(blocks[b], dst + b * block_elements);
}

// dst (K) f32 = one row of `type` (F16 or a block type).
inline void row(WeightType type, const uint8_t* src, float* dst, int64_t K) {
  using namespace quant;
  const int64_t be = weight_type_traits(type).block_elements;
  const int64_t nb = K / be;
  switch (type) {
    case WeightType::F16: rows::f16_to_f32_n(reinterpret_cast<const uint16_t*>(src), dst, K); return;
    case WeightType::Q4_0: each_block<BlockQ4_0>(src, dst, nb, be, dequant_q4_vec<Vec, BlockQ4_0>); return;
    case WeightType::Q4_1: each_block<BlockQ4_1>(src, dst, nb, be, dequant_q4_vec<Vec, BlockQ4_1>); return;
    case WeightType::Q5_0: each_block<BlockQ5_0>(src, dst, nb, be, dequant_q5_vec<Vec, BlockQ5_0>); return;
    case WeightType::Q5_1: each_block<BlockQ5_1>(src, dst, nb, be, dequant_q5_vec<Vec, BlockQ5_1>); return;
    case WeightType::Q8_0: each_block<BlockQ8_0>(src, dst, nb, be, q8_0); return;
    case WeightType::Q2_K: each_block<BlockQ2_K>(src, dst, nb, be, dequant_q2_k); return;
    case WeightType::Q3_K: each_block<BlockQ3_K>(src, dst, nb, be, dequant_q3_k); return;
    case WeightType::Q4_K: each_block<BlockQ4_K>(src, dst, nb, be, dequant_k4_vec<Vec, BlockQ4_K>); return;
    case WeightType::Q5_K: each_block<BlockQ5_K>(src, dst, nb, be, dequant_k4_vec<Vec, BlockQ5_K>); return;
    case WeightType::Q6_K: each_block<BlockQ6_K>(src, dst, nb, be, q6_k); return;
    case WeightType::IQ4_NL: each_block<BlockIQ4_NL>(src, dst, nb, be, dequant_iq4_nl); return;
    case WeightType::IQ4_XS: each_block<BlockIQ4_XS>(src, dst, nb, be, dequant_iq4_xs); return;
    default: PREFIXD_CHECK(false, "not a row-layout weight type");
  }
}

}  // namespace dequant

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
