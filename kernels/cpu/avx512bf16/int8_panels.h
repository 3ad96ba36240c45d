// Prefill products of block-format weights in 8-bit integers with AVX512_VNNI
// (vpdpbusd: 64 byte products summed into 16 int32 lanes per instruction, twice
// the multiply-adds of vdpbf16ps at the same rate): every x row (quantized per
// 32 to XQ8Block, as decode does) runs over an int8 panel (generic/
// int8_panel_layout.h) in register tiles of 6 x rows by 32 weight rows. Only
// the avx512bf16 set (built with AVX512_VNNI) includes this file; gemm.cpp
// sends it calls of kInt8MaxRows x rows or more. Measured on a Zen 5 core,
// L1-resident: 395 GMAC/s against 225 for the BF16 tiles.
// Each output sums its groups in order, whatever the tile or call it is in.
#pragma once

#if !defined(__AVX512VNNI__)
#error "avx512bf16/int8_panels.h needs AVX512_VNNI (the avx512bf16 set)"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_panel_layout.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel {

constexpr int kTileX = 6;  // x rows per register tile: 12 int32 + 12 f32 accumulators

// Every int8 panel format: the unsigned operand of vpdpbusd is the weights'.
inline bool takes(WeightType t) {
  return with_format(t, []<class>() {});
}

// acc[i][v] += the products of x row i's bytes 4t .. 4t + 3 (of group g) and
// the panel group's step t (weight rows 16v .. 16v + 15), summed per 4.
// kXUnsigned: x's bytes are vpdpbusd's unsigned operand (Q6_K's panel), else
// the weights' are.
template <int R, bool kXUnsigned>
PREFIXD_VEC_INLINE void dot_step(__m512i (&acc)[R][2], const uint8_t* pg, int t, const XQ8Block* x, int64_t x_stride,
                                 int64_t g) {
  const __m512i w0 = _mm512_load_si512(pg + t * 128), w1 = _mm512_load_si512(pg + t * 128 + 64);
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    int32_t four;
    std::memcpy(&four, x[i * x_stride + g].q + 4 * t, 4);
    const __m512i xv = _mm512_set1_epi32(four);
    if constexpr (kXUnsigned) {
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], xv, w0);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], xv, w1);
    } else {
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, xv);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, xv);
    }
  }
}

// y[i * ldy + j] = f[i][j / 16][j % 16] for R rows, j < valid (of 32).
template <int R>
PREFIXD_VEC_INLINE void store_tile(const __m512 (&f)[R][2], float* y, int64_t ldy, int64_t valid) {
  const __mmask16 k0 = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 k1 = valid >= 32 ? 0xFFFF : valid <= 16 ? 0 : static_cast<__mmask16>((1u << (valid - 16)) - 1);
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, k0, f[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, k1, f[i][1]);
  }
}

// y[i * ldy + j] for R x rows (XQ8Block rows x_stride apart) and the panel's
// first `valid` weight rows.
template <int R>
PREFIXD_VEC_INLINE void tile(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t x_stride,
                             float* y, int64_t ldy, int64_t valid) {
  __m512 f[R][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* pg = panel + g * kGroupBytes;
    __m512i acc[R][2];
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) dot_step<R, false>(acc, pg, t, x, x_stride, g);
    const auto* sm = reinterpret_cast<const float*>(pg + kQBytes);
    const __m512 s0 = _mm512_load_ps(sm), s1 = _mm512_load_ps(sm + 16);
    const __m512 m0 = _mm512_load_ps(sm + kRows), m1 = _mm512_load_ps(sm + kRows + 16);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const XQ8Block& xb = x[i * x_stride + g];
      const __m512 dx = _mm512_set1_ps(xb.d), ds = _mm512_set1_ps(xb.ds);
      f[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][0]), _mm512_mul_ps(s0, dx), f[i][0]);
      f[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][1]), _mm512_mul_ps(s1, dx), f[i][1]);
      f[i][0] = _mm512_fmadd_ps(m0, ds, f[i][0]);
      f[i][1] = _mm512_fmadd_ps(m1, ds, f[i][1]);
    }
  }
  store_tile<R>(f, y, ldy, valid);
}

// tile_at.template operator()<R>(i) for x rows [i0, i1): whole tiles of
// kTileX rows from i0, then one of the rest (R < kTileX).
template <class TileAt>
PREFIXD_VEC_INLINE void each_tile(int64_t i0, int64_t i1, TileAt&& tile_at) {
  int64_t i = i0;
  for (; i + kTileX <= i1; i += kTileX) tile_at.template operator()<kTileX>(i);
  switch (i1 - i) {
    case 5: tile_at.template operator()<5>(i); break;
    case 4: tile_at.template operator()<4>(i); break;
    case 3: tile_at.template operator()<3>(i); break;
    case 2: tile_at.template operator()<2>(i); break;
    case 1: tile_at.template operator()<1>(i); break;
    default: break;
  }
}

// x rows [i0, i1) over one panel.
inline void panel_rows(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t i0, int64_t i1,
                       float* y, int64_t ldy, int64_t valid) {
  each_tile(i0, i1, [&]<int R>(int64_t i) { tile<R>(panel, n_groups, x + i * n_groups, n_groups, y + i * ldy, ldy, valid); });
}

// y rows [i0, i1) x output columns of the row groups [p0, p1), from a.xq;
// takes(a.row_type). scratch: gemm_scratch_floats(cols) floats.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t n_groups = a.cols / 32;
  const bool known = each_panel(a, p0, p1, scratch, [&](const uint8_t* panel, int64_t r_begin, int64_t valid) {
    panel_rows(panel, n_groups, a.xq, i0, i1, a.y + r_begin, a.rows, valid);
  });
  PREFIXD_CHECK(known, "int8 panels: a type without one");
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
