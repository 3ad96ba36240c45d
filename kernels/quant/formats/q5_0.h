// Q5_0 and Q5_1, the home of their decoding: the block layout, the scalar
// reference (ggml's dequantize_row_q5_0 / q5_1 values), the host/device chunk
// decoder the CUDA kernels run (the reference is a loop over it, so host and
// device decode from this one source), and, for the CPU sets, the F32 rows
// and the int8 unpack written once over a set's vector layer.
//
// A block is 32 values with an F16 scale d, 5 bits each: the low 4 as Q4_0's
// (value j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of
// qs[j - 16]), the fifth bit of value j is bit j of qh.
// Q5_0: w = d * (q - 16). Q5_1: w = d * q + m (kMin).
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h), where the vector-layer section below is compiled too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/q4_0.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ5_0 {
  static constexpr int kValues = kQK;
  static constexpr bool kMin = false;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;            // F16
  uint8_t qh[4];         // bit j: the fifth bit of value j
  uint8_t qs[kQK / 2];   // as Q4_0's
};
struct BlockQ5_1 {
  static constexpr int kValues = kQK;
  static constexpr bool kMin = true;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, m;         // F16
  uint8_t qh[4];         // as Q5_0's
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);
static_assert(offsetof(BlockQ5_1, m) == 2 && offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ5_1, qs) == 8);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 4)) of the Q5_0 / Q5_1 block at b,
// with the reference's arithmetic, each product and sum rounded on its own.
template <typename Block>
PREFIXD_HD void decode_chunk_q5(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b), m = chunk_min<Block>(b);  // chunk_min: q4_0.h
  const uint32_t qh = chunk::u32(b + offsetof(Block, qh)) >> (8 * c);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(Block, qs) + 8 * (c & 1));
  const int shift = 4 * (c >> 1);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) {
    const int x = chunk::nibble(q, t, shift) | static_cast<int>(((qh >> t) & 1u) << 4);
    if constexpr (Block::kMin) {
      v[t] = chunk::add(chunk::mul(static_cast<float>(x), d), m);
    } else {
      v[t] = chunk::mul(static_cast<float>(x - 16), d);
    }
  }
}

PREFIXD_HD void BlockQ5_0::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q5<BlockQ5_0>(b, c, v); }
PREFIXD_HD void BlockQ5_1::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q5<BlockQ5_1>(b, c, v); }

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_q5_0(const BlockQ5_0& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_q5_1(const BlockQ5_1& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// y (32) f32 = the block's values, Vec::N at a time with the set's Vec::q_*
// integer lanes (Q5_1's d * q + m with one fused multiply-add).
template <class Vec, typename Block>
inline void dequant_q5_vec(const Block& b, float* y) {
  using QI = typename Vec::QI;
  const float d = f16_to_f32(b.d);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += Vec::N) {
    const QI q = Vec::q_u8(b.qs + e);
    const QI lo = Vec::q_or(Vec::q_and(q, 0xF), Vec::template q_shl<4>(Vec::q_bits(qh, e)));
    const QI hi = Vec::q_or(Vec::template q_shr<4>(q), Vec::template q_shl<4>(Vec::q_bits(qh, 16 + e)));
    if constexpr (Block::kMin) {
      const auto dv = Vec::set1(d), mv = Vec::set1(f16_to_f32(b.m));
      Vec::store(y + e, Vec::fmadd(Vec::q_float(lo), dv, mv));
      Vec::store(y + 16 + e, Vec::fmadd(Vec::q_float(hi), dv, mv));
    } else {
      Vec::store(y + e, Vec::mul(Vec::q_float(Vec::q_sub(lo, 16)), Vec::set1(d)));
      Vec::store(y + 16 + e, Vec::mul(Vec::q_float(Vec::q_sub(hi, 16)), Vec::set1(d)));
    }
  }
}

// On the set's 8-bit layer I8 (generic/int8_gemm.h): q = the 32 values as
// unsigned bytes (0..31), sc = d, mn = the constant term (Q5_0: -16 d, the
// offset as a min, cheaper than signed bytes; Q5_1: m).
template <class I8, typename Block>
inline __attribute__((always_inline)) void int8_unpack_q5(const Block& b, typename I8::B* q, float* sc, float* mn) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  q[0] = I8::or_(I8::nibbles16(b.qs), I8::bits32(qh, 0x10));
  sc[0] = I8::half(b.d);
  if constexpr (Block::kMin) {
    mn[0] = I8::half(b.m);
  } else {
    mn[0] = -16.0f * sc[0];
  }
}
#endif  // PREFIXD_ISA_NS

}  // namespace
