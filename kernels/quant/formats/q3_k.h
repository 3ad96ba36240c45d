// Q3_K, the home of its decoding: the block layout, the scale unpack, the
// scalar reference (ggml's dequantize_row_q3_K values), the host/device chunk
// decoder the CUDA kernels run (the reference is a loop over it), and, for the
// CPU sets, the int8 groups over a set's vector layer. Its low 2 bits lie in
// Q2_K's planes (q2_k.h).
//
// A super-block is 16 sub-blocks of 16 values with 6-bit signed scales
// (stored biased by 32), q 3 bits (2 in qs, the third in hmask), offset 4:
// w = d * (sc - 32) * (q - 4). Value k: its 2 low bits as Q2_K's value k
// (two_bit_chunk), its third bit is bit 4 h + j of hmask[16 s + l]; scale
// i = k / 16: low 4 bits from scales[i % 8] (high nibble when i >= 8), high 2
// bits from scales[8 + i % 4] at bit 2 (i / 4).
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
#include "kernels/quant/formats/q2_k.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ3_K {
  static constexpr int kValues = kQKK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint8_t hmask[kQKK / 8];  // third bits
  uint8_t qs[kQKK / 4];     // Q2_K's 2-bit planes
  uint8_t scales[12];       // 16 six-bit scales, as above
  uint16_t d;               // F16
};
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 && offsetof(BlockQ3_K, d) == 108);

// Scale i (0..15) of the 12 packed bytes, without its bias (0..63).
PREFIXD_HD uint32_t q3_k_scale(const uint8_t* packed, int i) {
  const uint32_t lo = (static_cast<uint32_t>(packed[i & 7]) >> (4 * (i >> 3))) & 0xFu;
  const uint32_t hi = (static_cast<uint32_t>(packed[8 + (i & 3)]) >> (2 * (i >> 2))) & 3u;
  return lo | (hi << 4);
}

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 32)) of the Q3_K block at b:
// (d * (sc - 32)) * (q - 4), each product rounded on its own.
PREFIXD_HD void BlockQ3_K::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const int k = 8 * c, h = k >> 7, s = (k >> 4) & 1, l = k & 15;
  const float d_all = chunk::f16(b + offsetof(BlockQ3_K, d));
  const int sc = static_cast<int>(q3_k_scale(b + offsetof(BlockQ3_K, scales), c >> 1));
  const float dl = chunk::mul(d_all, static_cast<float>(sc - 32));
  const TwoBitChunk p = two_bit_chunk(c);  // q2_k.h
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(BlockQ3_K, qs) + p.offset);
  const chunk::Bytes8 hm = chunk::bytes8(b + 16 * s + l);
  const int m_bit = 4 * h + p.shift / 2;
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) {
    const int x = static_cast<int>((q[t] >> p.shift) & 3u) - (((hm[t] >> m_bit) & 1u) ? 0 : 4);
    v[t] = chunk::mul(dl, static_cast<float>(x));
  }
}

// The scalar reference (decode_ops.h).
PREFIXD_HD void dequant_q3_k(const BlockQ3_K& b, float* y) { dequant_by_chunks(b, y); }

// The 16 scales, signed (sc - 32), all at once: q3_k_scale in 64-bit words
// (scale j in byte j), the bias taken off bytewise.
PREFIXD_HD void q3_k_scales16(const uint8_t* packed, int8_t* out) {
  uint32_t a[3];
  memcpy(a, packed, 12);
  const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const uint64_t w0 = (a[0] & low4) | ((a[2] & low2) << 4), w1 = (a[1] & low4) | (((a[2] >> 2) & low2) << 4);
  const uint64_t w2 = ((a[0] >> 4) & low4) | (((a[2] >> 4) & low2) << 4);
  const uint64_t w3 = ((a[1] >> 4) & low4) | (((a[2] >> 6) & low2) << 4);
  const uint64_t words[2] = {swar::minus32_bytes(w0 | (w1 << 32)), swar::minus32_bytes(w2 | (w3 << 32))};
  memcpy(out, words, 16);
}

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// On the set's 8-bit layer I8: q[k] (8 x 32 bytes) = group k's values 0..7
// kept unsigned (the offset of 4 is left to the caller): Q2_K's planes with
// hmask bit k as 4.
template <class I8>
inline __attribute__((always_inline)) void int8_groups_q3_k(const BlockQ3_K& b, typename I8::B* q) {
  int8_two_bit_groups<I8>(b.qs, q);
  const typename I8::B h = I8::load(b.hmask);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) q[k] = I8::or_(q[k], I8::test(h, static_cast<uint8_t>(1u << k), 4));
}

// Q3_K (int8_unpack.h's protocol): values 0..7 kept unsigned, offset 4;
// scales 6-bit signed.
template <class I8>
struct Int8Unpack<I8, BlockQ3_K> : Int8KOffset<I8, BlockQ3_K, 4> {
  static inline __attribute__((always_inline)) void unpack(const BlockQ3_K& b, KUnpacked<I8>& u) {
    u.d = I8::half(b.d);
    int8_groups_q3_k<I8>(b, u.q);
    int8_t scales[16];
    q3_k_scales16(b.scales, scales);
    for (int j = 0; j < 16; ++j) u.aux[j] = scales[j];
    Scale16<I8>::set_scales(scales, u);
  }
};
#endif  // PREFIXD_ISA_NS

}  // namespace
