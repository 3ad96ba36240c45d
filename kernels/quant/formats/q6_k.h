// Q6_K, the home of its decoding: the block layout, the scalar reference
// (ggml's dequantize_row_q6_K values), the host/device chunk decoder the CUDA
// kernels run (the reference is a loop over it), and, for the CPU sets, the
// F32 rows and the int8 groups over a set's vector layer. The sets' own
// register schedules (avx2/int8_k_rows.h takes its groups from here;
// avx512/int8_k_rows.h reads the same layout in 512-bit registers).
//
// A super-block is 16 sub-blocks of 16 values with 8-bit signed scales,
// q 6 bits, offset 32: w = d * sc * (q - 32). Value k (0..255): half
// h = k / 128, group g = (k / 32) % 4, l = k % 32: low 4 bits from
// ql[64 h + 32 (g % 2) + l] (high nibble when g >= 2), top 2 bits from
// qh[32 h + l] at bit 2 g, scale scales[8 h + l / 16 + 2 g].
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h), where the vector-layer section below is compiled too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/int8_unpack.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ6_K {
  static constexpr int kValues = kQKK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint8_t ql[kQKK / 2];      // low 4 bits
  uint8_t qh[kQKK / 4];      // top 2 bits
  int8_t scales[kQKK / 16];  // per 16 values
  uint16_t d;                // F16
};
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 32)) of the Q6_K block at b:
// (d * sc) * (q - 32), each product rounded on its own.
PREFIXD_HD void BlockQ6_K::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const int k = 8 * c, h = k >> 7, g = (k >> 5) & 3, l = k & 31;
  const float d = chunk::f16(b + offsetof(BlockQ6_K, d));
  const int8_t sc = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + (l >> 4) + 2 * g]);
  const float dsc = chunk::mul(d, static_cast<float>(sc));
  const chunk::Bytes8 ql = chunk::bytes8(b + 64 * h + 32 * (g & 1) + l);
  const chunk::Bytes8 qh = chunk::bytes8(b + offsetof(BlockQ6_K, qh) + 32 * h + l);
  const int shift = 4 * (g >> 1);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) {
    const int x = (chunk::nibble(ql, t, shift) | static_cast<int>(((qh[t] >> (2 * g)) & 3u) << 4)) - 32;
    v[t] = chunk::mul(dsc, static_cast<float>(x));
  }
}

// The scalar reference (decode_ops.h).
PREFIXD_HD void dequant_q6_k(const BlockQ6_K& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// y (256) f32 = the block's values, Vec::N at a time with the set's Vec::q_*
// integer lanes.
template <class Vec>
inline void dequant_vec(const BlockQ6_K& b, float* y) {
  using QI = typename Vec::QI;
  const float d = f16_to_f32(b.d);
  auto scaled = [](QI q, float s) { return Vec::mul(Vec::q_float(Vec::q_sub(q, 32)), Vec::set1(s)); };
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* sc = b.scales + 8 * h;
    float* yh = y + 128 * h;
#pragma GCC unroll 8
    for (int l = 0; l < 32; l += Vec::N) {
      const int is = l / 16;
      const QI a = Vec::q_u8(ql + l), c = Vec::q_u8(ql + 32 + l), hb = Vec::q_u8(qh + l);
      const QI q1 = Vec::q_or(Vec::q_and(a, 0xF), Vec::template q_shl<4>(Vec::q_and(hb, 3)));
      const QI q2 = Vec::q_or(Vec::q_and(c, 0xF), Vec::template q_shl<4>(Vec::q_and(Vec::template q_shr<2>(hb), 3)));
      const QI q3 = Vec::q_or(Vec::template q_shr<4>(a), Vec::template q_shl<4>(Vec::q_and(Vec::template q_shr<4>(hb), 3)));
      const QI q4 = Vec::q_or(Vec::template q_shr<4>(c), Vec::template q_shl<4>(Vec::template q_shr<6>(hb)));
      Vec::store(yh + l, scaled(q1, d * static_cast<float>(sc[is])));
      Vec::store(yh + 32 + l, scaled(q2, d * static_cast<float>(sc[is + 2])));
      Vec::store(yh + 64 + l, scaled(q3, d * static_cast<float>(sc[is + 4])));
      Vec::store(yh + 96 + l, scaled(q4, d * static_cast<float>(sc[is + 6])));
    }
  }
}

// On the set's 8-bit layer I8: groups 2j, 2j + 1 (values 64j .. 64j + 63,
// unsigned 0..63) of half j / 2, from its bytes l0 = ql[64 h ..], l1 =
// ql[64 h + 32 ..], h = qh[32 h ..]: the low nibbles and qh bits 0-1, 2-3
// for even j, the high nibbles and bits 4-5, 6-7 for odd j.
template <class I8>
inline __attribute__((always_inline)) void int8_pair_q6_k(typename I8::B l0, typename I8::B l1, typename I8::B h,
                                                         bool odd, typename I8::B& lo, typename I8::B& hi) {
  if (!odd) {
    lo = I8::or_(I8::lo4(l0), I8::and_c(I8::template shl16<4>(h), 0x30));
    hi = I8::or_(I8::lo4(l1), I8::and_c(I8::template shl16<2>(h), 0x30));
  } else {
    lo = I8::or_(I8::hi4(l0), I8::and_c(h, 0x30));
    hi = I8::or_(I8::hi4(l1), I8::and_c(I8::template shr16<2>(h), 0x30));
  }
}

// Groups 2j and 2j + 1 of block b (as above, loading their bytes).
template <class I8>
inline __attribute__((always_inline)) void int8_pair_q6_k(const BlockQ6_K& b, int j, typename I8::B& lo,
                                                         typename I8::B& hi) {
  const int h = j / 2;
  int8_pair_q6_k<I8>(I8::load(b.ql + 64 * h), I8::load(b.ql + 64 * h + 32), I8::load(b.qh + 32 * h), j % 2 != 0, lo,
                     hi);
}

// q[k] (8 x 32 bytes) = the unsigned values (0..63) of group k, each half's bytes loaded once.
template <class I8>
inline __attribute__((always_inline)) void int8_groups_q6_k(const BlockQ6_K& b, typename I8::B* q) {
  for (int h = 0; h < 2; ++h) {
    const typename I8::B l0 = I8::load(b.ql + 64 * h), l1 = I8::load(b.ql + 64 * h + 32), hb = I8::load(b.qh + 32 * h);
    int8_pair_q6_k<I8>(l0, l1, hb, false, q[4 * h], q[4 * h + 1]);
    int8_pair_q6_k<I8>(l0, l1, hb, true, q[4 * h + 2], q[4 * h + 3]);
  }
}

// Q6_K (int8_unpack.h's protocol): values 0..63 kept unsigned, offset 32;
// scales 8-bit signed.
template <class I8>
struct Int8Unpack<I8, BlockQ6_K> : Int8KOffset<I8, BlockQ6_K, 32> {
  static inline __attribute__((always_inline)) void unpack(const BlockQ6_K& b, KUnpacked<I8>& u) {
    u.d = I8::half(b.d);
    int8_groups_q6_k<I8>(b, u.q);
    Scale16<I8>::set_scales(b.scales, u);
    for (int j = 0; j < 16; ++j) u.aux[j] = b.scales[j];
  }
};
#endif  // PREFIXD_ISA_NS

}  // namespace
