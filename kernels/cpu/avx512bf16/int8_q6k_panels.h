// Prefill products of Q6_K weights in 8-bit integers with AVX512_VNNI, beside
// the other formats' int8 panels (int8_panels.h): Q6_K's own panel
// (x86_int8/q6k_panel.h) in register tiles of 6 x rows by 32 weight rows,
// vpdpbusd with x's bytes + 128 as the unsigned operand. The avx512bf16 set
// takes it (x86_int8/q6k_dispatch.h); the amx set's tile unit runs the
// shared panel only, so there Q6_K keeps the BF16 panels. Each output sums its
// groups, low half then high, in order, whatever the tile or call it is in.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512bf16/int8_panels.h"
#include "kernels/cpu/x86_int8/q6k_panel.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel::q6k {

// y[i * ldy + j] for R x rows (XQ8Block rows x_stride apart, bytes + 128) and
// the panel's first `valid` weight rows.
template <int R>
PREFIXD_VEC_INLINE void tile(const uint8_t* panel, int64_t n_groups, const XQ8Block* xu, int64_t x_stride, float* y,
                             int64_t ldy, int64_t valid) {
  __m512 f[R][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* pg = panel + g * kGroupBytes;
    const auto* s = reinterpret_cast<const float*>(pg + kQBytes);
    const auto* c = reinterpret_cast<const int32_t*>(pg + kQBytes + 2 * kRows * sizeof(float));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i acc[R][2];
      const __m512i c0 = _mm512_load_si512(c + h * kRows), c1 = _mm512_load_si512(c + h * kRows + 16);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        acc[i][0] = c0;
        acc[i][1] = c1;
      }
#pragma GCC unroll 4
      for (int t = 4 * h; t < 4 * h + 4; ++t) dot_step<R, true>(acc, pg, t, xu, x_stride, g);
      const __m512 s0 = _mm512_load_ps(s + h * kRows), s1 = _mm512_load_ps(s + h * kRows + 16);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        const __m512 dx = _mm512_set1_ps(xu[i * x_stride + g].d);
        f[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][0]), _mm512_mul_ps(s0, dx), f[i][0]);
        f[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][1]), _mm512_mul_ps(s1, dx), f[i][1]);
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
    float* y = a.y + r_begin;
    each_tile(i0, i1, [&]<int R>(int64_t i) {
      tile<R>(panel, n_groups, a.xqu + i * n_groups, n_groups, y + i * a.rows, a.rows, valid);
    });
  });
}

}  // namespace i8panel::q6k

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#include "kernels/cpu/x86_int8/q6k_dispatch.h"  // the set's int8 panel entries, Q6_K's among them
