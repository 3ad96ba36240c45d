// AVX-512 helpers of the CPU backend: F16/BF16 <-> F32 conversions that give
// bit-identical results to kernels/dtype.h (tested exhaustively), and a
// vectorised exp for softmax.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12 reports its own _mm512_undefined_* temporaries in avx512fintrin.h as
// maybe-uninitialized when masked intrinsics inline; a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace prefixd::cpu::simd {

// 16 halves -> 16 floats. vcvtph2ps quiets signalling NaNs; dtype.h keeps the
// payload unchanged, so NaN lanes are rebuilt by hand.
inline __m512 f16x16_to_f32(__m256i h) {
  __m512 f = _mm512_cvtph_ps(h);
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
inline __m512 load_f16(const uint16_t* p) {
  return f16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 maskz_load_f16(__mmask16 m, const uint16_t* p) {
  return f16x16_to_f32(_mm256_maskz_loadu_epi16(m, p));
}

// 16 floats -> 16 halves, round to nearest even. Finite values and infinities
// match f32_to_f16 exactly; NaNs become the canonical sign|0x7e00 like dtype.h.
inline __m256i f32_to_f16x16(__m512 f) {
  __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (__builtin_expect(nan != 0, 0)) {
    __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                    _mm256_set1_epi16(0x7e00));
    h = _mm256_mask_mov_epi16(h, nan, canon);
  }
  return h;
}
inline void store_f16(uint16_t* p, __m512 f) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), f32_to_f16x16(f));
}
inline void mask_store_f16(uint16_t* p, __mmask16 m, __m512 f) {
  _mm256_mask_storeu_epi16(p, m, f32_to_f16x16(f));
}

// BF16 is the top half of an F32: exact.
inline __m512 bf16x16_to_f32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load_bf16(const uint16_t* p) {
  return bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 maskz_load_bf16(__mmask16 m, const uint16_t* p) {
  return bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, p));
}

// 16 floats -> 16 bf16 with dtype.h's integer rounding (vcvtneps2bf16 would
// flush subnormal inputs to zero; this keeps them).
inline __m256i f32_to_bf16x16(__m512 f) {
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
inline void store_bf16(uint16_t* p, __m512 f) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), f32_to_bf16x16(f));
}
inline void mask_store_bf16(uint16_t* p, __mmask16 m, __m512 f) {
  _mm256_mask_storeu_epi16(p, m, f32_to_bf16x16(f));
}

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x) for 16 lanes: range reduction x = k*ln2 + r, |r| <= ln2/2, degree-6
// polynomial on r; relative error ~2 ulp. Lanes below -87.3 (and -inf) give 0.
inline __m512 exp(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  __m512 xc = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
  __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365478515625f), _CMP_LT_OQ);
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, ln2_hi, xc);
  r = _mm512_fnmadd_ps(k, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 y = _mm512_scalef_ps(p, k);  // p * 2^k, handles the exponent range
  return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
}

}  // namespace prefixd::cpu::simd
