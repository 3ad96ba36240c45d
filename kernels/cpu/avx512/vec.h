// The AVX-512 vector layer of the CPU kernels: 16 float lanes in a zmm, with
// F16/BF16 conversions bit-identical to kernels/dtype.h and a vectorised exp.
// The vector layer of two sets: `avx512bf16` (built with AVX512_BF16,
// kHasBf16Dot: vdpbf16ps) and `avx512` (without). Only their kernels.cpp
// (kernels/cpu/avx512bf16/, kernels/cpu/avx512/) include this file.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp2_poly.h"

// GCC 12 reports its own _mm512_undefined_* temporaries in avx512fintrin.h as
// (maybe-)uninitialized when masked intrinsics inline; a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PREFIXD_VEC_INLINE inline __attribute__((always_inline))

namespace prefixd::cpu::PREFIXD_ISA_NS {

struct Vec {
  using T = __m512;
  static constexpr int N = 16;
  // gemm: x rows per micro-tile and vectors per tile row (2 x 16 = a panel of 32).
  static constexpr int kGemmRows = 12;
  static constexpr int kGemmVecs = 2;
  // F32 panels are read in place: a tile spans the whole panel, so it is read
  // once per 12 x rows and stays in L2 after the first pass; copying it first
  // only serialised the copy with the FMAs (Zen 5, 2 threads: pp512 F32
  // 807 -> 887 t/s, the 100-token suffix 12 % faster without the copy).
  static constexpr bool kCopyF32Panels = false;
  // attention: register tiles of 6 keys (or head-dim rows) x 4 lane groups
  // (24 accumulators), keys per online-softmax step.
  static constexpr int kAttnRowTile = 6;
  static constexpr int kAttnGroupTile = 4;
  static constexpr int kAttnChunk = 48;
  static constexpr int kRegisters = 32;  // vector registers of the target
#if defined(__AVX512BF16__)
  static constexpr bool kHasBf16Dot = true;
#else
  static constexpr bool kHasBf16Dot = false;
#endif

  static PREFIXD_VEC_INLINE __mmask16 tail(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
  }

  static PREFIXD_VEC_INLINE T zero() { return _mm512_setzero_ps(); }
  static PREFIXD_VEC_INLINE T set1(float f) { return _mm512_set1_ps(f); }
  static PREFIXD_VEC_INLINE T load(const float* p) { return _mm512_loadu_ps(p); }
  static PREFIXD_VEC_INLINE void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  // n in [0, N]: lanes past n read as zero / are left untouched.
  static PREFIXD_VEC_INLINE T load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail(n), p); }
  static PREFIXD_VEC_INLINE void store_n(float* p, T v, int64_t n) { _mm512_mask_storeu_ps(p, tail(n), v); }

  static PREFIXD_VEC_INLINE T add(T a, T b) { return _mm512_add_ps(a, b); }
  static PREFIXD_VEC_INLINE T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static PREFIXD_VEC_INLINE T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static PREFIXD_VEC_INLINE T div(T a, T b) { return _mm512_div_ps(a, b); }
  static PREFIXD_VEC_INLINE T max(T a, T b) { return _mm512_max_ps(a, b); }
  static PREFIXD_VEC_INLINE bool all_equal(T a, float c) {
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(c), _CMP_EQ_OQ) == 0xffff;
  }
  static PREFIXD_VEC_INLINE T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c
  static PREFIXD_VEC_INLINE T fmsub(T a, T b, T c) { return _mm512_fmsub_ps(a, b, c); }  // a*b - c
  static PREFIXD_VEC_INLINE float reduce_add(T a) { return _mm512_reduce_add_ps(a); }
  // a > b ? t : f, per lane (ordered compare).
  static PREFIXD_VEC_INLINE T select_gt(T a, T b, T t, T f) {
    return _mm512_mask_mov_ps(f, _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), t);
  }

  // exp(x): range reduction x = k*ln2 + r, |r| <= ln2/2, degree-6 polynomial on
  // r; relative error ~2 ulp. Lanes below -87.3 (and -inf) give 0.
  static PREFIXD_VEC_INLINE T exp(T x) {
    const T log2e = _mm512_set1_ps(1.44269504088896341f);
    const T ln2_hi = _mm512_set1_ps(0.693359375f);
    const T ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    T xc = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365478515625f), _CMP_LT_OQ);
    T k = _mm512_roundscale_ps(_mm512_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    T r = _mm512_fnmadd_ps(k, ln2_hi, xc);
    r = _mm512_fnmadd_ps(k, ln2_lo, r);
    T p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    T r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    T y = _mm512_scalef_ps(p, k);  // p * 2^k, handles the exponent range
    return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
  }

  // 2^x for x <= 0 (attention scores less their running max, in log2
  // units): x = floor(x) + r with r in [0, 1) (vreduceps), a polynomial on r
  // with p(0) = 1 (so 2^0 = 1 exactly), times 2^floor(x) (vscalefps, which
  // flushes far below 2^-126 to 0). -inf gives 0; NaN stays NaN. Degree 5,
  // relative error 1.5e-7: six operations where exp() takes sixteen.
  static PREFIXD_VEC_INLINE T exp2_nonpositive(T x) { return exp2_poly(x, kExp2Degree5); }
  // The same where the result is rounded to BF16 (relative 2^-9) anyway:
  // degree 4, relative error 3e-6.
  static PREFIXD_VEC_INLINE T exp2_nonpositive_bf16(T x) { return exp2_poly(x, kExp2Degree4); }
  // The polynomial of kernels/cpu/exp2_poly.h on x - floor(x), times 2^floor(x).
  template <int kDegree>
  static PREFIXD_VEC_INLINE T exp2_poly(T x, const float (&c)[kDegree]) {
    const T r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF);
    T p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
    for (int i = 1; i < kDegree; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[i]));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, x);
  }

  // 16 halves -> 16 floats. vcvtph2ps quiets signalling NaNs; dtype.h keeps the
  // payload unchanged, so NaN lanes are rebuilt by hand.
  static PREFIXD_VEC_INLINE T f16_to_f32(__m256i h) {
    T f = _mm512_cvtph_ps(h);
    __m512i hi = _mm512_cvtepu16_epi32(h);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(hi, _mm512_set1_epi32(0x7fff)),
                                            _mm512_set1_epi32(0x7c00));
    if (__builtin_expect(nan != 0, 0)) {
      __m512i bits = _mm512_or_si512(
          _mm512_slli_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), 16),
          _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                          _mm512_slli_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(0x3ff)), 13)));
      f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
    }
    return f;
  }
  // 16 floats -> 16 halves, round to nearest even. Finite values and infinities
  // match f32_to_f16 exactly; NaNs become the canonical sign|0x7e00 like dtype.h.
  static PREFIXD_VEC_INLINE __m256i f32_to_f16(T f) {
    __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    if (__builtin_expect(nan != 0, 0)) {
      __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                      _mm256_set1_epi16(0x7e00));
      h = _mm256_mask_mov_epi16(h, nan, canon);
    }
    return h;
  }
  // BF16 is the top half of an F32: exact.
  static PREFIXD_VEC_INLINE T bf16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // 16 floats -> 16 bf16 with dtype.h's integer rounding (vcvtneps2bf16 would
  // flush subnormal inputs to zero; this keeps them).
  static PREFIXD_VEC_INLINE __m256i f32_to_bf16(T f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    return _mm512_cvtepi32_epi16(r);
  }

  static PREFIXD_VEC_INLINE __m256i load16(const uint16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static PREFIXD_VEC_INLINE T load_f16(const uint16_t* p) { return f16_to_f32(load16(p)); }
  static PREFIXD_VEC_INLINE T load_f16_n(const uint16_t* p, int64_t n) {
    return f16_to_f32(_mm256_maskz_loadu_epi16(tail(n), p));
  }
  static PREFIXD_VEC_INLINE void store_f16(uint16_t* p, T v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), f32_to_f16(v));
  }
  static PREFIXD_VEC_INLINE void store_f16_n(uint16_t* p, T v, int64_t n) {
    _mm256_mask_storeu_epi16(p, tail(n), f32_to_f16(v));
  }
  static PREFIXD_VEC_INLINE T load_bf16(const uint16_t* p) { return bf16_to_f32(load16(p)); }
  static PREFIXD_VEC_INLINE T load_bf16_n(const uint16_t* p, int64_t n) {
    return bf16_to_f32(_mm256_maskz_loadu_epi16(tail(n), p));
  }
  static PREFIXD_VEC_INLINE void store_bf16(uint16_t* p, T v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), f32_to_bf16(v));
  }
  static PREFIXD_VEC_INLINE void store_bf16_n(uint16_t* p, T v, int64_t n) {
    _mm256_mask_storeu_epi16(p, tail(n), f32_to_bf16(v));
  }

  // N BF16 pairs (2N halves, pair-interleaved) -> the N even and N odd elements as F32.
  static PREFIXD_VEC_INLINE void load_bf16_pairs(const uint16_t* p, T& even, T& odd) {
    const __m512i u = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
#if defined(__AVX512BF16__)
  // acc += w_pairs · x_pair, N lanes of BF16 pair dot products (vdpbf16ps).
  static PREFIXD_VEC_INLINE T dot_bf16_pairs(T acc, const uint16_t* w_pairs, int32_t x_pair) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w_pairs), (__m512bh)_mm512_set1_epi32(x_pair));
  }
  // --- BF16 pair vectors: N lanes of two BF16 halves (low half first) -------
  using PairT = __m512i;
  static PREFIXD_VEC_INLINE PairT load_pairs(const uint16_t* p) { return _mm512_loadu_si512(p); }
  static PREFIXD_VEC_INLINE void store_pairs(uint16_t* p, PairT v) { _mm512_storeu_si512(p, v); }
  // acc += per lane lo*x.lo + hi*x.hi, x one pair broadcast to every lane.
  static PREFIXD_VEC_INLINE T dot_pairs(T acc, PairT a, int32_t x_pair) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)_mm512_set1_epi32(x_pair));
  }
  // Lane i = (bf16(lo[i]), bf16(hi[i])), rounded to nearest even
  // (vcvtne2ps2bf16, which flushes denormals to zero), then interleaved.
  static PREFIXD_VEC_INLINE PairT round_pairs(T lo, T hi) {
    const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo[0..15], then hi[0..15]
    const __m512i index =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(index, halves);
  }
  // Lane i = (lo[i], hi[i]) of N BF16 values each.
  static PREFIXD_VEC_INLINE PairT zip_bf16(const uint16_t* lo, const uint16_t* hi) {
    // The second vector's halves are index 32 onwards.
    const __m512i index = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                           40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                           32, 0);
    return _mm512_permutex2var_epi16(_mm512_castsi256_si512(load16(lo)), index,
                                     _mm512_castsi256_si512(load16(hi)));
  }
#endif
  // --- small integers of the block formats (N lanes of int32) ---------------
  using QI = __m512i;
  static PREFIXD_VEC_INLINE QI q_u8(const uint8_t* p) {  // N bytes, zero-extended
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static PREFIXD_VEC_INLINE QI q_i8(const int8_t* p) {  // N bytes, sign-extended
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static PREFIXD_VEC_INLINE QI q_and(QI a, int m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
  static PREFIXD_VEC_INLINE QI q_or(QI a, QI b) { return _mm512_or_si512(a, b); }
  static PREFIXD_VEC_INLINE QI q_sub(QI a, int c) { return _mm512_sub_epi32(a, _mm512_set1_epi32(c)); }
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shr(QI a) { return _mm512_srli_epi32(a, S); }
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shl(QI a) { return _mm512_slli_epi32(a, S); }
  static PREFIXD_VEC_INLINE QI q_shr_n(QI a, int s) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(s)); }
  // Lane i = bit (first + i) of word.
  static PREFIXD_VEC_INLINE QI q_bits(uint32_t word, int first) {
    const __m512i shift = _mm512_add_epi32(
        _mm512_set1_epi32(first), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shift), _mm512_set1_epi32(1));
  }
  static PREFIXD_VEC_INLINE T q_float(QI a) { return _mm512_cvtepi32_ps(a); }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
