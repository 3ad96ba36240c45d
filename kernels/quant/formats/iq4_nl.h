// IQ4_NL and IQ4_XS, the home of their decoding: the code book, the block
// layouts, the scale unpack, the scalar references (ggml's
// dequantize_row_iq4_nl / iq4_xs values), the host/device chunk decoders the
// CUDA kernels run (the references are loops over them), and, for the CPU
// sets, the int8 unpack over a set's vector layer (one byte shuffle through
// the code book).
//
// IQ4_NL: a block of 32 4-bit indices into the code book in Q4_0's nibble
// layout (value j < 16 in the low nibble of qs[j], j >= 16 in the high nibble
// of qs[j - 16]), w = d * book[q]. IQ4_XS: 8 sub-blocks of 32 in that layout
// (qs[16 ib ..]), each with a 6-bit scale biased by 32 (low 4 bits in
// scales_l[ib / 2], low nibble first; high 2 in bits 2 ib of scales_h):
// w = d * (ls - 32) * book[q].
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

// The code book: index i (0..15) -> value. Aligned as a vpshufb table.
alignas(16) inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

namespace chunk {

// The code book packed little-endian in four words, entry i picked with a
// byte permute on the device. (Scalars, not the array: device code may read
// constexpr scalars only.)
constexpr uint32_t iq4nl_word(int first) {
  uint32_t w = 0;
  for (int k = 0; k < 4; ++k) w |= static_cast<uint32_t>(static_cast<uint8_t>(kIq4nlValues[first + k])) << (8 * k);
  return w;
}
inline constexpr uint32_t kIq4nl0 = iq4nl_word(0), kIq4nl1 = iq4nl_word(4);   // entries 0-3, 4-7
inline constexpr uint32_t kIq4nl2 = iq4nl_word(8), kIq4nl3 = iq4nl_word(12);  // entries 8-11, 12-15

PREFIXD_HD int iq4nl(uint32_t i) {
  const uint32_t lo = (i & 8u) ? kIq4nl2 : kIq4nl0;
  const uint32_t hi = (i & 8u) ? kIq4nl3 : kIq4nl1;
#if defined(__CUDA_ARCH__)
  const uint32_t b = __byte_perm(lo, hi, i & 7u);
#else
  const uint32_t b = static_cast<uint32_t>(((uint64_t(hi) << 32) | lo) >> (8 * (i & 7u)));
#endif
  return static_cast<int8_t>(b & 0xFFu);
}

// v (8) f32 = scale * book[nibble t of q at shift], each product rounded on its own.
PREFIXD_HD void iq4nl_values(const Bytes8& q, int shift, float scale, float (&v)[8]) {
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) v[t] = mul(scale, static_cast<float>(iq4nl(static_cast<uint32_t>(nibble(q, t, shift)))));
}

}  // namespace chunk

// Entry i (0..15) of the code book.
PREFIXD_HD int8_t iq4nl_value(int i) { return static_cast<int8_t>(chunk::iq4nl(static_cast<uint32_t>(i))); }

struct BlockIQ4_NL {
  static constexpr int kValues = kQK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;            // F16
  uint8_t qs[kQK / 2];   // indices, Q4_0's nibble layout
};
struct BlockIQ4_XS {
  static constexpr int kValues = kQKK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;                   // F16
  uint16_t scales_h;            // high 2 bits of the 8 scales
  uint8_t scales_l[kQKK / 64];  // low 4 bits of the 8 scales
  uint8_t qs[kQKK / 2];         // 8 IQ4_NL sub-blocks of 16 bytes
};
static_assert(sizeof(BlockIQ4_NL) == 18 && offsetof(BlockIQ4_NL, qs) == 2);
static_assert(sizeof(BlockIQ4_XS) == 136 && offsetof(BlockIQ4_XS, scales_h) == 2 &&
              offsetof(BlockIQ4_XS, scales_l) == 4 && offsetof(BlockIQ4_XS, qs) == 8);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 4)) of the IQ4_NL block at b:
// chunk c reads qs[8 (c & 1) ..] at shift 4 (c >> 1).
PREFIXD_HD void BlockIQ4_NL::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(BlockIQ4_NL, qs) + 8 * (c & 1));
  chunk::iq4nl_values(q, 4 * (c >> 1), d, v);
}

// Scale ib (0..7) of an IQ4_XS block, with its bias (0..63).
PREFIXD_HD int iq4_xs_scale(const uint8_t* b, int ib) {
  const uint32_t scales_h = chunk::u16(b + offsetof(BlockIQ4_XS, scales_h));
  const uint32_t lo = (static_cast<uint32_t>(b[offsetof(BlockIQ4_XS, scales_l) + (ib >> 1)]) >> (4 * (ib & 1))) & 0xFu;
  return static_cast<int>(lo | (((scales_h >> (2 * ib)) & 3u) << 4));
}

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 32)) of the IQ4_XS block at b:
// sub-block ib = c / 4 as an IQ4_NL block with scale d * (ls - 32).
PREFIXD_HD void BlockIQ4_XS::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const int ib = c >> 2, cc = c & 3;
  const float dl = chunk::mul(chunk::f16(b), static_cast<float>(iq4_xs_scale(b, ib) - 32));
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(BlockIQ4_XS, qs) + 16 * ib + 8 * (cc & 1));
  chunk::iq4nl_values(q, 4 * (cc >> 1), dl, v);
}

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_iq4_nl(const BlockIQ4_NL& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_iq4_xs(const BlockIQ4_XS& b, float* y) { dequant_by_chunks(b, y); }

// The 8 scales of an IQ4_XS block at once, signed (ls - 32): byte k = scale
// k, the low nibble k of scales_l (bytes in order, low nibble first) with
// bits 2k..2k+1 of scales_h above it.
PREFIXD_HD uint64_t iq4_xs_scales8(const BlockIQ4_XS& b) {
  uint32_t l32;
  memcpy(&l32, b.scales_l, 4);
  uint64_t l = l32;
  l = (l | (l << 16)) & 0x0000FFFF0000FFFFull;  // byte j of scales_l at bits 16j..
  l = (l | (l << 8)) & 0x00FF00FF00FF00FFull;
  l = (l & 0x000F000F000F000Full) | ((l & 0x00F000F000F000F0ull) << 4);
  uint64_t h = b.scales_h;  // 2 bits per scale, moved to bits 8k.. in three steps
  h = (h & 0x00FFull) | ((h & 0xFF00ull) << 24);
  h = (h & 0x0000000F0000000Full) | ((h & 0x000000F0000000F0ull) << 12);
  h = (h & 0x0003000300030003ull) | ((h & 0x000C000C000C000Cull) << 6);
  return swar::minus32_bytes(l | (h << 4));
}
#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// On the set's 8-bit layer I8: the 32 signed values of the 16 index bytes qs
// (IQ4_NL's layout), through the code book in one byte shuffle.
template <class I8>
inline __attribute__((always_inline)) typename I8::B int8_iq4nl(const uint8_t* qs) {
  return I8::lut16(kIq4nlValues, I8::nibbles16(qs));
}

// IQ4_NL (int8_unpack.h's protocol): the code book's signed values
// (-127..113), sc = d, as Q8_0.
template <class I8>
struct Int8Unpack<I8, BlockIQ4_NL> : Int8Q32<BlockIQ4_NL, true> {
  static inline __attribute__((always_inline)) void unpack(const BlockIQ4_NL& b, typename I8::B* q, float* sc, float*) {
    q[0] = int8_iq4nl<I8>(b.qs);
    sc[0] = I8::half(b.d);
  }
};

// IQ4_XS: 8 groups of 32 through the code book (signed), each with its 6-bit
// scale less 32; no constant term.
template <class I8>
struct Int8Unpack<I8, BlockIQ4_XS> : Int8K<BlockIQ4_XS, Scale8<I8>, true, false> {
  static inline __attribute__((always_inline)) void unpack(const BlockIQ4_XS& b, KUnpacked<I8>& u) {
    u.d = I8::half(b.d);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      u.signs[k] = int8_iq4nl<I8>(b.qs + 16 * k);
      u.q[k] = I8::abs(u.signs[k]);
    }
    const uint64_t scales = iq4_xs_scales8(b);
    u.scales[0] = I8::widen_i8x8(reinterpret_cast<const int8_t*>(&scales));
  }
};
#endif  // PREFIXD_ISA_NS

}  // namespace
