// The AVX2 vector layer of the CPU kernels (AVX2 + FMA + F16C: Haswell and
// later, AMD Zen 1-3): 8 float lanes in a ymm, with F16/BF16 conversions
// bit-identical to kernels/dtype.h and a vectorised exp.
// Only kernels/cpu/avx2/kernels.cpp includes this file.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp2_poly.h"

#define PREFIXD_VEC_INLINE inline __attribute__((always_inline))

namespace prefixd::cpu::PREFIXD_ISA_NS {

struct Vec {
  using T = __m256;
  static constexpr int N = 8;
  // gemm: x rows per micro-tile and vectors per tile row (6 x 2 ymm = 12
  // accumulators of the 16 registers; a 32-wide panel is done in two halves).
  static constexpr int kGemmRows = 6;
  static constexpr int kGemmVecs = 2;
  // F32 panels are copied into per-thread scratch before many x rows use
  // them (each half-panel pass then hits one L2-resident buffer; pp512 on a
  // Zen 3 rose from about 500 to 530-590 t/s).
  static constexpr bool kCopyF32Panels = true;
  // attention: register tiles of 6 keys (or head-dim rows) x 2 lane groups
  // (12 accumulators), keys per online-softmax step.
  static constexpr int kAttnRowTile = 6;
  static constexpr int kAttnGroupTile = 2;
  static constexpr int kAttnChunk = 48;
  static constexpr int kRegisters = 16;  // vector registers of the target
  static constexpr bool kHasBf16Dot = false;

  // Lanes [0, n) set, n in [0, 8].
  static PREFIXD_VEC_INLINE __m256i tail(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static PREFIXD_VEC_INLINE T zero() { return _mm256_setzero_ps(); }
  static PREFIXD_VEC_INLINE T set1(float f) { return _mm256_set1_ps(f); }
  static PREFIXD_VEC_INLINE T load(const float* p) { return _mm256_loadu_ps(p); }
  static PREFIXD_VEC_INLINE void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static PREFIXD_VEC_INLINE T load_n(const float* p, int64_t n) {
    return n >= N ? load(p) : _mm256_maskload_ps(p, tail(n));
  }
  static PREFIXD_VEC_INLINE void store_n(float* p, T v, int64_t n) {
    if (n >= N) {
      store(p, v);
    } else {
      _mm256_maskstore_ps(p, tail(n), v);
    }
  }

  static PREFIXD_VEC_INLINE T add(T a, T b) { return _mm256_add_ps(a, b); }
  static PREFIXD_VEC_INLINE T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static PREFIXD_VEC_INLINE T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static PREFIXD_VEC_INLINE T div(T a, T b) { return _mm256_div_ps(a, b); }
  static PREFIXD_VEC_INLINE T max(T a, T b) { return _mm256_max_ps(a, b); }
  static PREFIXD_VEC_INLINE bool all_equal(T a, float c) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(c), _CMP_EQ_OQ)) == 0xff;
  }
  static PREFIXD_VEC_INLINE T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static PREFIXD_VEC_INLINE T fmsub(T a, T b, T c) { return _mm256_fmsub_ps(a, b, c); }
  static PREFIXD_VEC_INLINE float reduce_add(T a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static PREFIXD_VEC_INLINE T select_gt(T a, T b, T t, T f) {
    return _mm256_blendv_ps(f, t, _mm256_cmp_ps(a, b, _CMP_GT_OQ));
  }

  // exp(x) as in the AVX-512 set (same reduction and polynomial); 2^k is built
  // from its exponent bits, so inputs are clamped to 88 (exp(88) = 1.65e38)
  // where AVX-512's vscalefps reaches FLT_MAX. Lanes below -87.3 give 0.
  static PREFIXD_VEC_INLINE T exp(T x) {
    const T log2e = _mm256_set1_ps(1.44269504088896341f);
    const T ln2_hi = _mm256_set1_ps(0.693359375f);
    const T ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const T under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3365478515625f), _CMP_LT_OQ);
    T xc = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    xc = _mm256_max_ps(xc, _mm256_set1_ps(-87.3365478515625f));
    T k = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    T r = _mm256_fnmadd_ps(k, ln2_hi, xc);
    r = _mm256_fnmadd_ps(k, ln2_lo, r);
    T p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    T r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    T y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
  }

  // 2^x for x <= 0 (attention scores less their running max, in log2
  // units): the degree-5 polynomial of exp2_poly.h on r = x - floor(x), times
  // 2^floor(x) from its exponent bits. x is clamped to -127 first, whose
  // 2^-127 has zero exponent bits: -inf (and NaN) give 0.
  static PREFIXD_VEC_INLINE T exp2_nonpositive(T x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));  // vmaxps returns -127 for a NaN x
    const T k = _mm256_floor_ps(x);
    const T r = _mm256_sub_ps(x, k);
    T p = _mm256_set1_ps(kExp2Degree5[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 5; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExp2Degree5[i]));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }

  // 8 halves -> 8 floats; NaN lanes rebuilt so the payload stays (see avx512/vec.h).
  static PREFIXD_VEC_INLINE T f16_to_f32(__m128i h) {
    T f = _mm256_cvtph_ps(h);
    const __m256i hi = _mm256_cvtepu16_epi32(h);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    if (__builtin_expect(!_mm256_testz_si256(nan, nan), 0)) {
      const __m256i bits = _mm256_or_si256(
          _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), 16),
          _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                          _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x3ff)), 13)));
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
    }
    return f;
  }
  static PREFIXD_VEC_INLINE __m128i f32_to_f16(T f) {
    __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    if (__builtin_expect(_mm256_movemask_ps(nan) != 0, 0)) {
      const __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                         _mm_set1_epi16(0x7e00));
      // 32-bit lane mask -> 16-bit lane mask.
      const __m256i m32 = _mm256_castps_si256(nan);
      const __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
      h = _mm_blendv_epi8(h, canon, m16);
    }
    return h;
  }
  static PREFIXD_VEC_INLINE T bf16_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static PREFIXD_VEC_INLINE __m128i f32_to_bf16(T f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    r = _mm256_srli_epi32(r, 16);
    // NaN: unsigned (u & 0x7fffffff) > 0x7f800000 is a signed compare here (both non-negative).
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, qnan, nan);
    // Lanes hold 0..0xffff: unsigned saturation packs them exactly.
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }

  static PREFIXD_VEC_INLINE __m128i load8(const uint16_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static PREFIXD_VEC_INLINE __m128i load8_n(const uint16_t* p, int64_t n) {
    if (n >= N) return load8(p);
    alignas(16) uint16_t buf[8] = {};
    std::memcpy(buf, p, static_cast<size_t>(n) * 2);
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  static PREFIXD_VEC_INLINE void store8_n(uint16_t* p, __m128i h, int64_t n) {
    if (n >= N) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
      return;
    }
    alignas(16) uint16_t buf[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), h);
    std::memcpy(p, buf, static_cast<size_t>(n) * 2);
  }
  static PREFIXD_VEC_INLINE T load_f16(const uint16_t* p) { return f16_to_f32(load8(p)); }
  static PREFIXD_VEC_INLINE T load_f16_n(const uint16_t* p, int64_t n) { return f16_to_f32(load8_n(p, n)); }
  static PREFIXD_VEC_INLINE void store_f16(uint16_t* p, T v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), f32_to_f16(v));
  }
  static PREFIXD_VEC_INLINE void store_f16_n(uint16_t* p, T v, int64_t n) { store8_n(p, f32_to_f16(v), n); }
  static PREFIXD_VEC_INLINE T load_bf16(const uint16_t* p) { return bf16_to_f32(load8(p)); }
  static PREFIXD_VEC_INLINE T load_bf16_n(const uint16_t* p, int64_t n) { return bf16_to_f32(load8_n(p, n)); }
  static PREFIXD_VEC_INLINE void store_bf16(uint16_t* p, T v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), f32_to_bf16(v));
  }
  static PREFIXD_VEC_INLINE void store_bf16_n(uint16_t* p, T v, int64_t n) { store8_n(p, f32_to_bf16(v), n); }

  static PREFIXD_VEC_INLINE void load_bf16_pairs(const uint16_t* p, T& even, T& odd) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // --- small integers of the block formats (N lanes of int32) ---------------
  using QI = __m256i;
  static PREFIXD_VEC_INLINE QI q_u8(const uint8_t* p) {  // N bytes, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static PREFIXD_VEC_INLINE QI q_i8(const int8_t* p) {  // N bytes, sign-extended
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static PREFIXD_VEC_INLINE QI q_and(QI a, int m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
  static PREFIXD_VEC_INLINE QI q_or(QI a, QI b) { return _mm256_or_si256(a, b); }
  static PREFIXD_VEC_INLINE QI q_sub(QI a, int c) { return _mm256_sub_epi32(a, _mm256_set1_epi32(c)); }
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shr(QI a) { return _mm256_srli_epi32(a, S); }
  template <int S>
  static PREFIXD_VEC_INLINE QI q_shl(QI a) { return _mm256_slli_epi32(a, S); }
  static PREFIXD_VEC_INLINE QI q_shr_n(QI a, int s) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(s)); }
  // Lane i = bit (first + i) of word.
  static PREFIXD_VEC_INLINE QI q_bits(uint32_t word, int first) {
    const __m256i shift = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shift), _mm256_set1_epi32(1));
  }
  static PREFIXD_VEC_INLINE T q_float(QI a) { return _mm256_cvtepi32_ps(a); }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
