// Q2_K, the home of its decoding: the block layout, the scalar reference
// (ggml's dequantize_row_q2_K values), the host/device chunk decoder the CUDA
// kernels run (the reference is a loop over it), and, for the CPU sets, the
// int8 groups over a set's vector layer. The 2-bit planes are Q3_K's too
// (q3_k.h).
//
// A super-block is 16 sub-blocks of 16 values with a 4-bit scale (low nibble)
// and 4-bit min (high nibble) each, q 2 bits: w = d * sc * q - dmin * m.
// Value k (0..255): half h = k / 128, then 2-bit plane j = (k / 32) % 4 of
// byte 16 s + l (s = (k / 16) % 2, l = k % 16) of the half's 32 bytes of qs;
// scale byte k / 16.
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

struct BlockQ2_K {
  static constexpr int kValues = kQKK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint8_t scales[kQKK / 16];  // scale (low nibble) and min (high) of each 16 values
  uint8_t qs[kQKK / 4];       // 2-bit planes, as above
  uint16_t d, dmin;           // F16
};
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ2_K, dmin) == 82);

// Where chunk c (values 8c .. 8c + 7) of a 2-bit plane format lies: the
// offset of its 8 bytes in qs, and the plane's shift (2 j).
struct TwoBitChunk {
  int offset, shift;
};
PREFIXD_HD TwoBitChunk two_bit_chunk(int c) {
  const int k = 8 * c, h = k >> 7, j = (k >> 5) & 3, s = (k >> 4) & 1, l = k & 15;
  return {32 * h + 16 * s + l, 2 * j};
}

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 32)) of the Q2_K block at b:
// (d * sc) * q - dmin * m, each product and difference rounded on its own.
PREFIXD_HD void BlockQ2_K::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b + offsetof(BlockQ2_K, d)), dmin = chunk::f16(b + offsetof(BlockQ2_K, dmin));
  const uint32_t sc = b[c >> 1];
  const float dl = chunk::mul(d, static_cast<float>(sc & 0xFu));
  const float ml = chunk::mul(dmin, static_cast<float>(sc >> 4));
  const TwoBitChunk p = two_bit_chunk(c);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(BlockQ2_K, qs) + p.offset);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) v[t] = chunk::sub(chunk::mul(dl, static_cast<float>((q[t] >> p.shift) & 3u)), ml);
}

// The scalar reference (decode_ops.h).
PREFIXD_HD void dequant_q2_k(const BlockQ2_K& b, float* y) { dequant_by_chunks(b, y); }

// The 16 scales (scales16, bytes 0..15) and mins (mins16) of a Q2_K block.
PREFIXD_HD void q2_k_scales_mins(const BlockQ2_K& b, int8_t* scales16, int16_t* mins16) {
  uint64_t packed[2];
  memcpy(packed, b.scales, 16);
  const uint64_t low4 = 0x0f0f0f0f0f0f0f0full;
  const uint64_t scales[2] = {packed[0] & low4, packed[1] & low4};
  memcpy(scales16, scales, 16);
  for (int j = 0; j < 16; ++j) mins16[j] = static_cast<int16_t>(b.scales[j] >> 4);
}
#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// On the set's 8-bit layer I8: q[k] (8 x 32 bytes) = group k of the 2-bit
// planes qs (64 bytes), values 0..3: value 128h + 32j + l is bits 2j..2j+1 of
// qs[32h + l] (group 4h + j).
template <class I8>
inline __attribute__((always_inline)) void int8_two_bit_groups(const uint8_t* qs, typename I8::B* q) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const typename I8::B v = I8::load(qs + 32 * h);
    q[4 * h] = I8::and_c(v, 3);
    q[4 * h + 1] = I8::and_c(I8::template shr16<2>(v), 3);
    q[4 * h + 2] = I8::and_c(I8::template shr16<4>(v), 3);
    q[4 * h + 3] = I8::and_c(I8::template shr16<6>(v), 3);
  }
}

// Q2_K (int8_unpack.h's protocol): values 0..3, 4-bit scales and mins;
// w = d * sc * q - dmin * m, the mins against x's sums per 16.
template <class I8>
struct Int8Unpack<I8, BlockQ2_K> : Int8K<BlockQ2_K, Scale16<I8>> {
  static inline __attribute__((always_inline)) void unpack(const BlockQ2_K& b, KUnpacked<I8>& u) {
    u.d = I8::half(b.d);
    u.dmin = I8::half(b.dmin);
    int8_two_bit_groups<I8>(b.qs, u.q);
    int8_t scales[16];
    q2_k_scales_mins(b, scales, u.aux);
    Scale16<I8>::set_scales(scales, u);
  }
  template <class X>
  static inline __attribute__((always_inline)) float extra(const KUnpacked<I8>& u, const X& x) {
    return -u.dmin * static_cast<float>(I8::dot_i16x16(u.aux, x.bsums));
  }
};

#endif  // PREFIXD_ISA_NS

}  // namespace
