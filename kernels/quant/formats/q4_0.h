// Q4_0 and Q4_1, the home of their decoding, and the decoders they share with
// Q5_0 and Q5_1 (q5_0.h: the same layout with a fifth bit per value): the
// block layout, the scalar reference (ggml's dequantize_row_q4_0 / q4_1
// values), the host/device chunk decoder the CUDA kernels run (the reference
// is a loop over it, so host and device decode from this one source), and,
// for the CPU sets, the F32 rows and the int8 unpack written once over a set's
// vector layer. One template each serves the four formats (Block::kBits,
// Block::kMin).
//
// A block is 32 values with an F16 scale d, kBits bits each: the low 4 bits
// of value j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of
// qs[j - 16] (Q5's fifth bit: q5_0.h).
// Q4_0: w = d * (q - 8). Q4_1: w = d * q + m (kMin). Q5_0: w = d * (q - 16).
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h), where the vector-layer section below is compiled too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/int8_unpack.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ4_0 {
  static constexpr int kValues = kQK, kBits = 4;
  static constexpr bool kMin = false;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;            // F16
  uint8_t qs[kQK / 2];   // value pairs j, j + 16 in byte j (low, high nibble)
};
struct BlockQ4_1 {
  static constexpr int kValues = kQK, kBits = 4;
  static constexpr bool kMin = true;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, m;         // F16
  uint8_t qs[kQK / 2];   // as Q4_0's
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(offsetof(BlockQ4_0, qs) == 2 && offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ4_1, qs) == 4);

// The offset a format without a min takes off q: 8 (Q4_0), 16 (Q5_0).
template <typename Block>
inline constexpr int kQOffset = 1 << (Block::kBits - 1);

// m of a block with one (kMin), else 0.
template <typename Block>
PREFIXD_HD float chunk_min(const uint8_t* b) {
  if constexpr (Block::kMin) {
    return chunk::f16(b + offsetof(Block, m));
  } else {
    return 0.0f;
  }
}

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 4)) of the Q4_0 / Q4_1 / Q5_0 /
// Q5_1 block at b: chunk c reads qs[8 (c & 1) ..] at shift 4 (c >> 1) and
// bits 8c .. 8c + 7 of qh; the reference's arithmetic, each product and sum
// rounded on its own.
template <typename Block>
PREFIXD_HD void decode_chunk_q(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b), m = chunk_min<Block>(b);
  uint32_t qh = 0;  // the fifth bits of the chunk (Q5)
  if constexpr (Block::kBits == 5) qh = chunk::u32(b + offsetof(Block, qh)) >> (8 * c);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(Block, qs) + 8 * (c & 1));
  const int shift = 4 * (c >> 1);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) {
    const int x = chunk::nibble(q, t, shift) | static_cast<int>(((qh >> t) & 1u) << 4);
    if constexpr (Block::kMin) {
      v[t] = chunk::add(chunk::mul(static_cast<float>(x), d), m);
    } else {
      v[t] = chunk::mul(static_cast<float>(x - kQOffset<Block>), d);
    }
  }
}

PREFIXD_HD void BlockQ4_0::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q<BlockQ4_0>(b, c, v); }
PREFIXD_HD void BlockQ4_1::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q<BlockQ4_1>(b, c, v); }

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_q4_0(const BlockQ4_0& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_q4_1(const BlockQ4_1& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// Q5's fifth bits as a word (bit j: value j); 0 for Q4.
template <typename Block>
inline uint32_t fifth_bits(const Block& b) {
  uint32_t qh = 0;
  if constexpr (Block::kBits == 5) std::memcpy(&qh, b.qh, 4);
  return qh;
}

// y (32) f32 = the block's values, Vec::N at a time with the set's Vec::q_*
// integer lanes (the *_1 formats' d * q + m with one fused multiply-add).
template <class Vec, typename Block>
inline void dequant_q_vec(const Block& b, float* y) {
  using QI = typename Vec::QI;
  const float d = f16_to_f32(b.d);
  const uint32_t qh = fifth_bits(b);
#pragma GCC unroll 4
  for (int e = 0; e < 16; e += Vec::N) {
    const QI q = Vec::q_u8(b.qs + e);
    QI lo = Vec::q_and(q, 0xF), hi = Vec::template q_shr<4>(q);
    if constexpr (Block::kBits == 5) {
      lo = Vec::q_or(lo, Vec::template q_shl<4>(Vec::q_bits(qh, e)));
      hi = Vec::q_or(hi, Vec::template q_shl<4>(Vec::q_bits(qh, 16 + e)));
    }
    if constexpr (Block::kMin) {
      const auto dv = Vec::set1(d), mv = Vec::set1(f16_to_f32(b.m));
      Vec::store(y + e, Vec::fmadd(Vec::q_float(lo), dv, mv));
      Vec::store(y + 16 + e, Vec::fmadd(Vec::q_float(hi), dv, mv));
    } else {
      Vec::store(y + e, Vec::mul(Vec::q_float(Vec::q_sub(lo, kQOffset<Block>)), Vec::set1(d)));
      Vec::store(y + 16 + e, Vec::mul(Vec::q_float(Vec::q_sub(hi, kQOffset<Block>)), Vec::set1(d)));
    }
  }
}

template <class Vec>
inline void dequant_vec(const BlockQ4_0& b, float* y) { dequant_q_vec<Vec>(b, y); }
template <class Vec>
inline void dequant_vec(const BlockQ4_1& b, float* y) { dequant_q_vec<Vec>(b, y); }

// On the set's 8-bit layer I8 (int8_unpack.h's protocol): q = the 32 values
// as unsigned bytes (0 .. 2^kBits - 1), sc = d, mn = the constant term (Q4_0,
// Q5_0: -8 d, -16 d, the offset as a min, cheaper than signed bytes (vpabsb +
// vpsignb); the *_1 formats: m).
template <class I8, typename Block>
struct Int8UnpackQ : Int8Q32<Block, false> {
  static inline __attribute__((always_inline)) void unpack(const Block& b, typename I8::B* q, float* sc, float* mn) {
    q[0] = I8::nibbles16(b.qs);
    if constexpr (Block::kBits == 5) q[0] = I8::or_(q[0], I8::bits32(fifth_bits(b), 0x10));
    sc[0] = I8::half(b.d);
    if constexpr (Block::kMin) {
      mn[0] = I8::half(b.m);
    } else {
      mn[0] = -static_cast<float>(kQOffset<Block>) * sc[0];
    }
  }
};
// The four formats' (blocks of 32 values with kBits: Q4_0, Q4_1, q5_0.h's Q5_0, Q5_1).
template <class I8, typename Block>
  requires(Block::kValues == kQK && Block::kBits > 0)
struct Int8Unpack<I8, Block> : Int8UnpackQ<I8, Block> {};
#endif  // PREFIXD_ISA_NS

}  // namespace
