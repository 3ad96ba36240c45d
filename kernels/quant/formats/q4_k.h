// Q4_K and Q5_K, the home of their decoding: the block layout, the scalar
// reference (ggml's dequantize_row_q4_K / q5_K values), the host/device chunk
// decoder the CUDA kernels run (the reference is a loop over it, so host and
// device decode from this one source), and, for the CPU sets, the F32 rows and
// the int8 groups written once over a set's vector layer. The 12-byte scale
// packing is k_scales.h's. Of the sets' own register schedules,
// avx2/int8_k_rows.h takes its groups from here and avx512/int8_k_rows.h
// reads the same layout in 512-bit registers; both take their scales from
// k_scales.h.
//
// A super-block is 8 sub-blocks of 32 values, each with a 6-bit scale sc and
// min m: w = d * sc * q - dmin * m. Value k (0..255) lies in sub-block
// is = k / 32: the low (even is) or high (odd is) nibble of
// qs[32 (k / 64) + k % 32]; Q5_K adds bit `is` of qh[k % 32] as 16.
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
#include "kernels/quant/formats/k_scales.h"

namespace PREFIXD_QUANT_NS {

// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes; q 4 bits.
struct BlockQ4_K {
  static constexpr int kValues = kQKK, kBits = 4;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, dmin;          // F16
  uint8_t scales[12];        // k_scales.h's packing
  uint8_t qs[kQKK / 2];      // value pairs 64j + l (low nibble), 64j + 32 + l (high) in byte 32j + l
};
// As Q4_K with a fifth bit per value in qh.
struct BlockQ5_K {
  static constexpr int kValues = kQKK, kBits = 5;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, dmin;          // F16
  uint8_t scales[12];        // k_scales.h's packing
  uint8_t qh[kQKK / 8];      // bit is of byte l: the fifth bit of value 32 is + l
  uint8_t qs[kQKK / 2];      // as Q4_K's
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);
static_assert(offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 32)) of the Q4_K / Q5_K block at b:
// the reference's arithmetic, each product and difference rounded on its own.
template <typename Block>
PREFIXD_HD void decode_chunk_k4(const uint8_t* b, int c, float (&v)[8]) {
  const int k = 8 * c, is = k >> 5, l = k & 31;
  const float d = chunk::f16(b), dmin = chunk::f16(b + 2);
  uint8_t sc, m;
  scale_min_k4(is, b + offsetof(Block, scales), &sc, &m);
  const float d1 = chunk::mul(d, static_cast<float>(sc)), m1 = chunk::mul(dmin, static_cast<float>(m));
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(Block, qs) + 32 * (k >> 6) + l);
  chunk::Bytes8 qh{0, 0};
  if constexpr (Block::kBits == 5) qh = chunk::bytes8(b + offsetof(Block, qh) + l);
  const int shift = 4 * (is & 1);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) {
    int x = chunk::nibble(q, t, shift);
    if constexpr (Block::kBits == 5) x += ((qh[t] >> is) & 1u) ? 16 : 0;
    v[t] = chunk::sub(chunk::mul(d1, static_cast<float>(x)), m1);
  }
}

PREFIXD_HD void BlockQ4_K::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_k4<BlockQ4_K>(b, c, v); }
PREFIXD_HD void BlockQ5_K::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_k4<BlockQ5_K>(b, c, v); }

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_q4_k(const BlockQ4_K& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_q5_k(const BlockQ5_K& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// Byte j of a word of 8 bytes (k_scales.h's scales_mins_k4).
inline uint32_t byte_of(uint64_t w, int j) { return static_cast<uint32_t>(w >> (8 * j)) & 0xFFu; }

// y (256) f32 = the block's values, Vec::N at a time with the set's Vec::q_*
// integer lanes; d * sc * q - dmin * m with one fused multiply-subtract
// (within one rounding of the reference).
template <class Vec, typename Block>
inline void dequant_k4_vec(const Block& b, float* y) {
  using QI = typename Vec::QI;
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const ScalesMinsK4 sm = scales_mins_k4(b.scales);
  for (int is = 0; is < 8; is += 2) {
    const auto d1 = Vec::set1(d * static_cast<float>(byte_of(sm.scales, is)));
    const auto m1 = Vec::set1(dmin * static_cast<float>(byte_of(sm.mins, is)));
    const auto d2 = Vec::set1(d * static_cast<float>(byte_of(sm.scales, is + 1)));
    const auto m2 = Vec::set1(dmin * static_cast<float>(byte_of(sm.mins, is + 1)));
    const uint8_t* q = b.qs + 16 * is;
#pragma GCC unroll 8
    for (int l = 0; l < 32; l += Vec::N) {
      const QI v = Vec::q_u8(q + l);
      QI lo = Vec::q_and(v, 0xF), hi = Vec::template q_shr<4>(v);
      if constexpr (Block::kBits == 5) {
        const QI h = Vec::q_u8(b.qh + l);
        lo = Vec::q_or(lo, Vec::template q_shl<4>(Vec::q_and(Vec::q_shr_n(h, is), 1)));
        hi = Vec::q_or(hi, Vec::template q_shl<4>(Vec::q_and(Vec::q_shr_n(h, is + 1), 1)));
      }
      Vec::store(y + 32 * is + l, Vec::fmsub(Vec::q_float(lo), d1, m1));
      Vec::store(y + 32 * is + 32 + l, Vec::fmsub(Vec::q_float(hi), d2, m2));
    }
  }
}

template <class Vec>
inline void dequant_vec(const BlockQ4_K& b, float* y) { dequant_k4_vec<Vec>(b, y); }
template <class Vec>
inline void dequant_vec(const BlockQ5_K& b, float* y) { dequant_k4_vec<Vec>(b, y); }

// On the set's 8-bit layer I8: the bytes of qh (Q5_K's fifth bits; unused for Q4_K).
template <class I8, typename Block>
inline __attribute__((always_inline)) typename I8::B int8_fifth_bits(const Block& b) {
  if constexpr (Block::kBits == 5) {
    return I8::load(b.qh);
  } else {
    return typename I8::B{};
  }
}

// Sub-blocks 2j, 2j + 1 (lo, hi: 32 unsigned values each) from the 32 bytes
// v = qs[32 j ..] and, for Q5_K, the qh bytes h (int8_fifth_bits).
template <class I8, typename Block>
inline __attribute__((always_inline)) void int8_pair_k4(typename I8::B v, typename I8::B h, int j,
                                                       typename I8::B& lo, typename I8::B& hi) {
  lo = I8::lo4(v);
  hi = I8::hi4(v);
  if constexpr (Block::kBits == 5) {
    lo = I8::or_(lo, I8::test(h, static_cast<uint8_t>(1u << (2 * j)), 0x10));
    hi = I8::or_(hi, I8::test(h, static_cast<uint8_t>(2u << (2 * j)), 0x10));
  }
}

// q[k] (8 x 32 bytes) = the unsigned values of sub-block k, on the set's
// 8-bit layer I8 (generic/int8_gemm.h's tiles and the int8 panels).
template <class I8, typename Block>
inline __attribute__((always_inline)) void int8_groups_k4(const Block& b, typename I8::B* q) {
  const typename I8::B h = int8_fifth_bits<I8>(b);
  for (int j = 0; j < 4; ++j) int8_pair_k4<I8, Block>(I8::load(b.qs + 32 * j), h, j, q[2 * j], q[2 * j + 1]);
}

// Q4_K and Q5_K (int8_unpack.h's protocol): the groups above, the scales and
// mins from k_scales.h; the group scale applies inside vpmaddwd, the mins
// against x's sums per 32.
template <class I8, typename Block>
struct Int8UnpackK4 : Int8K<Block, Scale8<I8>> {
  static inline __attribute__((always_inline)) void unpack(const Block& b, KUnpacked<I8>& u) {
    int8_groups_k4<I8>(b, u.q);
    u.d = I8::half(b.d);
    u.dmin = I8::half(b.dmin);
    const ScalesMinsK4 sm = scales_mins_k4(b.scales);
    uint8_t sc[8], mn[8];
    std::memcpy(sc, &sm.scales, 8);
    std::memcpy(mn, &sm.mins, 8);
    u.scales[0] = I8::widen_u8x8(sc);
    for (int k = 0; k < 8; ++k) u.aux[k] = mn[k];
  }
  template <class X>
  static inline __attribute__((always_inline)) float extra(const KUnpacked<I8>& u, const X& x) {
    return -u.dmin * static_cast<float>(I8::dot_i16x8(u.aux, x.sums32));
  }
};
// The two formats' (blocks of 256 values with kBits: Q4_K, Q5_K).
template <class I8, typename Block>
  requires(Block::kValues == kQKK && Block::kBits > 0)
struct Int8Unpack<I8, Block> : Int8UnpackK4<I8, Block> {};
#endif  // PREFIXD_ISA_NS

}  // namespace
