// Decode products of Q4_K, Q5_K and Q6_K weights in 256-bit registers (the
// `avx2` set; included by kernels/cpu/avx2/kernels.cpp only): each weight
// row's super-block is unpacked group by group (32 values, one ymm) straight
// into registers in x's order and used at once, multiplied with the
// activation bytes (vpmaddubsw), scaled per group inside vpmaddwd and summed
// in int32 over the super-block; the mins or offsets come from one vpmaddwd of
// them with x's sums, folded beside the integer sum and scaled in one fused
// float step per super-block. Modelled on avx512/int8_k_rows.h. Why:
// generic/int8_gemm.h's tile_k spills its unpacked groups to the stack and
// sums the constant term with scalar horizontal sums per block (figures in
// docs/cpu.md). gemm.cpp sends calls of fewer than kInt8MaxRows x rows
// here (through the set's gemm_int8_rows).
//
// Batch invariance: each output y[i][r] sums its super-blocks in order into one
// float accumulator and reduces it once, whatever the tile it falls in.
#pragma once

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "avx2/int8_k_rows.h needs AVX2, FMA and F16C (the avx2 set)"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_gemm.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8wide {

using Y = __m256i;

PREFIXD_VEC_INLINE Y load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
PREFIXD_VEC_INLINE Y mask(const uint8_t* m) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(m)); }

// vpermps indices: factor 0 in lanes 0-3, factor 1 in lanes 4-7.
alignas(32) inline constexpr int32_t kFactorLanes[8] = {0, 0, 0, 0, 1, 1, 1, 1};

// One weight row's super-block, its scales ready: the block's value is
// factors[0] * (integer sum) + factors[1] * extra(x).
struct Scales {
  Y words[2];     // 16-bit scales (Q4_K/Q5_K: the 8 in both halves of [0]; Q6_K: [0] scales 0-7, [1] 8-15)
  Y aux;          // 16-bit multipliers of x's sums (Q4_K/Q5_K: 8 mins in the low half; Q6_K: 16 scales)
  __m128 factors; // [d, constant term's factor, ., .]
};

// Q4_K and Q5_K: the 8 scales as words in both halves, the mins against x's sums per 32.
template <typename Block>
PREFIXD_VEC_INLINE void scales_mins(const Block& b, Scales& s) {
  const __m128i sm = I8::scales_mins_k4(b.scales);  // formats/k_scales.h's unpack
  s.words[0] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
  s.aux = _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
  uint32_t d_dmin;  // d and dmin, two F16 side by side
  std::memcpy(&d_dmin, &b.d, 4);
  s.factors = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), _mm_setr_ps(1, -1, 0, 0));
}

// Q4_K/Q5_K: the extra term in 4 int32 lanes (mins · x's sums per 32).
PREFIXD_VEC_INLINE __m128i extra_mins(const Scales& s, const XQ8KBlock& x) {
  return _mm_madd_epi16(_mm256_castsi256_si128(s.aux), _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums32)));
}

// Q4_K and Q5_K: groups 2j (low nibbles) and 2j + 1 (high nibbles) of 32
// unsigned values, Q5_K's fifth bit from qh (formats/q4_k.h on this set's I8).
template <typename BlockT>
struct WideK4 {
  using Block = BlockT;
  static PREFIXD_VEC_INLINE void scales(const Block& b, Scales& s) { scales_mins(b, s); }
  static PREFIXD_VEC_INLINE void groups(const Block& b, int j, Y& lo, Y& hi) {
    quant::int8_pair_k4<I8, Block>(load32(b.qs + 32 * j), quant::int8_fifth_bits<I8>(b), j, lo, hi);
  }
  static PREFIXD_VEC_INLINE Y scale(const Scales& s, int k) { return _mm256_shuffle_epi8(s.words[0], mask(quant::kPick.same[k])); }
  static PREFIXD_VEC_INLINE __m128i extra(const Scales& s, const XQ8KBlock& x) { return extra_mins(s, x); }
};
using WideQ4_K = WideK4<quant::BlockQ4_K>;
using WideQ5_K = WideK4<quant::BlockQ5_K>;

// Q6_K: values 0..63 (4 bits in ql, 2 in qh), 16 signed scales per 16 values,
// an offset of 32 taken as -32 * sum(scale * x's sum per 16).
struct WideQ6_K {
  using Block = quant::BlockQ6_K;
  static PREFIXD_VEC_INLINE void scales(const Block& b, Scales& s) {
    s.aux = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    s.words[0] = _mm256_permute2x128_si256(s.aux, s.aux, 0x00);
    s.words[1] = _mm256_permute2x128_si256(s.aux, s.aux, 0x11);
    const __m128 d = _mm_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(b.d)));
    s.factors = _mm_mul_ps(d, _mm_setr_ps(1, -32, 0, 0));
  }
  // Groups 2j and 2j + 1 (formats/q6_k.h on this set's I8).
  static PREFIXD_VEC_INLINE void groups(const Block& b, int j, Y& lo, Y& hi) { quant::int8_pair_q6_k<I8>(b, j, lo, hi); }
  static PREFIXD_VEC_INLINE Y scale(const Scales& s, int k) {
    return _mm256_shuffle_epi8(s.words[k / 4], mask(quant::kPick.pair[k % 4]));
  }
  // sum over the 16 groups of scale * (x's sum over the group), folded to 4 int32 lanes.
  static PREFIXD_VEC_INLINE __m128i extra(const Scales& s, const XQ8KBlock& x) {
    const Y e = _mm256_madd_epi16(s.aux, load32(x.bsums));
    return _mm_add_epi32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1));
  }
};

// acc += [integer sum folded to 4 lanes, extra] * [factors[0] * x's d x4, factors[1] * x's d x4].
PREFIXD_VEC_INLINE __m256 epilogue(Y isum, __m128i extra, __m128 factors, float xd, __m256 acc) {
  const __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
  const Y both = _mm256_inserti128_si256(_mm256_castsi128_si256(sum4), extra, 1);
  const __m128 f = _mm_mul_ps(factors, _mm_set1_ps(xd));
  const __m256 fv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_load_si256(reinterpret_cast<const __m256i*>(kFactorLanes)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(both), fv, acc);
}

// The 8 lanes summed in a fixed order.
PREFIXD_VEC_INLINE float reduce(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// y[i * ldy + m] for MR weight rows (w, row_bytes apart) and NR x rows
// (x_stride blocks apart), over n_blocks super-blocks.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile(const uint8_t* w, size_t row_bytes, const XQ8KBlock* x, int64_t x_stride,
                             int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  __m256 acc[MR][NR];
  i8gemm::fill(acc, _mm256_setzero_ps());
  for (int64_t b = 0; b < n_blocks; ++b) {
    i8gemm::prefetch_ahead<MR * sizeof(Block)>(w, b, i8gemm::kPrefetchBytes);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const Block& blk = reinterpret_cast<const Block*>(w + m * row_bytes)[b];
      Scales s;
      Fmt::scales(blk, s);
      Y isum[NR];
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) isum[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        Y lo, hi;
        Fmt::groups(blk, j, lo, hi);
        const Y s_lo = Fmt::scale(s, 2 * j), s_hi = Fmt::scale(s, 2 * j + 1);
#pragma GCC unroll 4
        for (int i = 0; i < NR; ++i) {
          const int8_t* xq = x[i * x_stride + b].q + 64 * j;
          const Y p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(xq)), s_lo);
          const Y p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(xq + 32)), s_hi);
          isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(p_lo, p_hi));
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) {
        const XQ8KBlock& xb = x[i * x_stride + b];
        acc[m][i] = epilogue(isum[i], Fmt::extra(s, xb), s.factors, xb.d, acc[m][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) y[i * ldy + m] = reduce(acc[m][i]);
}

// y rows [i0, i1) x the weight rows of the 32-row groups [p0, p1), for the
// formats above; false (nothing done) for any other row type.
inline bool rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  return i8gemm::k_format_rows<WideQ4_K, WideQ5_K, WideQ6_K>(
      a, p0, p1, i0, i1, []<class Fmt, int MR, int NR>(auto... args) { tile<Fmt, MR, NR>(args...); });
}

}  // namespace i8wide

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
