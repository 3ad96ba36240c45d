// Prefill products of block-format weights in 8-bit integers with AVX2
// (vpmaddubsw + vpmaddwd): every x row (quantized per 32 to XQ8Block, as
// decode does) runs over an int8 panel (generic/int8_panel_layout.h) in
// register tiles of 3 x rows by 16 weight rows. vpmaddubsw sums byte pairs to
// 16 bits; with weights of at most 5 bits (0..31) and x in -127..127 four such
// sums stay below 2^15 (4 * 2 * 31 * 127 = 31496), so they add in 16 bits
// before one vpmaddwd: 17 integer instructions per 256 multiply-adds, where the
// F32 panels take 32 FMAs. Q8_0 and IQ4_NL (8-bit values) would overflow: they
// keep the F32 panels. Only the avx2 set includes this file (avx512bf16 takes its
// VNNI panels, avx512 none); gemm.cpp sends it calls of kInt8MaxRows x rows or more.
// Each output sums its groups in order, whatever the tile or call it is in.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_panel_layout.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel {

constexpr int kTileX = 3;  // x rows per register tile: 6 f32 + 6 16-bit accumulators

// The int8 panel formats whose values fit in 5 bits (not the signed Q8_0, IQ4_NL).
inline bool takes(WeightType t) {
  bool five_bits = false;
  return with_format(t, [&]<class Fmt>() { five_bits = !signed_bytes<Fmt>(); }) && five_bits;
}

// sum16[i][v] = the products of x row i's bytes 4t .. 4t + 3 (of group g)
// and the panel's steps t in [t0, t0 + N) (pg: the group at the tile's 16
// weight rows; v: rows 8v .. 8v + 7), summed in 16 bits, which N steps of
// the format's values must fit. kXUnsigned: x's bytes are vpmaddubsw's
// unsigned operand (Q6_K's panel), else the weights' are.
template <int R, int N, bool kXUnsigned>
PREFIXD_VEC_INLINE void sum16_steps(__m256i (&sum16)[R][2], const uint8_t* pg, int t0, const XQ8Block* x,
                                    int64_t x_stride, int64_t g) {
#pragma GCC unroll 4
  for (int tt = 0; tt < N; ++tt) {
    const int t = t0 + tt;
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pg + t * 128));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pg + t * 128 + 32));
#pragma GCC unroll 3
    for (int i = 0; i < R; ++i) {
      int32_t four;
      std::memcpy(&four, x[i * x_stride + g].q + 4 * t, 4);
      const __m256i xv = _mm256_set1_epi32(four);
      const __m256i p0 = kXUnsigned ? _mm256_maddubs_epi16(xv, w0) : _mm256_maddubs_epi16(w0, xv);
      const __m256i p1 = kXUnsigned ? _mm256_maddubs_epi16(xv, w1) : _mm256_maddubs_epi16(w1, xv);
      sum16[i][0] = tt == 0 ? p0 : _mm256_add_epi16(sum16[i][0], p0);
      sum16[i][1] = tt == 0 ? p1 : _mm256_add_epi16(sum16[i][1], p1);
    }
  }
}

// y[i * ldy + j] = f[i][j / 8][j % 8] for R rows, j < valid (of 16).
template <int R>
PREFIXD_VEC_INLINE void store_tile(const __m256 (&f)[R][2], float* y, int64_t ldy, int64_t valid) {
  for (int i = 0; i < R; ++i) {
    if (valid >= 16) {
      _mm256_storeu_ps(y + i * ldy, f[i][0]);
      _mm256_storeu_ps(y + i * ldy + 8, f[i][1]);
    } else {
      alignas(32) float out[16];
      _mm256_store_ps(out, f[i][0]);
      _mm256_store_ps(out + 8, f[i][1]);
      std::memcpy(y + i * ldy, out, valid * sizeof(float));
    }
  }
}

// tile_at.template operator()<R>(i) for x rows [i0, i1): whole tiles of
// kTileX rows from i0, then one of the rest (R < kTileX).
template <class TileAt>
PREFIXD_VEC_INLINE void each_tile(int64_t i0, int64_t i1, TileAt&& tile_at) {
  int64_t i = i0;
  for (; i + kTileX <= i1; i += kTileX) tile_at.template operator()<kTileX>(i);
  if (i1 - i == 2) tile_at.template operator()<2>(i);
  if (i1 - i == 1) tile_at.template operator()<1>(i);
}

// y[i * ldy + j] for R x rows (XQ8Block rows x_stride apart) and weight rows
// [16 h, 16 h + 16) of the panel, j < valid (the panel's valid rows from 16 h).
template <int R>
PREFIXD_VEC_INLINE void tile(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t x_stride, int h,
                             float* y, int64_t ldy, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f[R][2];
#pragma GCC unroll 3
  for (int i = 0; i < R; ++i) f[i][0] = f[i][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* pg = panel + g * kGroupBytes + h * 64;
    __m256i sum32[R][2];
#pragma GCC unroll 2
    for (int part = 0; part < 2; ++part) {
      __m256i sum16[R][2];
      sum16_steps<R, 4, false>(sum16, pg, 4 * part, x, x_stride, g);
#pragma GCC unroll 3
      for (int i = 0; i < R; ++i)
        for (int v = 0; v < 2; ++v) {
          const __m256i s = _mm256_madd_epi16(sum16[i][v], ones);
          sum32[i][v] = part == 0 ? s : _mm256_add_epi32(sum32[i][v], s);
        }
    }
    const auto* sm = reinterpret_cast<const float*>(panel + g * kGroupBytes + kQBytes) + 16 * h;
    const __m256 s0 = _mm256_load_ps(sm), s1 = _mm256_load_ps(sm + 8);
    const __m256 m0 = _mm256_load_ps(sm + kRows), m1 = _mm256_load_ps(sm + kRows + 8);
#pragma GCC unroll 3
    for (int i = 0; i < R; ++i) {
      const XQ8Block& xb = x[i * x_stride + g];
      const __m256 dx = _mm256_set1_ps(xb.d), ds = _mm256_set1_ps(xb.ds);
      f[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum32[i][0]), _mm256_mul_ps(s0, dx), f[i][0]);
      f[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum32[i][1]), _mm256_mul_ps(s1, dx), f[i][1]);
      f[i][0] = _mm256_fmadd_ps(m0, ds, f[i][0]);
      f[i][1] = _mm256_fmadd_ps(m1, ds, f[i][1]);
    }
  }
  store_tile<R>(f, y, ldy, valid);
}

// x rows [i0, i1) over one half of a panel: whole tiles of kTileX, then one of the rest.
inline void half_rows(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t i0, int64_t i1, int h,
                      float* y, int64_t ldy, int64_t valid) {
  each_tile(i0, i1, [&]<int R>(int64_t i) {
    tile<R>(panel, n_groups, x + i * n_groups, n_groups, h, y + i * ldy, ldy, valid);
  });
}

// y rows [i0, i1) x output columns of the row groups [p0, p1), from a.xq;
// takes(a.row_type). scratch: gemm_scratch_floats(cols) floats.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t n_groups = a.cols / 32;
  const bool known = each_panel(a, p0, p1, scratch, [&](const uint8_t* panel, int64_t r_begin, int64_t valid) {
    for (int h = 0; h < 2 && 16 * h < valid; ++h)
      half_rows(panel, n_groups, a.xq, i0, i1, h, a.y + r_begin + 16 * h, a.rows, valid - 16 * h);
  });
  PREFIXD_CHECK(known, "int8 panels: a type without one");
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
