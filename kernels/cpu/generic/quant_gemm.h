// Matrix products over block-format weights kept in their own bits
// (CpuMatrix's rows layout) in the prefill shape (kInt8MaxRows x rows or
// more), written once over a set's vector layer, for the block types the
// set's int8 panels do not take: a group of 32 weight rows is dequantized
// once into an F32 panel (cols, 32) in scratch, then the F32 register tiles
// of gemm_tiles.h run every x row over it; the dequantization is paid once
// per 32 x 32 x rows of work. In sets with a BF16 dot product (avx512bf16)
// the panel is rounded to BF16 instead and runs through the BF16 tiles, with
// x in BF16 (GemmArgs::xb), as BF16 weights do: twice the products per
// instruction. Fewer x rows take the integer products (int8_gemm.h).
// Included by kernels/cpu/<isa>/kernels.cpp only (through kernel_set.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/gemm_tiles.h"
#include "kernels/cpu/generic/dequant_rows.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace qgemm {

constexpr int64_t P = kGemmPanel;

// The fewest x rows that reach these products (gemm.cpp's split).
constexpr int64_t kPanelRows = kInt8MaxRows;

// Per thread: the panel (cols, 32) f32, then one row of cols floats and
// cols + 1 halves (dequant_panel_bf16's).
inline size_t scratch_floats(int64_t cols) { return static_cast<size_t>(cols) * (P + 2) + 1; }

// Block formats dequantize to BF16 panels for the BF16 dot product.
#if defined(__AVX512BF16__)
inline bool bf16_panels(WeightType) { return true; }
#else
inline bool bf16_panels(WeightType) { return false; }
#endif

// Weight rows [r0, r0 + valid) -> F32 panel (K, P) in `panel`; columns past
// `valid` are zero. `row` is a K-float buffer.
inline void dequant_panel(const GemmArgs& a, int64_t r0, int64_t valid, float* panel, float* row) {
  const int64_t K = a.cols;
  if (valid < P) {
    for (int64_t k = 0; k < K; ++k) std::memset(panel + k * P + valid, 0, (P - valid) * sizeof(float));
  }
  for (int64_t r = 0; r < valid; ++r) {
    dequant::row(a.row_type, a.rows_data + (r0 + r) * a.row_bytes, row, K);
    for (int64_t k = 0; k < K; ++k) panel[k * P + r] = row[k];
  }
}

// Weight rows [r0, r0 + valid) -> BF16 panel (ceil(K/2), P, 2) in `panel`
// (gemm_tiles.h's layout: column pairs interleaved), columns past `valid` and
// an odd K's last pair partner zero. `row` holds K floats then K + 1 halves.
inline void dequant_panel_bf16(const GemmArgs& a, int64_t r0, int64_t valid, uint16_t* panel, float* row) {
  const int64_t K = a.cols, K2 = (K + 1) / 2;
  uint16_t* half = reinterpret_cast<uint16_t*>(row + K);
  half[K] = 0;
  for (int64_t r = 0; r < P; ++r) {
    if (r < valid) {
      dequant::row(a.row_type, a.rows_data + (r0 + r) * a.row_bytes, row, K);
      rows::f32_to_bf16_n(row, half, K);
    }
    for (int64_t k2 = 0; k2 < K2; ++k2) {
      uint16_t* dst = panel + (k2 * P + r) * 2;
      dst[0] = r < valid ? half[2 * k2] : 0;
      dst[1] = r < valid ? half[2 * k2 + 1] : 0;
    }
  }
}

// y rows [i0, i1) x output columns of the row groups (panels) [p0, p1).
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t K = a.cols;
  const int64_t n_rows = i1 - i0;
  PREFIXD_CHECK(n_rows >= kPanelRows, "block rows take the integer products below kInt8MaxRows x rows");
  float* panel = scratch;                // (K, P)
  float* dequantized = scratch + K * P;  // one dequantized row (see scratch_floats)
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r_begin = p * P;
    const int64_t valid = std::min(P, a.rows - r_begin);
    float* y = a.y + i0 * a.rows + r_begin;
    const float* x = a.x + i0 * K;
    if (bf16_panels(a.row_type)) {
      auto* panel16 = reinterpret_cast<uint16_t*>(panel);  // (K2, P, 2): half the F32 panel's bytes
      dequant_panel_bf16(a, r_begin, valid, panel16, dequantized);
#if defined(__AVX512BF16__)
      gemm::bf16_dot_panel_rows(panel16, a.xb + i0 * a.xb_stride, a.xb_stride, (K + 1) / 2, y, a.rows, valid, n_rows);
#else
      PREFIXD_CHECK(false, "BF16 panels without a BF16 dot product");  // bf16_panels() is false here
#endif
      continue;
    }
    dequant_panel(a, r_begin, valid, panel, dequantized);
    gemm::f32_panel_rows(panel, x, K, y, a.rows, valid, n_rows);
  }
}

}  // namespace qgemm

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
