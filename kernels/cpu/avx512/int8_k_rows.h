// Decode products of Q4_K, Q5_K and Q6_K weights in 512-bit registers (both
// AVX-512 sets): each weight row's 256-value super-block is unpacked into four
// zmm of 64 unsigned bytes in x's own order, multiplied with the activation
// bytes (vpmaddubsw), scaled per group inside vpdpwssd (VNNI; vpmaddwd + vpaddd
// without it) and summed in int32 over the super-block, then scaled once in
// floats. The mins and offsets come from x's sums per 16 or 32, as in
// generic/int8_gemm.h, whose 256-bit tiles keep every other format. Why: those
// tiles unpack a row's 8 groups through the stack and sum the mins per block
// horizontally; here a group pair of 64 weights costs 2 to 4 unpacking
// instructions, one vpmaddubsw and one vpdpwssd. Q4_K decode product, 2816 x
// 1024, one Zen 5 thread: 69 us with the 256-bit tiles, 38 here (docs/cpu.md).
// gemm.cpp sends calls of fewer than kInt8MaxRows x rows here (through the
// set's gemm_int8_rows).
//
// Batch invariance: each output y[i][r] sums its super-blocks in order into one
// float accumulator and reduces it once, whatever the tile it falls in.
#pragma once

#if !defined(__AVX512BW__)
#error "avx512/int8_k_rows.h needs AVX512BW (an AVX-512 set)"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_gemm.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8wide {

using Z = __m512i;

// acc + the products of the 16-bit lanes of p and s, summed in pairs into int32 lanes.
PREFIXD_VEC_INLINE Z madd_acc(Z acc, Z p, Z s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, p, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, s));
#endif
}

// One weight row's super-block unpacked: q[j] holds values 64j..64j+63
// (unsigned), sc[j] the 16-bit scale of each pair of them. The block's value
// is factors[0] * (its integer sum) + factors[1] * extra(x), where extra() is
// an int32 dot product of aux with x's sums (the mins, or the offsets).
struct Unpacked {
  Z q[4];
  Z sc[4];
  __m256i aux;    // 16-bit multipliers of x's sums (Q4_K/Q5_K: 8 mins; Q6_K: 16 scales)
  __m128 factors; // [d, constant term's factor, ., .]
};

// vpshufb masks for a Q4_K/Q5_K scale vector holding the 8 scales as bytes in
// every 128-bit lane: mask j puts byte 2j, as a word, in lanes 0-1 (values
// 64j..64j+31) and byte 2j + 1 in lanes 2-3 (values 64j+32..64j+63); 0x80
// zeroes each word's high byte.
struct PairMasks {
  alignas(64) uint8_t m[4][64];
  constexpr PairMasks() : m{} {
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 64; ++b) m[j][b] = (b & 1) ? 0x80 : static_cast<uint8_t>(2 * j + (b >= 32 ? 1 : 0));
  }
};
inline constexpr PairMasks kPairMasks{};

// vpshufb mask: bytes 8..15 of a vector (the mins) as 8 words.
alignas(16) inline constexpr uint8_t kMinWords[16] = {8, 0x80, 9, 0x80, 10, 0x80, 11, 0x80,
                                                      12, 0x80, 13, 0x80, 14, 0x80, 15, 0x80};

// vpermps indices: factor 0 in lanes 0-7, factor 1 in lanes 8-15.
alignas(64) inline constexpr int32_t kFactorLanes[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};

// vpermw indices for Q6_K: zmm j covers groups of 16 4j..4j+3, one per 128-bit
// lane; lane l takes word 4j + l of the 16 scales.
struct QuadIndices {
  alignas(64) uint16_t m[4][32];
  constexpr QuadIndices() : m{} {
    for (int j = 0; j < 4; ++j)
      for (int w = 0; w < 32; ++w) m[j][w] = static_cast<uint16_t>(4 * j + w / 8);
  }
};
inline constexpr QuadIndices kQuadIndices{};

// Bit j of the high-bit byte in the low half, bit j + 1 in the high half (Q5_K, pair j / 2).
struct HighBits {
  alignas(64) uint8_t m[4][64];
  constexpr HighBits() : m{} {
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 64; ++b) m[j][b] = static_cast<uint8_t>(1u << (2 * j + (b >= 32 ? 1 : 0)));
  }
};
inline constexpr HighBits kHighBits{};

PREFIXD_VEC_INLINE Z load64(const void* p) { return _mm512_loadu_si512(p); }
PREFIXD_VEC_INLINE Z bytes(uint8_t v) { return _mm512_set1_epi8(static_cast<char>(v)); }

// 32 bytes of nibbles -> 64 values: the low nibbles in the low half, the high ones in the high half.
PREFIXD_VEC_INLINE Z nibbles32(const uint8_t* p) {
  const Z v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), bytes(0x0F));
}

// Q4_K and Q5_K: the 8 scales in pairs, the mins against x's sums per 32.
template <typename Block>
PREFIXD_VEC_INLINE void scales_mins(const Block& b, Unpacked& u) {
  const __m128i sm = I8::scales_mins_k4(b.scales);  // formats/k_scales.h's unpack
  const Z lanes = _mm512_broadcast_i32x4(sm);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) u.sc[j] = _mm512_shuffle_epi8(lanes, load64(kPairMasks.m[j]));
  u.aux = _mm256_castsi128_si256(_mm_shuffle_epi8(sm, _mm_load_si128(reinterpret_cast<const __m128i*>(kMinWords))));
  uint32_t d_dmin;  // d and dmin, two F16 side by side
  std::memcpy(&d_dmin, &b.d, 4);
  u.factors = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), _mm_setr_ps(1, -1, 0, 0));
}

// Q4_K and Q5_K (formats/q4_k.h's layout): 64 values a zmm from 32 bytes of
// nibbles; Q5_K adds the fifth bit (16) from qh, bit 2j for group 2j.
template <typename BlockT>
struct WideK4 {
  using Block = BlockT;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, Unpacked& u) {
    Z h;
    if constexpr (Block::kBits == 5) h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const Z lo = nibbles32(b.qs + 32 * j);
      if constexpr (Block::kBits == 5) {
        u.q[j] = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(h, load64(kHighBits.m[j])), lo, bytes(0x10));
      } else {
        u.q[j] = lo;
      }
    }
    scales_mins(b, u);
  }
  // sum over the 8 groups of min * (x's sum over the group): 4 int32 lanes.
  static PREFIXD_VEC_INLINE __m256i extra(const Unpacked& u, const XQ8KBlock& x) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums32));
    return _mm256_zextsi128_si256(_mm_madd_epi16(_mm256_castsi256_si128(u.aux), s));
  }
};
using WideQ4_K = WideK4<quant::BlockQ4_K>;
using WideQ5_K = WideK4<quant::BlockQ5_K>;

// Q6_K: values 0..63 (4 bits in ql, 2 in qh), 16 signed scales per 16 values,
// an offset of 32 taken as -32 * sum(scale * x's sum per 16).
struct WideQ6_K {
  using Block = quant::BlockQ6_K;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, Unpacked& u) {
    const Z m30 = bytes(0x30), m0f = bytes(0x0F);
    // Word shifts bringing qh's 2-bit fields to bits 4-5: values 0..31 and
    // 32..63 of each 128 (low nibbles) take bits 0-1 and 2-3; 64..95 and
    // 96..127 (high nibbles) take bits 4-5 and 6-7.
    const Z left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const Z right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const Z l = load64(b.ql + 64 * half);
      const Z h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * half)));
      // 0xF8: a | (b & c).
      u.q[2 * half] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, m0f), _mm512_sllv_epi16(h, left), m30, 0xF8);
      u.q[2 * half + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m0f),
                                          _mm512_and_si512(_mm512_srlv_epi16(h, right), m30));
    }
    u.aux = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    const Z words = _mm512_castsi256_si512(u.aux);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) u.sc[j] = _mm512_permutexvar_epi16(load64(kQuadIndices.m[j]), words);
    const __m128 d = _mm_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
    u.factors = _mm_mul_ps(d, _mm_setr_ps(1, -32, 0, 0));
  }
  // sum over the 16 groups of scale * (x's sum over the group): 8 int32 lanes.
  static PREFIXD_VEC_INLINE __m256i extra(const Unpacked& u, const XQ8KBlock& x) {
    const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
    return _mm256_madd_epi16(u.aux, s);
  }
};

// y[i * ldy + m] for MR weight rows (w, row_bytes apart) and NR x rows
// (x_stride blocks apart), over n_blocks super-blocks.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile(const uint8_t* w, size_t row_bytes, const XQ8KBlock* x, int64_t x_stride,
                             int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  __m512 acc[MR][NR];
  i8gemm::fill(acc, _mm512_setzero_ps());
  for (int64_t b = 0; b < n_blocks; ++b) {
    // Without it llama-245m Q4_K_M decoded at 175-203 t/s instead of 275-321.
    i8gemm::prefetch_ahead<MR * sizeof(Block)>(w, b, i8gemm::kPrefetchBytes);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      Unpacked u;
      Fmt::unpack(reinterpret_cast<const Block*>(w + m * row_bytes)[b], u);
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) {
        const XQ8KBlock& xb = x[i * x_stride + b];
        Z isum = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) isum = madd_acc(isum, _mm512_maddubs_epi16(u.q[j], load64(xb.q + 64 * j)), u.sc[j]);
        // The integer sum folded to 8 lanes beside the 8 of extra(), each half
        // scaled by its factor times x's d.
        const __m256i sum8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
        const Z both = _mm512_inserti64x4(_mm512_castsi256_si512(sum8), Fmt::extra(u, xb), 1);
        const __m128 f = _mm_mul_ps(u.factors, _mm_set1_ps(xb.d));
        const __m512 fv = _mm512_permutexvar_ps(_mm512_load_si512(kFactorLanes), _mm512_castps128_ps512(f));
        acc[m][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), fv, acc[m][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) y[i * ldy + m] = _mm512_reduce_add_ps(acc[m][i]);
}

// y rows [i0, i1) x the weight rows of the 32-row groups [p0, p1), for the
// formats above; false (nothing done) for any other row type.
inline bool rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  return i8gemm::k_format_rows<WideQ4_K, WideQ5_K, WideQ6_K>(
      a, p0, p1, i0, i1, []<class Fmt, int MR, int NR>(auto... args) { tile<Fmt, MR, NR>(args...); });
}

}  // namespace i8wide

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
