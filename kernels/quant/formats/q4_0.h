// Q4_0 and Q4_1, the home of their decoding: the block layout, the scalar
// reference (ggml's dequantize_row_q4_0 / q4_1 values), the host/device chunk
// decoder the CUDA kernels run (the reference is a loop over it, so host and
// device decode from this one source), and, for the CPU sets, the F32 rows
// and the int8 unpack written once over a set's vector layer.
//
// A block is 32 values with an F16 scale d, 4 bits each: value j < 16 in the
// low nibble of qs[j], j >= 16 in the high nibble of qs[j - 16].
// Q4_0: w = d * (q - 8). Q4_1: w = d * q + m (kMin).
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h), where the vector-layer section below is compiled too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ4_0 {
  static constexpr int kValues = kQK;
  static constexpr bool kMin = false;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;            // F16
  uint8_t qs[kQK / 2];   // value pairs j, j + 16 in byte j (low, high nibble)
};
struct BlockQ4_1 {
  static constexpr int kValues = kQK;
  static constexpr bool kMin = true;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, m;         // F16
  uint8_t qs[kQK / 2];   // as Q4_0's
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(offsetof(BlockQ4_0, qs) == 2 && offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ4_1, qs) == 4);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 4)) of the Q4_0 / Q4_1 block at b:
// chunk c reads qs[8 (c & 1) ..] at shift 4 (c >> 1); the reference's
// arithmetic, each product and sum rounded on its own.
template <typename Block>
PREFIXD_HD float chunk_min(const uint8_t* b) {  // m of a block with one (kMin), else 0
  if constexpr (Block::kMin) {
    return chunk::f16(b + offsetof(Block, m));
  } else {
    return 0.0f;
  }
}

template <typename Block>
PREFIXD_HD void decode_chunk_q4(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b), m = chunk_min<Block>(b);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(Block, qs) + 8 * (c & 1));
  const int shift = 4 * (c >> 1);
  if constexpr (Block::kMin) {
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t) v[t] = chunk::add(chunk::mul(static_cast<float>(chunk::nibble(q, t, shift)), d), m);
  } else {
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t) v[t] = chunk::mul(static_cast<float>(chunk::nibble(q, t, shift) - 8), d);
  }
}

PREFIXD_HD void BlockQ4_0::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q4<BlockQ4_0>(b, c, v); }
PREFIXD_HD void BlockQ4_1::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q4<BlockQ4_1>(b, c, v); }

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_q4_0(const BlockQ4_0& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_q4_1(const BlockQ4_1& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// y (32) f32 = the block's values, Vec::N at a time with the set's Vec::q_*
// integer lanes (Q4_1's d * q + m with one fused multiply-add).
template <class Vec, typename Block>
inline void dequant_q4_vec(const Block& b, float* y) {
  using QI = typename Vec::QI;
  const float d = f16_to_f32(b.d);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += Vec::N) {
    const QI q = Vec::q_u8(b.qs + e);
    if constexpr (Block::kMin) {
      const auto dv = Vec::set1(d), mv = Vec::set1(f16_to_f32(b.m));
      Vec::store(y + e, Vec::fmadd(Vec::q_float(Vec::q_and(q, 0xF)), dv, mv));
      Vec::store(y + 16 + e, Vec::fmadd(Vec::q_float(Vec::template q_shr<4>(q)), dv, mv));
    } else {
      Vec::store(y + e, Vec::mul(Vec::q_float(Vec::q_sub(Vec::q_and(q, 0xF), 8)), Vec::set1(d)));
      Vec::store(y + 16 + e, Vec::mul(Vec::q_float(Vec::q_sub(Vec::template q_shr<4>(q), 8)), Vec::set1(d)));
    }
  }
}

// On the set's 8-bit layer I8 (generic/int8_gemm.h): q = the 32 values as
// unsigned bytes (0..15), sc = d, mn = the constant term (Q4_0: -8 d, the
// offset as a min, cheaper than signed bytes; Q4_1: m).
template <class I8, typename Block>
inline __attribute__((always_inline)) void int8_unpack_q4(const Block& b, typename I8::B* q, float* sc, float* mn) {
  q[0] = I8::nibbles16(b.qs);
  sc[0] = I8::half(b.d);
  if constexpr (Block::kMin) {
    mn[0] = I8::half(b.m);
  } else {
    mn[0] = -8.0f * sc[0];
  }
}
#endif  // PREFIXD_ISA_NS

}  // namespace
