// Prefill products of block-format weights in 8-bit integers on the AMX tiles
// (TDPBSUD: signed x bytes times unsigned weight bytes, int32 sums). The int8
// panel (generic/int8_panel_layout.h) is already the B operand's layout: a
// 32-value group's q[8][32][4] is two B tiles of 8 rows (weight rows 0-15 and
// 16-31, rows 128 bytes apart); the x rows' XQ8Blocks of that group are the A
// operand (32 bytes a row, one XQ8Block row apart). One tile product per group
// and x-row block, since each group has its own scales: the int32 tiles go to
// memory and the zmm registers apply the group's scales as the avx512bf16 set's
// VNNI tiles do, in the same order (avx512bf16/int8_panels.h): the integer sums
// are exact, so every output equals that set's bit for bit.
// Included by kernels/cpu/amx/kernels.cpp only, after avx512bf16/int8_panels.h.
#pragma once

#if !defined(__AMX_INT8__)
#error "amx/int8_tiles.h needs AMX-INT8 (the amx set)"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/amx/tile_config.h"
#include "kernels/cpu/generic/int8_panel_layout.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace int8_tiles {

constexpr int kTileRows = 16;  // x rows per A tile
constexpr int64_t kCols = i8panel::kRows;  // weight rows of a panel: two tiles of 16

// Tiles: 0, 1 = x rows [0, m0) x weight rows 0-15 / 16-31; 2, 3 = x rows
// [16, 16 + m1); 4, 5 = the A tiles of those rows (32 bytes: one group);
// 6, 7 = the B tiles (8 rows of 4 values per weight row).
inline tiles::TileConfig config(int m0, int m1) {
  tiles::TileConfig c;
  for (int t : {0, 1}) c.set(t, m0, 64);
  for (int t : {2, 3}) c.set(t, m1, 64);
  c.set(4, m0, 32);
  c.set(5, m1, 32);
  c.set(6, 8, 64);
  c.set(7, 8, 64);
  return c;
}

// Group g's sums of an x-row block: (2 * kTileRows, kCols) int32.
using Sums = int32_t[2 * kTileRows][kCols];

// The tile products of group g into `c` (rows past m0 + m1 not written).
template <bool kTwo>
PREFIXD_VEC_INLINE void group_sums(const uint8_t* pg, const XQ8Block* x, int64_t x_stride, int64_t g,
                                   int64_t x_bytes, Sums& c) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(6, pg, 128);
  _tile_loadd(7, pg + 64, 128);
  _tile_loadd(4, x[g].q, x_bytes);
  _tile_dpbsud(0, 4, 6);
  _tile_dpbsud(1, 4, 7);
  _tile_stored(0, c[0], kCols * 4);
  _tile_stored(1, c[0] + 16, kCols * 4);
  if constexpr (kTwo) {
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(5, x[kTileRows * x_stride + g].q, x_bytes);
    _tile_dpbsud(2, 5, 6);
    _tile_dpbsud(3, 5, 7);
    _tile_stored(2, c[kTileRows], kCols * 4);
    _tile_stored(3, c[kTileRows] + 16, kCols * 4);
  }
}

// f[i] += group g's sums scaled, as avx512bf16/int8_panels.h's tile does (the same operations in the same order).
PREFIXD_VEC_INLINE void scale_group(const uint8_t* pg, const XQ8Block* x, int64_t x_stride, int64_t g,
                                    const Sums& c, __m512 (*f)[2], int m) {
  const auto* sm = reinterpret_cast<const float*>(pg + i8panel::kQBytes);
  const __m512 s0 = _mm512_load_ps(sm), s1 = _mm512_load_ps(sm + 16);
  const __m512 m0 = _mm512_load_ps(sm + kCols), m1 = _mm512_load_ps(sm + kCols + 16);
  for (int i = 0; i < m; ++i) {
    const XQ8Block& xb = x[i * x_stride + g];
    const __m512 dx = _mm512_set1_ps(xb.d), ds = _mm512_set1_ps(xb.ds);
    const __m512i acc0 = _mm512_load_si512(c[i]), acc1 = _mm512_load_si512(c[i] + 16);
    f[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc0), _mm512_mul_ps(s0, dx), f[i][0]);
    f[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), _mm512_mul_ps(s1, dx), f[i][1]);
    f[i][0] = _mm512_fmadd_ps(m0, ds, f[i][0]);
    f[i][1] = _mm512_fmadd_ps(m1, ds, f[i][1]);
  }
}

// y (m = m0 + m1, valid) for x rows of XQ8Blocks (x_stride blocks apart) over
// one panel of n_groups groups. The tiles run one group ahead of the scaling:
// group g's sums are stored while group g - 1's, stored a group earlier, are
// read back into zmm (reading a tile store at once stalls on it).
template <bool kTwo>
PREFIXD_VEC_INLINE void block(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t x_stride,
                              float* y, int64_t ldy, int64_t valid, int m) {
  alignas(64) Sums c[2];                // groups g and g - 1
  __m512 f[2 * kTileRows][2];           // the outputs (the compiler keeps them in memory)
  for (int i = 0; i < m; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  const int64_t x_bytes = x_stride * static_cast<int64_t>(sizeof(XQ8Block));
  for (int64_t g = 0; g <= n_groups; ++g) {
    if (g < n_groups) group_sums<kTwo>(panel + g * i8panel::kGroupBytes, x, x_stride, g, x_bytes, c[g & 1]);
    if (g > 0) scale_group(panel + (g - 1) * i8panel::kGroupBytes, x, x_stride, g - 1, c[(g - 1) & 1], f, m);
  }
  const __mmask16 k0 = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 k1 = valid >= 32 ? 0xFFFF : valid <= 16 ? 0 : static_cast<__mmask16>((1u << (valid - 16)) - 1);
  for (int i = 0; i < m; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, k0, f[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, k1, f[i][1]);
  }
}

// x rows [i0, i1) (XQ8Block rows of n_groups) over one panel, 32 at a time.
inline void panel_rows(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t i0, int64_t i1,
                       float* y, int64_t ldy, int64_t valid) {
  for (int64_t i = i0; i < i1; i += 2 * kTileRows) {
    const int m = static_cast<int>(std::min<int64_t>(2 * kTileRows, i1 - i));
    const int m0 = std::min(m, kTileRows), m1 = m - m0;
    const XQ8Block* xi = x + i * n_groups;
    float* yi = y + i * ldy;
    tiles::use_config(config(m0, m1));
    if (m1 > 0) {
      block<true>(panel, n_groups, xi, n_groups, yi, ldy, valid, m);
    } else {
      block<false>(panel, n_groups, xi, n_groups, yi, ldy, valid, m);
    }
  }
}

// y rows [i0, i1) x output columns of the row groups [p0, p1), from a.xq;
// i8panel::takes(a.row_type). scratch: gemm_scratch_floats(cols) floats.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t n_groups = a.cols / 32;
  const bool known = i8panel::each_panel(a, p0, p1, scratch, [&](const uint8_t* panel, int64_t r_begin, int64_t valid) {
    panel_rows(panel, n_groups, a.xq, i0, i1, a.y + r_begin, a.rows, valid);
  });
  PREFIXD_CHECK(known, "int8 panels: a type without one");
}

}  // namespace int8_tiles

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
