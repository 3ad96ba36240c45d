// Prefill products of Q6_K weights in 8-bit integers with AVX2, beside the
// 5-bit formats' int8 panels (int8_panels.h): Q6_K's own panel
// (x86_int8/q6k_panel.h) in register tiles of 3 x rows by 16 weight rows.
// vpmaddubsw multiplies x's bytes + 128 (unsigned, 1..255) by the signed
// values (-32..31) and sums byte pairs to 16 bits: a pair is at most
// 2 * 255 * 32 = 16320 in size, so two such sums still fit 16 bits before
// one vpmaddwd takes them to 32. Each output sums its groups, low half then
// high, in order, whatever the tile or call it is in.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2/int8_panels.h"
#include "kernels/cpu/x86_int8/q6k_panel.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel::q6k {

// acc[i][v] += the products of x row i's bytes of steps 4 vh + 2 p and the
// next (of group g) and weight rows 16 rh + 8 v .. + 7: two steps summed in
// 16 bits, then widened.
template <int R>
PREFIXD_VEC_INLINE void pair_steps(__m256i (&acc)[R][2], const uint8_t* pg, int vh, int p, int rh,
                                   const XQ8Block* xu, int64_t x_stride, int64_t g) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sum16[R][2];
  sum16_steps<R, 2, true>(sum16, pg + rh * 64, 4 * vh + 2 * p, xu, x_stride, g);
#pragma GCC unroll 3
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 2; ++v) acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(sum16[i][v], ones));
}

// y[i * ldy + j] for R x rows (XQ8Block rows x_stride apart, bytes + 128) and
// weight rows [16 rh, 16 rh + 16) of the panel, j < valid (its valid rows from 16 rh).
template <int R>
PREFIXD_VEC_INLINE void tile(const uint8_t* panel, int64_t n_groups, const XQ8Block* xu, int64_t x_stride, int rh,
                             float* y, int64_t ldy, int64_t valid) {
  __m256 f[R][2];
#pragma GCC unroll 3
  for (int i = 0; i < R; ++i) f[i][0] = f[i][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* pg = panel + g * kGroupBytes;
    const auto* s = reinterpret_cast<const float*>(pg + kQBytes) + 16 * rh;
    const auto* c = reinterpret_cast<const int32_t*>(pg + kQBytes + 2 * kRows * sizeof(float)) + 16 * rh;
#pragma GCC unroll 2
    for (int vh = 0; vh < 2; ++vh) {
      __m256i acc[R][2];
      const __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + vh * kRows));
      const __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + vh * kRows + 8));
#pragma GCC unroll 3
      for (int i = 0; i < R; ++i) {
        acc[i][0] = c0;
        acc[i][1] = c1;
      }
      pair_steps<R>(acc, pg, vh, 0, rh, xu, x_stride, g);
      pair_steps<R>(acc, pg, vh, 1, rh, xu, x_stride, g);
      const __m256 s0 = _mm256_load_ps(s + vh * kRows), s1 = _mm256_load_ps(s + vh * kRows + 8);
#pragma GCC unroll 3
      for (int i = 0; i < R; ++i) {
        const __m256 dx = _mm256_set1_ps(xu[i * x_stride + g].d);
        f[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][0]), _mm256_mul_ps(s0, dx), f[i][0]);
        f[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][1]), _mm256_mul_ps(s1, dx), f[i][1]);
      }
    }
  }
  store_tile<R>(f, y, ldy, valid);
}

// y rows [i0, i1) x output columns of the Q6_K row groups [p0, p1), from a.xqu.
// scratch: gemm_scratch_floats(cols) floats (136 cols bytes >= 48 cols + 64).
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t n_groups = a.cols / 32;
  each_panel(a, p0, p1, scratch, [&](const uint8_t* panel, int64_t r_begin, int64_t valid) {
    for (int rh = 0; rh < 2 && 16 * rh < valid; ++rh) {
      float* y = a.y + r_begin + 16 * rh;
      each_tile(i0, i1, [&]<int R>(int64_t i) {
        tile<R>(panel, n_groups, a.xqu + i * n_groups, n_groups, rh, y + i * a.rows, a.rows, valid - 16 * rh);
      });
    }
  });
}

}  // namespace i8panel::q6k

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/x86_int8/q6k_dispatch.h"  // the set's int8 panel entries, Q6_K's among them
