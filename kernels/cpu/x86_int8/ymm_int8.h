// The 8-bit integer layer of the x86 sets in AVX2 instructions: 32 bytes of
// weights or activations in a ymm, their dot products summed per 4 bytes into
// 8 int32 lanes (vpmaddubsw + vpmaddwd) and returned as 8 floats. Each x86
// set's kernels.cpp derives its `I8` from this struct (or from YmmInt8Vnni,
// x86_int8/ymm_int8_vnni.h), adding its register tile; the integer matmul of
// generic/int8_gemm.h is written over I8.
// Included by the x86 sets' kernels.cpp only (AVX2, FMA and F16C at least).
#pragma once

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "x86_int8/ymm_int8.h needs AVX2, FMA and F16C (an x86 set)"
#endif

#include <immintrin.h>

#include <cstdint>

#include "kernels/quant/formats/k_scales.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

// Everything of I8 but its register tile: the set adds
//   static constexpr int kTileW, kTileX;  // int8_gemm.h's register tile: weight rows x
//                                         // activation rows (accumulators of 8 floats each)
struct YmmInt8 {
  using B = __m256i;  // 32 bytes
  using F = __m256;   // 8 floats

  static PREFIXD_VEC_INLINE B load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  // 16 bytes -> 32 values: the low nibbles (elements 0..15), then the high ones.
  static PREFIXD_VEC_INLINE B nibbles16(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
  }
  static PREFIXD_VEC_INLINE B lo4(B v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static PREFIXD_VEC_INLINE B hi4(B v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
  static PREFIXD_VEC_INLINE B and_c(B v, uint8_t m) { return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(m))); }
  static PREFIXD_VEC_INLINE B or_(B a, B b) { return _mm256_or_si256(a, b); }
  // Shifts of 16-bit lanes: the caller masks what crosses from the next byte.
  template <int S>
  static PREFIXD_VEC_INLINE B shr16(B v) { return _mm256_srli_epi16(v, S); }
  template <int S>
  static PREFIXD_VEC_INLINE B shl16(B v) { return _mm256_slli_epi16(v, S); }
  // Byte j = `value` where bit j of `word` is set, else 0 (Q5_0/Q5_1 high bits).
  static PREFIXD_VEC_INLINE B bits32(uint32_t word, uint8_t value) {
    const __m256i w = _mm256_set1_epi32(static_cast<int>(word));
    const __m256i spread = _mm256_shuffle_epi8(
        w, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
  }
  // Byte j = `value` where (v_j & bit) != 0, else 0 (Q5_K high bits).
  static PREFIXD_VEC_INLINE B test(B v, uint8_t bit, uint8_t value) {
    const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, b), b);
    return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
  }
  // Byte j = table16[idx_j] (idx bytes 0..15; the IQ4_NL code book), one vpshufb.
  static PREFIXD_VEC_INLINE B lut16(const int8_t* table16, B idx) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table16)));
    return _mm256_shuffle_epi8(t, idx);
  }
  static PREFIXD_VEC_INLINE B abs(B v) { return _mm256_abs_epi8(v); }
  // s with the sign of w applied (0 where w is 0): with abs(w), a signed dot.
  static PREFIXD_VEC_INLINE B sign(B s, B w) { return _mm256_sign_epi8(s, w); }

  // Lane l = sum over bytes 4l..4l+3 of u (unsigned, <= 128) * s (signed, >= -127), as floats.
  // vpmaddubsw's 16-bit pair sums stay below 2 * 128 * 127 = 32512: never saturate.
  // (YmmInt8Vnni: one vpdpbusd instead.)
  static PREFIXD_VEC_INLINE F dot(B u, B s) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }

  // A block's F16 scale (F16C; scales are finite in every valid file).
  static PREFIXD_VEC_INLINE float half(uint16_t h) { return _cvtsh_ss(h); }

  // Q4_K and Q5_K: the 8 six-bit scales and mins of the 12 packed bytes
  // (quant::scales_mins_k4, formats/k_scales.h): scales 0..7 in bytes 0..7,
  // mins in bytes 8..15.
  static PREFIXD_VEC_INLINE __m128i scales_mins_k4(const uint8_t* packed) {
    const quant::ScalesMinsK4 sm = quant::scales_mins_k4(packed);
    return _mm_set_epi64x(static_cast<long long>(sm.mins), static_cast<long long>(sm.scales));
  }

  // out[j] = p[j] * s for 8 unsigned bytes (K-format scales and mins).
  static PREFIXD_VEC_INLINE void scale_u8x8(const uint8_t* p, float s, float* out) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    _mm256_storeu_ps(out, _mm256_mul_ps(v, _mm256_set1_ps(s)));
  }
  // out[j] = p[j] * s for 16 signed bytes (Q6_K scales).
  static PREFIXD_VEC_INLINE void scale_i8x16(const int8_t* p, float s, float* out) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256 sv = _mm256_set1_ps(s);
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), sv));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))), sv));
  }

  // --- int32 accumulation with 16-bit scales (the K formats) ---
  using I = __m256i;  // 8 int32
  static PREFIXD_VEC_INLINE I izero() { return _mm256_setzero_si256(); }
  // acc + the pair sums of u * s (vpmaddubsw) times the 16-bit lanes of sc.
  static PREFIXD_VEC_INLINE I dot_scaled(B u, B s, B sc, I acc) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
  }
  static PREFIXD_VEC_INLINE F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  // 8 bytes widened to 16-bit lanes, the same 8 in both 16-byte halves.
  static PREFIXD_VEC_INLINE B widen_u8x8(const uint8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static PREFIXD_VEC_INLINE B widen_i8x8(const int8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // vpshufb: byte j of each 16-byte half = that half's byte mask[j] (masks < 16).
  static PREFIXD_VEC_INLINE B shuffle(B src, const uint8_t* mask) { return _mm256_shuffle_epi8(src, load(mask)); }
  // Sums of products of 8 (16) int16 pairs.
  static PREFIXD_VEC_INLINE int32_t dot_i16x8(const int16_t* a, const int16_t* b) {
    __m128i p = _mm_madd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)),
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4E));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xB1));
    return _mm_cvtsi128_si32(p);
  }
  static PREFIXD_VEC_INLINE int32_t dot_i16x16(const int16_t* a, const int16_t* b) {
    return hsum_i32(_mm256_madd_epi16(load(a), load(b)));
  }

  static PREFIXD_VEC_INLINE F zero() { return _mm256_setzero_ps(); }
  static PREFIXD_VEC_INLINE F set1(float f) { return _mm256_set1_ps(f); }
  static PREFIXD_VEC_INLINE F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static PREFIXD_VEC_INLINE F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static PREFIXD_VEC_INLINE float reduce(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // One block of 32 activations -> q (nearest-even of x / d), d = max|x| / 127, and
  // the sum of q. Bit-identical to the portable set's loop.
  static PREFIXD_VEC_INLINE void quantize32(const float* x, int8_t* q, float* d_out, int* sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i i[4];
    for (int j = 0; j < 4; ++j) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));  // MXCSR: nearest-even
    // Pack 32 int32 -> 32 int8 in order (packs work per 128-bit lane: fix the order after).
    const __m256i p01 = _mm256_packs_epi32(i[0], i[1]);
    const __m256i p23 = _mm256_packs_epi32(i[2], i[3]);
    __m256i b = _mm256_packs_epi16(p01, p23);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
    *d_out = d;
    *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  }

  // 256 activations -> q, d = max|x| / 127 over all 256, and the sums of q per 16
  // (the K formats' XQ8KBlock). Bit-identical to the portable set's loop.
  static PREFIXD_VEC_INLINE void quantize256(const float* x, int8_t* q, float* d_out, int16_t* sums16) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    for (int c = 0; c < 256; c += 32) {
      __m256i i[4];
      for (int j = 0; j < 4; ++j) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * j), idv));
      const __m256i b = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3])),
          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c), b);
      sums16[c / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(i[0], i[1])));
      sums16[c / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(i[2], i[3])));
    }
    *d_out = d;
  }

 private:
  static PREFIXD_VEC_INLINE int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
};

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
