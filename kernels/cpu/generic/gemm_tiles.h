// Matrix-product kernels written once over a set's vector layer `Vec` (N float
// lanes): register tiles of up to Vec::kGemmRows x rows by Vec::kGemmVecs
// vectors of output columns, streaming a weight panel (see CpuMatrix).
// F32 panels use FMA. BF16 panels use the set's BF16 dot product when it has
// one (x rounded to BF16, as llama.cpp does); otherwise they are widened to F32
// by shifts, and F16 panels by vcvtph2ps, in the tile for a few x rows
// (decode: the weights stream once) or a whole panel at a time into scratch
// for many (prefill: then the F32 tiles). Within a set, an output's products
// are summed in the same order whatever the number of x rows in the call (one
// FMA chain in column order; vdpbf16ps pairs for the BF16 dot product): a row's
// result does not depend on its batch (the prefix cache's bit-for-bit promise).
// Per-thread scratch: one F32 panel, (cols, 32) floats.
// Included by kernels/cpu/<isa>/kernels.cpp only, after that set's vec.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/with_count.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace gemm {

using V = typename Vec::T;
constexpr int N = Vec::N;
constexpr int64_t P = kGemmPanel;
static_assert(P % N == 0, "a panel is whole vectors");
constexpr int kVectorRegisters = Vec::kRegisters;

// Stores W vectors of one tile row; `valid` output columns remain from acc[0].
template <int W>
inline void store_row(float* y, const V* acc, int64_t valid) {
#pragma GCC unroll 4
  for (int j = 0; j < W; ++j) {
    const int64_t lanes = valid - j * N;
    if (lanes >= N) {
      Vec::store(y + j * N, acc[j]);
    } else if (lanes > 0) {
      Vec::store_n(y + j * N, acc[j], lanes);
    }
  }
}

// N values of a panel row as f32: an F32 panel's as they are, an F16 panel's
// widened (vcvtph2ps). (BF16 panels hold column pairs: tile_bf16_widen.)
PREFIXD_VEC_INLINE V load_f32(const float* p) { return Vec::load(p); }
PREFIXD_VEC_INLINE V load_f32(const uint16_t* p) { return Vec::load_f16(p); }

// Decode streams each weight once, a panel row at a time: the row
// kStreamPrefetchBytes ahead is prefetched into L2, so that more of the
// stream is in flight than the hardware prefetcher keeps (it stops at page
// boundaries). Alternating runs on an Emerald Rapids class Xeon (2 threads,
// decode against a plain read beside each rep, bench_forward --reps 3
// --prefill 0): smol-135m F32 37.0 -> 43.2 t/s (0.87 -> 0.97 of the read,
// four rounds), F16 48-51 -> 80-82 t/s (two rounds). 16 KiB rather than
// 32 streams a little closer to the read on an Emerald Rapids Xeon without
// AMX (bench_cpu_kernels 2 --stream, mean fraction of the plain read over
// Qwen3.5-0.8B's shapes, two alternating rounds: F32 0.97 -> 1.00-1.04, BF16
// 0.93 -> 0.98, F16 0.87-0.91 -> 0.93-0.98). Prefetches change no result.
constexpr int64_t kStreamPrefetchBytes = 16 * 1024;
PREFIXD_VEC_INLINE void prefetch_stream(const void* row, int64_t row_bytes) {
  const char* ahead = static_cast<const char*>(row) + kStreamPrefetchBytes;
  for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(ahead + o, 0, 2);
}

// y (M, valid <= W*N) = x (M, K) · tileᵀ, where tile = panel columns
// [0, W*N) with row stride P: panel (K, P) f32, or f16 (T = uint16_t) widened
// in the tile; one FMA chain per output in column order either way.
// kStream: a decode tile, whose panel rows are prefetched (prefetch_stream).
template <int M, int W, typename T, bool kStream = false>
void tile_f32(const T* panel, const float* x, int64_t ldx, int64_t K, float* y, int64_t ldy, int64_t valid) {
  V acc[M][W];
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < W; ++j) acc[i][j] = Vec::zero();
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (kStream) prefetch_stream(panel + k * P, P * static_cast<int64_t>(sizeof(T)));
    V w[W];
#pragma GCC unroll 4
    for (int j = 0; j < W; ++j) w[j] = load_f32(panel + k * P + j * N);
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      const V xv = Vec::set1(x[i * ldx + k]);
#pragma GCC unroll 4
      for (int j = 0; j < W; ++j) acc[i][j] = Vec::fmadd(w[j], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) store_row<W>(y + i * ldy, acc[i], valid);
}

// y (M, NP panels of valid[q] <= W*N columns) = x (M, K) · panelsᵀ, from NP
// consecutive BF16 panels (K2 = ceil(K/2), P, 2), panel_stride elements apart,
// widened in the tile; x f32; panel q's outputs at y + q * P. One FMA chain
// per output in column order, as tile_f32 runs over the widened panel: an
// output's value does not depend on how many x rows the call has nor on NP (a
// cached prefix's suffix equals the same rows computed in the whole prompt).
// NP > 1 is for decode (one x row): one panel alone gives W chains of two
// dependent FMAs per column pair, too few to hide the FMA latency, and the
// product ran at two thirds of the memory's speed (smol-135m BF16 decode);
// NP panels give NP * W chains. Never inlined: its loop's registers are
// allocated alone, as the other tiles' (inlined into panels(), some tiles'
// loops took up to 7 more register moves).
template <int M, int W, int NP = 1>
__attribute__((noinline)) void tile_bf16_widen(const uint16_t* panel, int64_t panel_stride, const float* x, int64_t ldx, int64_t K,
                     float* y, int64_t ldy, const int64_t* valid) {
  V acc[NP][M][W];
#pragma GCC unroll 4
  for (int q = 0; q < NP; ++q)
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < W; ++j) acc[q][i][j] = Vec::zero();
  const int64_t k_pairs = K / 2;
  for (int64_t k2 = 0; k2 < k_pairs; ++k2) {
    if constexpr (NP > 1) {  // decode
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) prefetch_stream(panel + q * panel_stride + k2 * 2 * P, 2 * P * 2);
    }
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q)
#pragma GCC unroll 4
      for (int j = 0; j < W; ++j) {
        V even, odd;
        Vec::load_bf16_pairs(panel + q * panel_stride + k2 * 2 * P + j * 2 * N, even, odd);
#pragma GCC unroll 12
        for (int i = 0; i < M; ++i) {
          acc[q][i][j] = Vec::fmadd(even, Vec::set1(x[i * ldx + 2 * k2]), acc[q][i][j]);
          acc[q][i][j] = Vec::fmadd(odd, Vec::set1(x[i * ldx + 2 * k2 + 1]), acc[q][i][j]);
        }
      }
  }
  if (K % 2 != 0) {  // last column alone (its pair partner is the zero pad)
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q)
#pragma GCC unroll 4
      for (int j = 0; j < W; ++j) {
        V even, odd;
        Vec::load_bf16_pairs(panel + q * panel_stride + k_pairs * 2 * P + j * 2 * N, even, odd);
#pragma GCC unroll 12
        for (int i = 0; i < M; ++i) acc[q][i][j] = Vec::fmadd(even, Vec::set1(x[i * ldx + K - 1]), acc[q][i][j]);
      }
  }
#pragma GCC unroll 4
  for (int q = 0; q < NP; ++q)
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) store_row<W>(y + q * P + i * ldy, acc[q][i], valid[q]);
}

#if defined(__AVX512BF16__)
// y (M, valid) = xb (M, 2*K2) bf16 · panelᵀ with the BF16 dot product; full panel.
template <int M>
void tile_bf16_dot(const uint16_t* panel, const uint16_t* xb, int64_t ldx, int64_t K2, float* y,
                   int64_t ldy, int64_t valid) {
  constexpr int W = P / N;
  V acc[M][W];
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < W; ++j) acc[i][j] = Vec::zero();
  for (int64_t k = 0; k < K2; ++k) {
    if constexpr (M == 1) prefetch_stream(panel + k * 2 * P, 2 * P * 2);  // decode
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      int32_t pair;
      std::memcpy(&pair, xb + i * ldx + 2 * k, 4);
#pragma GCC unroll 4
      for (int j = 0; j < W; ++j)
        acc[i][j] = Vec::dot_bf16_pairs(acc[i][j], panel + k * 2 * P + j * 2 * N, pair);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) store_row<W>(y + i * ldy, acc[i], valid);
}
#endif

// BF16 panel (K2, P, 2) -> F32 panel (K, P).
inline void widen_panel(const uint16_t* panel, int64_t K, float* out) {
  const int64_t k_pairs = (K + 1) / 2;
  for (int64_t k2 = 0; k2 < k_pairs; ++k2) {
#pragma GCC unroll 4
    for (int j = 0; j < P / N; ++j) {
      V even, odd;
      Vec::load_bf16_pairs(panel + k2 * 2 * P + j * 2 * N, even, odd);
      Vec::store(out + 2 * k2 * P + j * N, even);
      if (2 * k2 + 1 < K) Vec::store(out + (2 * k2 + 1) * P + j * N, odd);
    }
  }
}

// F16 panel (K, P) -> F32 panel (K, P).
inline void widen_panel_f16(const uint16_t* panel, int64_t K, float* out) {
  for (int64_t k = 0; k < K; ++k) {
#pragma GCC unroll 4
    for (int j = 0; j < P / N; ++j) Vec::store(out + k * P + j * N, Vec::load_f16(panel + k * P + j * N));
  }
}

// Prefill shape: tiles of kGemmRows x rows by kGemmVecs vectors, a panel in
// P / (kGemmVecs*N) column groups. Decode shape (fewer rows than one tile):
// the whole panel width per tile, as many rows as the same registers hold.
constexpr int kTileVecs = Vec::kGemmVecs;
constexpr int kTileRows = Vec::kGemmRows;
constexpr int kGroups = static_cast<int>(P / (kTileVecs * N));
constexpr int kWideVecs = static_cast<int>(P / N);
constexpr int kWideRows = std::max(1, kTileRows * kTileVecs / kWideVecs);

inline void f32_panel_rows(const float* panel, const float* x, int64_t K, float* y, int64_t ldy,
                           int64_t valid, int64_t n_rows) {
  if (n_rows < kTileRows && kGroups > 1) {
    for (int64_t i = 0; i < n_rows; i += kWideRows) {
      const int m = static_cast<int>(std::min<int64_t>(kWideRows, n_rows - i));
      with_count<kWideRows>(m, [&]<int M>() { tile_f32<M, kWideVecs, float, true>(panel, x + i * K, K, K, y + i * ldy, ldy, valid); });
    }
    return;
  }
  for (int g = 0; g < kGroups; ++g) {
    const int64_t c0 = static_cast<int64_t>(g) * kTileVecs * N;
    if (valid - c0 <= 0) break;
    for (int64_t i = 0; i < n_rows; i += kTileRows) {
      const int m = static_cast<int>(std::min<int64_t>(kTileRows, n_rows - i));
      with_count<kTileRows>(m, [&]<int M>() {
        tile_f32<M, kTileVecs>(panel + c0, x + i * K, K, K, y + i * ldy + c0, ldy, valid - c0);
      });
    }
  }
}

#if defined(__AVX512BF16__)
// y (n_rows, valid) = xb (n_rows, 2*K2) bf16 · BF16 panelᵀ, in tiles of kTileRows rows
// (in a set built with AMX-BF16, on the tile unit: amx/bf16_tiles.h).
inline void bf16_dot_panel_rows(const uint16_t* panel, const uint16_t* xb, int64_t ldx, int64_t K2, float* y,
                                int64_t ldy, int64_t valid, int64_t n_rows) {
#if defined(__AMX_BF16__)
  // The amx set: the tile unit for every count of rows (amx/bf16_tiles.h).
  bf16_tiles::panel_rows(panel, xb, ldx, K2, y, ldy, valid, n_rows);
#else
  for (int64_t i = 0; i < n_rows; i += kTileRows) {
    const int m = static_cast<int>(std::min<int64_t>(kTileRows, n_rows - i));
    with_count<kTileRows>(m, [&]<int M>() { tile_bf16_dot<M>(panel, xb + i * ldx, ldx, K2, y + i * ldy, ldy, valid); });
  }
#endif
}
#endif

// x rows at or above which a BF16 panel is widened once instead of per tile.
constexpr int64_t kWidenPanelRows = 8;

// Whether F32 panels are copied into the per-thread scratch before many x
// rows use them: a set's choice, measured (see its vec.h).
constexpr bool kCopyF32Panels = Vec::kCopyF32Panels;

inline size_t scratch_floats(int64_t cols) { return static_cast<size_t>(cols) * P; }

inline void panels(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, float* scratch) {
  const int64_t K = a.cols;
  const int64_t n_rows = i1 - i0;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t valid = std::min(P, a.rows - p * P);
    float* y = a.y + i0 * a.rows + p * P;
    const float* x = a.x + i0 * K;
    if (a.dtype == DType::F32) {
      const float* panel = static_cast<const float*>(a.packed) + p * K * P;
      if (kCopyF32Panels && n_rows >= kWidenPanelRows) {
        std::memcpy(scratch, panel, static_cast<size_t>(K) * P * sizeof(float));
        panel = scratch;
      }
      f32_panel_rows(panel, x, K, y, a.rows, valid, n_rows);
      continue;
    }
    if (a.dtype == DType::F16) {
      const uint16_t* panel = static_cast<const uint16_t*>(a.packed) + p * K * P;
      if (n_rows >= kWidenPanelRows) {
        widen_panel_f16(panel, K, scratch);
        f32_panel_rows(scratch, x, K, y, a.rows, valid, n_rows);
        continue;
      }
      for (int64_t i = 0; i < n_rows; i += kWideRows) {
        const int m = static_cast<int>(std::min<int64_t>(kWideRows, n_rows - i));
        with_count<kWideRows>(m, [&]<int M>() {
          tile_f32<M, kWideVecs, uint16_t, true>(panel, x + i * K, K, K, y + i * a.rows, a.rows, valid);
        });
      }
      continue;
    }
    const int64_t K2 = (K + 1) / 2;
    const uint16_t* panel = static_cast<const uint16_t*>(a.packed) + p * K2 * P * 2;
#if defined(__AVX512BF16__)
    bf16_dot_panel_rows(panel, a.xb + i0 * a.xb_stride, a.xb_stride, K2, y, a.rows, valid, n_rows);
#else
    if (n_rows == 1 && p + 1 < p1) {  // decode: two panels at once
      const int64_t valid2[2] = {valid, std::min(P, a.rows - (p + 1) * P)};
      tile_bf16_widen<1, kWideVecs, 2>(panel, K2 * P * 2, x, K, K, y, a.rows, valid2);
      ++p;
      continue;
    }
    if (n_rows >= kWidenPanelRows) {
      widen_panel(panel, K, scratch);
      f32_panel_rows(scratch, x, K, y, a.rows, valid, n_rows);
      continue;
    }
    for (int64_t i = 0; i < n_rows; i += kWideRows) {
      const int m = static_cast<int>(std::min<int64_t>(kWideRows, n_rows - i));
      with_count<kWideRows>(m, [&]<int M>() {
        tile_bf16_widen<M, kWideVecs>(panel, 0, x + i * K, K, K, y + i * a.rows, a.rows, &valid);
      });
    }
#endif
  }
}

}  // namespace gemm

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
