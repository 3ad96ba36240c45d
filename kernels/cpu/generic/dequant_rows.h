// Rows of the ggml block formats to F32 on a set's vector layer, N values at a
// time with the Vec::q_* integer lanes: the same arithmetic as the scalar
// quant_blocks.h (which defines the formats), vectorized for the formats of
// common files (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K). The rest
// (Q2_K, Q3_K, IQ4_NL, IQ4_XS) use the scalar blocks.
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

inline void q4_0(const quant::BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += N) {
    const QI q = Vec::q_u8(b.qs + e);
    Vec::store(y + e, scaled(Vec::q_sub(Vec::q_and(q, 0xF), 8), d));
    Vec::store(y + 16 + e, scaled(Vec::q_sub(Vec::template q_shr<4>(q), 8), d));
  }
}

inline void q4_1(const quant::BlockQ4_1& b, float* y) {
  const V d = Vec::set1(f16_to_f32(b.d)), m = Vec::set1(f16_to_f32(b.m));
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += N) {
    const QI q = Vec::q_u8(b.qs + e);
    Vec::store(y + e, Vec::fmadd(Vec::q_float(Vec::q_and(q, 0xF)), d, m));
    Vec::store(y + 16 + e, Vec::fmadd(Vec::q_float(Vec::template q_shr<4>(q)), d, m));
  }
}

inline void q5_0(const quant::BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += N) {
    const QI q = Vec::q_u8(b.qs + e);
    const QI lo = Vec::q_or(Vec::q_and(q, 0xF), Vec::template q_shl<4>(Vec::q_bits(qh, e)));
    const QI hi = Vec::q_or(Vec::template q_shr<4>(q), Vec::template q_shl<4>(Vec::q_bits(qh, 16 + e)));
    Vec::store(y + e, scaled(Vec::q_sub(lo, 16), d));
    Vec::store(y + 16 + e, scaled(Vec::q_sub(hi, 16), d));
  }
}

inline void q5_1(const quant::BlockQ5_1& b, float* y) {
  const V d = Vec::set1(f16_to_f32(b.d)), m = Vec::set1(f16_to_f32(b.m));
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += N) {
    const QI q = Vec::q_u8(b.qs + e);
    const QI lo = Vec::q_or(Vec::q_and(q, 0xF), Vec::template q_shl<4>(Vec::q_bits(qh, e)));
    const QI hi = Vec::q_or(Vec::template q_shr<4>(q), Vec::template q_shl<4>(Vec::q_bits(qh, 16 + e)));
    Vec::store(y + e, Vec::fmadd(Vec::q_float(lo), d, m));
    Vec::store(y + 16 + e, Vec::fmadd(Vec::q_float(hi), d, m));
  }
}

inline void q4_k(const quant::BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  for (int is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    quant::scale_min_k4(is, b.scales, &sc, &m);
    const V d1 = Vec::set1(d * static_cast<float>(sc)), m1 = Vec::set1(dmin * static_cast<float>(m));
    quant::scale_min_k4(is + 1, b.scales, &sc, &m);
    const V d2 = Vec::set1(d * static_cast<float>(sc)), m2 = Vec::set1(dmin * static_cast<float>(m));
#pragma GCC unroll 8
    for (int l = 0; l < 32; l += N) {
      const QI v = Vec::q_u8(q + l);
      Vec::store(y + l, Vec::fmsub(Vec::q_float(Vec::q_and(v, 0xF)), d1, m1));
      Vec::store(y + 32 + l, Vec::fmsub(Vec::q_float(Vec::template q_shr<4>(v)), d2, m2));
    }
    q += 32;
    y += 64;
  }
}

inline void q5_k(const quant::BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  for (int is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    quant::scale_min_k4(is, b.scales, &sc, &m);
    const V d1 = Vec::set1(d * static_cast<float>(sc)), m1 = Vec::set1(dmin * static_cast<float>(m));
    quant::scale_min_k4(is + 1, b.scales, &sc, &m);
    const V d2 = Vec::set1(d * static_cast<float>(sc)), m2 = Vec::set1(dmin * static_cast<float>(m));
#pragma GCC unroll 8
    for (int l = 0; l < 32; l += N) {
      const QI v = Vec::q_u8(ql + l);
      const QI h = Vec::q_u8(b.qh + l);
      const QI lo = Vec::q_or(Vec::q_and(v, 0xF), Vec::template q_shl<4>(Vec::q_and(Vec::q_shr_n(h, is), 1)));
      const QI hi = Vec::q_or(Vec::template q_shr<4>(v), Vec::template q_shl<4>(Vec::q_and(Vec::q_shr_n(h, is + 1), 1)));
      Vec::store(y + l, Vec::fmsub(Vec::q_float(lo), d1, m1));
      Vec::store(y + 32 + l, Vec::fmsub(Vec::q_float(hi), d2, m2));
    }
    ql += 32;
    y += 64;
  }
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
    case WeightType::Q4_0: each_block<BlockQ4_0>(src, dst, nb, be, q4_0); return;
    case WeightType::Q4_1: each_block<BlockQ4_1>(src, dst, nb, be, q4_1); return;
    case WeightType::Q5_0: each_block<BlockQ5_0>(src, dst, nb, be, q5_0); return;
    case WeightType::Q5_1: each_block<BlockQ5_1>(src, dst, nb, be, q5_1); return;
    case WeightType::Q8_0: each_block<BlockQ8_0>(src, dst, nb, be, q8_0); return;
    case WeightType::Q2_K: each_block<BlockQ2_K>(src, dst, nb, be, dequant_q2_k); return;
    case WeightType::Q3_K: each_block<BlockQ3_K>(src, dst, nb, be, dequant_q3_k); return;
    case WeightType::Q4_K: each_block<BlockQ4_K>(src, dst, nb, be, q4_k); return;
    case WeightType::Q5_K: each_block<BlockQ5_K>(src, dst, nb, be, q5_k); return;
    case WeightType::Q6_K: each_block<BlockQ6_K>(src, dst, nb, be, q6_k); return;
    case WeightType::IQ4_NL: each_block<BlockIQ4_NL>(src, dst, nb, be, dequant_iq4_nl); return;
    case WeightType::IQ4_XS: each_block<BlockIQ4_XS>(src, dst, nb, be, dequant_iq4_xs); return;
    default: PREFIXD_CHECK(false, "not a row-layout weight type");
  }
}

}  // namespace dequant

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
