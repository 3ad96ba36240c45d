// The protocol by which a format's header gives the CPU sets' integer matrix
// products (generic/int8_gemm.h's tiles, generic/int8_panel_layout.h's panels)
// its weights as bytes: each format header specializes Int8Unpack<I8, Block>
// over a set's 8-bit layer I8 (x86_int8/ymm_int8.h, portable/int8_vec.h), and
// the products loop over formats/registry.h, so a new format needs no adapter
// outside its own header. This file holds the protocol and what the formats
// share: the unpacked K block and the scale layouts of the 256-value formats.
//
// A 32-value format (kSuper false): unpack(b, q, sc, mn) gives kSub groups of
// 32 bytes q (signed weights when kSigned, else unsigned), a float scale sc per
// group and, when kMin, its constant term mn: value = sc * q + mn.
// A 256-value format (kSuper true): unpack(b, u) gives KUnpacked<I8>: 8 groups
// of 32 unsigned bytes (kSigned: q their magnitudes, signs the signed values),
// their 16-bit scales as scale(u, k) returns them for group k (applied inside
// vpmaddwd), and, when kExtra, the block's constant term for an x block
// (extra(u, x): to be multiplied by x's d; x is generic/int8_gemm.h's XQ8KBlock).
//
// Compiled in a CPU set's translation unit only (PREFIXD_ISA_NS; decode_ops.h).
#pragma once

#include <cstdint>

#include "kernels/quant/formats/decode_ops.h"

#if defined(PREFIXD_ISA_NS)
namespace PREFIXD_QUANT_NS {

// Block's unpack onto the 8-bit layer I8: specialized in Block's header.
template <class I8, typename Block>
struct Int8Unpack;

// vpshufb masks: kPick.same[k] puts 16-bit word k of each half in all 8 words of
// that half; kPick.pair[j] puts word 2j in the low half and word 2j + 1 in the high.
struct PickMasks {
  alignas(32) uint8_t same[8][32];
  alignas(32) uint8_t pair[4][32];
  constexpr PickMasks() : same{}, pair{} {
    for (int k = 0; k < 8; ++k)
      for (int j = 0; j < 32; ++j) same[k][j] = static_cast<uint8_t>(2 * k + (j & 1));
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 32; ++j) pair[p][j] = static_cast<uint8_t>(2 * (2 * p + (j >= 16 ? 1 : 0)) + (j & 1));
  }
};
inline constexpr PickMasks kPick{};

// One 256-value block unpacked: 8 groups of 32 unsigned bytes, their 16-bit
// scales (scale(k)), and what the block's constant term needs.
template <class I8>
struct KUnpacked {
  using B = typename I8::B;
  B q[8];
  B signs[8];         // kSigned formats only: the signed weights (q: their magnitudes)
  B scales[2];        // 16-bit scales, the same 8 in both halves (Scale16: [0] scales 0..7, [1] 8..15)
  int16_t aux[16];    // Q4_K/Q5_K: the 8 mins; Q2_K: the 16 mins; Q3_K/Q6_K: the 16 scales
  float d, dmin;
};

// The traits of a 32-value format's unpack: signed values (Q8_0, IQ4_NL), or
// unsigned ones with a constant term.
template <typename BlockT, bool kSignedValues>
struct Int8Q32 {
  using Block = BlockT;
  static constexpr int kSub = 1;
  static constexpr bool kSuper = false, kSigned = kSignedValues, kMin = !kSignedValues;
};

// The formats with 8 scales, one per group of 32 (Q4_K, Q5_K, IQ4_XS): the
// same 8 words in both halves of scales[0].
template <class I8>
struct Scale8 {
  static inline __attribute__((always_inline)) typename I8::B scale(const KUnpacked<I8>& u, int k) {
    return I8::shuffle(u.scales[0], kPick.same[k]);
  }
};

// The formats of 16 groups of 16 (Q2_K, Q3_K, Q6_K): 16 signed 8-bit scales,
// group k of 32 bytes taking scales 2k (first 16 bytes) and 2k + 1 (last 16).
template <class I8>
struct Scale16 {
  static inline __attribute__((always_inline)) void set_scales(const int8_t* scales16, KUnpacked<I8>& u) {
    u.scales[0] = I8::widen_i8x8(scales16);
    u.scales[1] = I8::widen_i8x8(scales16 + 8);
  }
  static inline __attribute__((always_inline)) typename I8::B scale(const KUnpacked<I8>& u, int k) {
    return I8::shuffle(u.scales[k / 4], kPick.pair[k % 4]);
  }
};

// The traits of a 256-value format's unpack, its scales laid out as Scales
// (Scale8, Scale16).
template <typename BlockT, class Scales, bool kSignedValues = false, bool kExtraTerm = true>
struct Int8K : Scales {
  using Block = BlockT;
  static constexpr bool kSuper = true, kSigned = kSignedValues, kExtra = kExtraTerm;
};

// Q3_K and Q6_K: values kept unsigned, their offset kOffset (4, 32) taken as
// -kOffset * d * sum(scale * x sum) per 16; aux holds the 16 scales.
template <class I8, typename BlockT, int kOffset>
struct Int8KOffset : Int8K<BlockT, Scale16<I8>> {
  template <class X>
  static inline __attribute__((always_inline)) float extra(const KUnpacked<I8>& u, const X& x) {
    return -static_cast<float>(kOffset) * u.d * static_cast<float>(I8::dot_i16x16(u.aux, x.bsums));
  }
};

}  // namespace
#endif  // PREFIXD_ISA_NS
