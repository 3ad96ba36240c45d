// Prefill products of Q6_K weights in 8-bit integers with AVX512_VNNI, beside
// the other formats' int8 panels (int8_panels.h). A Q6_K group of 32 values
// has two scales (one per 16), which the shared panel's one scale per group
// cannot hold, so Q6_K has a panel of its own: the values kept signed
// (q - 32, -32..31) as vpdpbusd's signed operand, x the unsigned one (its
// quantized bytes + 128: GemmArgs::xqu, made once per call), each half
// summed in its own int32 lanes that start at -128 * (the half's weight sum),
// so that they hold exactly sum(x * w); then each half scales by its own
// d * scale. Only the avx512bf16 set takes Q6_K here (rows_with_q6_k); the
// amx set's tile unit runs the shared panel only, so there Q6_K keeps the
// BF16 panels. Each output sums its groups, low half then high, in order,
// whatever the tile or call it is in.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512bf16/int8_panels.h"

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
  uint8_t* panel = panel_in(scratch);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r_begin = p * kRows;
    const int64_t valid = a.rows - r_begin < kRows ? a.rows - r_begin : kRows;
    build_panel(a, r_begin, valid, panel);
    float* y = a.y + r_begin;
    each_tile(i0, i1, [&]<int R>(int64_t i) {
      tile<R>(panel, n_groups, a.xqu + i * n_groups, n_groups, y + i * a.rows, a.rows, valid);
    });
  }
}

}  // namespace i8panel::q6k

namespace i8panel {

// The formats this set's int8 panels take: the shared panel's, and Q6_K.
inline bool takes_with_q6_k(WeightType t) { return t == WeightType::Q6_K || takes(t); }

// i8panel::rows, Q6_K on its own panel.
inline void rows_with_q6_k(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  if (a.row_type == WeightType::Q6_K) {
    q6k::rows(a, p0, p1, i0, i1, scratch);
    return;
  }
  rows(a, p0, p1, i0, i1, scratch);
}

}  // namespace i8panel

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
