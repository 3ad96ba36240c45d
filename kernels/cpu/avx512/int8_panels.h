// Prefill products of block-format weights in 8-bit integers with AVX512_VNNI
// (vpdpbusd: 64 byte products summed into 16 int32 lanes per instruction, twice
// the multiply-adds of vdpbf16ps at the same rate). A group of 32 weight rows
// is unpacked once per call into an int8 panel, then every x row (quantized per
// 32 to XQ8Block, as decode does) runs over it in register tiles of 6 x rows
// by 32 weight rows. Only the avx512bf16 set (built with AVX512_VNNI) includes
// this file; gemm.cpp sends it calls of kInt8MaxRows x rows or more on
// int8_panel_type rows (cpu_kernels.h). Measured on a Zen 5 core, L1-resident:
// 395 GMAC/s against 225 for the BF16 tiles.
//
// Panel layout, per 32-value group g of the weight rows (kGroupBytes each):
//   q[8][32][4] u8  -- q[t][r][b] is value 4t + b of row r in the group
//   s[32]  f32      -- row r's value = s[r] * q + m[r]
//   m[32]  f32
// Formats with signed values (Q8_0) store q + 128 and m = -128 s.
// Each output sums its groups in order, whatever the tile or call it is in.
#pragma once

#if defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/int8_gemm.h"
#include "kernels/quant/quant_blocks.h"

#define PREFIXD_HAS_INT8_PANELS 1

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel {

using i8gemm::B;
using i8gemm::KUnpacked;
using i8gemm::scales_mins_k4;

constexpr int64_t kRows = kGemmPanel;  // weight rows per panel (32: two 16-lane vectors)
constexpr int64_t kGroupBytes = 8 * kRows * 4 + 2 * kRows * sizeof(float);
constexpr int kTileX = 6;  // x rows per register tile: 12 int32 + 12 f32 accumulators

// Panel bytes for `cols` columns (a multiple of 32), plus 64 for alignment.
inline size_t panel_bytes(int64_t cols) { return static_cast<size_t>(cols / 32) * kGroupBytes + 64; }

// One 32-value group of one weight row as unsigned bytes q and w = s * q + m.
struct Group {
  __m256i q;
  float s, m;
};

// The groups of block b of a row: 1 for the 32-value formats, 8 for Q4_K/Q5_K.
template <class Fmt>
PREFIXD_VEC_INLINE int unpack_block(const typename Fmt::Block& b, Group* g) {
  if constexpr (Fmt::kSuper) {
    KUnpacked u;
    Fmt::unpack(b, u);
    uint8_t sc[8], mn[8];
    scales_mins_k4(b.scales, sc, mn);
    for (int k = 0; k < 8; ++k) g[k] = {u.q[k], u.d * sc[k], -u.dmin * mn[k]};
    return 8;
  } else {
    B q[1];
    float sc[1], mn[1] = {0.0f};
    Fmt::unpack(b, q, sc, mn);
    if constexpr (Fmt::kSigned) {
      g[0] = {_mm256_xor_si256(q[0], _mm256_set1_epi8(static_cast<char>(0x80))), sc[0], -128.0f * sc[0]};
    } else {
      g[0] = {q[0], sc[0], mn[0]};
    }
    return 1;
  }
}

// Weight rows [r0, r0 + valid) -> panel (layout above); rows past `valid` zero.
template <class Fmt>
void build_panel(const GemmArgs& a, int64_t r0, int64_t valid, uint8_t* panel) {
  using Block = typename Fmt::Block;
  const int64_t n_groups = a.cols / 32;
  constexpr int kPerBlock = Fmt::kSuper ? 8 : 1;
  const int64_t n_blocks = n_groups / kPerBlock;
  if (valid < kRows) {
    for (int64_t g = 0; g < n_groups; ++g) std::memset(panel + g * kGroupBytes, 0, kGroupBytes);
  }
  for (int64_t r = 0; r < valid; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.rows_data + (r0 + r) * a.row_bytes);
    for (int64_t b = 0; b < n_blocks; ++b) {
      Group groups[8];
      const int n = unpack_block<Fmt>(blocks[b], groups);
      for (int k = 0; k < n; ++k) {
        uint8_t* pg = panel + (b * kPerBlock + k) * kGroupBytes;
        alignas(32) uint32_t words[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(words), groups[k].q);
        auto* q = reinterpret_cast<uint32_t*>(pg);
        for (int t = 0; t < 8; ++t) q[t * kRows + r] = words[t];
        auto* s = reinterpret_cast<float*>(pg + 8 * kRows * 4);
        s[r] = groups[k].s;
        s[kRows + r] = groups[k].m;
      }
    }
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
    for (int t = 0; t < 8; ++t) {
      const __m512i w0 = _mm512_load_si512(pg + t * 128), w1 = _mm512_load_si512(pg + t * 128 + 64);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        int32_t four;
        std::memcpy(&four, x[i * x_stride + g].q + 4 * t, 4);
        const __m512i xv = _mm512_set1_epi32(four);
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, xv);
        acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, xv);
      }
    }
    const auto* sm = reinterpret_cast<const float*>(pg + 8 * kRows * 4);
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
  const __mmask16 k0 = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 k1 = valid >= 32 ? 0xFFFF : valid <= 16 ? 0 : static_cast<__mmask16>((1u << (valid - 16)) - 1);
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, k0, f[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, k1, f[i][1]);
  }
}

// x rows [i0, i1) over one panel: whole tiles of kTileX, then one of the rest.
inline void panel_rows(const uint8_t* panel, int64_t n_groups, const XQ8Block* x, int64_t i0, int64_t i1,
                       float* y, int64_t ldy, int64_t valid) {
  int64_t i = i0;
  for (; i + kTileX <= i1; i += kTileX) tile<kTileX>(panel, n_groups, x + i * n_groups, n_groups, y + i * ldy, ldy, valid);
  const XQ8Block* xr = x + i * n_groups;
  float* yr = y + i * ldy;
  switch (i1 - i) {
    case 5: tile<5>(panel, n_groups, xr, n_groups, yr, ldy, valid); break;
    case 4: tile<4>(panel, n_groups, xr, n_groups, yr, ldy, valid); break;
    case 3: tile<3>(panel, n_groups, xr, n_groups, yr, ldy, valid); break;
    case 2: tile<2>(panel, n_groups, xr, n_groups, yr, ldy, valid); break;
    case 1: tile<1>(panel, n_groups, xr, n_groups, yr, ldy, valid); break;
    default: break;
  }
}

template <class Fmt>
void rows_fmt(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, uint8_t* panel) {
  const int64_t n_groups = a.cols / 32;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r_begin = p * kRows;
    const int64_t valid = std::min(kRows, a.rows - r_begin);
    build_panel<Fmt>(a, r_begin, valid, panel);
    panel_rows(panel, n_groups, a.xq, i0, i1, a.y + r_begin, a.rows, valid);
  }
}

// y rows [i0, i1) x output columns of the row groups [p0, p1), from a.xq;
// a.row_type is int8_panel_type. scratch: gemm_scratch_floats(cols) floats.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  auto* panel = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  switch (a.row_type) {
    case WeightType::Q4_0: rows_fmt<i8gemm::FmtQ4_0>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q4_1: rows_fmt<i8gemm::FmtQ4_1>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q5_0: rows_fmt<i8gemm::FmtQ5_0>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q5_1: rows_fmt<i8gemm::FmtQ5_1>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q8_0: rows_fmt<i8gemm::FmtQ8_0>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q4_K: rows_fmt<i8gemm::FmtQ4_K>(a, p0, p1, i0, i1, panel); return;
    case WeightType::Q5_K: rows_fmt<i8gemm::FmtQ5_K>(a, p0, p1, i0, i1, panel); return;
    default: PREFIXD_CHECK(false, "int8 panels: not an int8_panel_type");
  }
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS

#endif  // __AVX512VNNI__
