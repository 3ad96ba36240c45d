// Q6_K's int8 panel, shared by the x86 sets' Q6_K prefill tiles
// (avx512bf16/int8_q6k_panels.h in zmm, avx2/int8_q6k_panels.h in ymm). A
// Q6_K group of 32 values has two scales (one per 16), which the shared panel
// (generic/int8_panel_layout.h) with one scale per group cannot hold, so
// Q6_K has a panel of its own: the values kept signed (q - 32, -32..31) as
// the products' signed operand, x the unsigned one (its quantized bytes +
// 128: GemmArgs::xqu, made once per call), each half summed in its own int32
// lanes that start at -128 * (the half's weight sum), so that they hold
// exactly sum(x * w); then each half scales by its own d * scale.
// Included by those two files only (after the set's vec.h and I8).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_panel_layout.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8panel::q6k {

// Layout, per 32-value group g of the panel's 32 weight rows (kGroupBytes each):
//   q[8][32][4] s8  -- q[t][r][b] is value 4t + b of row r, minus 32
//   s[2][32]  f32   -- s[h][r] = d * the scale of values 16h .. 16h + 15
//   c[2][32]  i32   -- c[h][r] = -128 * the sum of those 16 values (of q - 32)
constexpr int64_t kGroupBytes = kQBytes + 4 * kRows * static_cast<int64_t>(sizeof(float));

// Weight rows [r0, r0 + valid) of a (Q6_K rows) -> panel; rows past `valid` zero.
inline void build_panel(const GemmArgs& a, int64_t r0, int64_t valid, uint8_t* panel) {
  const int64_t n_groups = a.cols / 32;
  if (valid < kRows) std::memset(panel, 0, n_groups * kGroupBytes);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t r = 0; r < valid; ++r) {
    const auto* blocks = reinterpret_cast<const quant::BlockQ6_K*>(a.rows_data + (r0 + r) * a.row_bytes);
    for (int64_t b = 0; b < n_groups / 8; ++b) {
      const quant::BlockQ6_K& block = blocks[b];
      __m256i q[8];
      quant::int8_groups_q6_k<I8>(block, q);  // unsigned 0..63
      const float d = I8::half(block.d);
      for (int k = 0; k < 8; ++k) {
        uint8_t* pg = panel + (b * 8 + k) * kGroupBytes;
        // Sums of q per 8 bytes; a half's sum of q - 32 is two of them less 16 * 32.
        alignas(32) uint64_t sums[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(sums), _mm256_sad_epu8(q[k], _mm256_setzero_si256()));
        alignas(32) uint32_t words[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(words), _mm256_sub_epi8(q[k], offset));
        for (int t = 0; t < 8; ++t) std::memcpy(pg + (t * kRows + r) * 4, &words[t], 4);
        for (int h = 0; h < 2; ++h) {
          const float s = d * static_cast<float>(block.scales[2 * k + h]);  // exact: 11 x 8 bits
          const auto c = static_cast<int32_t>(-128 * (static_cast<int64_t>(sums[2 * h] + sums[2 * h + 1]) - 16 * 32));
          std::memcpy(pg + kQBytes + (h * kRows + r) * sizeof(float), &s, sizeof(float));
          std::memcpy(pg + kQBytes + ((2 + h) * kRows + r) * sizeof(float), &c, sizeof(int32_t));
        }
      }
    }
  }
}

// For each row group p in [p0, p1) of a (Q6_K rows): its panel built in
// `scratch` (gemm_scratch_floats(cols) floats: 136 cols bytes >= 48 cols +
// 64), then tiles(panel, first weight row, valid rows).
template <class Tiles>
void each_panel(const GemmArgs& a, int64_t p0, int64_t p1, float* scratch, Tiles&& tiles) {
  uint8_t* panel = panel_in(scratch);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r_begin = p * kRows;
    const int64_t valid = a.rows - r_begin < kRows ? a.rows - r_begin : kRows;
    build_panel(a, r_begin, valid, panel);
    tiles(static_cast<const uint8_t*>(panel), r_begin, valid);
  }
}

}  // namespace i8panel::q6k

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
