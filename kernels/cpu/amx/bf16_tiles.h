// Products over BF16 weight panels on the AMX tiles (TDPBF16PS: a 16 x 32
// BF16 A tile times a 32 x 16 B tile into 16 x 16 f32, 8192 multiply-adds per
// instruction). The panel layout (ceil(K/2), 32, 2) of gemm_tiles.h is already
// the B operand's: a step of 16 column pairs is two B tiles (output columns
// 0-15 and 16-31, rows 128 bytes apart); x in BF16 (GemmArgs::xb, rows padded
// with zeros to 32 columns) is the A operand. Up to 32 x rows at a time: four
// f32 accumulator tiles (2 x-row halves x 2 column halves).
// Every call count of x rows runs these tiles (decode too, one A row): an
// output's sum is the tile unit's, in the same steps, whatever the batch, and
// TDPBF16PS does not round as vdpbf16ps or FMA chains do (measured on an
// Emerald Rapids Xeon: most outputs differ in the last bits), so a set that
// mixed them would break the prefix cache's bit-for-bit promise.
// Included by kernels/cpu/amx/kernels.cpp only, before generic/kernel_set.h
// (gemm_tiles.h calls it for the BF16 panels of this set).
#pragma once

#if !defined(__AMX_BF16__)
#error "amx/bf16_tiles.h needs AMX-BF16 (the amx set)"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx/tile_config.h"
#include "kernels/cpu/cpu_kernels.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace bf16_tiles {

constexpr int64_t P = kGemmPanel;  // output columns of a panel: two tiles of 16
constexpr int64_t kStepPairs = 16;  // column pairs per TDPBF16PS (B tile rows)
constexpr int64_t kRowBytes = P * 2 * 2;  // one column pair of a panel: 128 bytes
constexpr int kTileRows = 16;       // x rows per A tile
// B data prefetched this many steps (2 KiB each) ahead in blocks of at most
// kPrefetchMaxRows x rows. Decode (one row), alternating runs on an Emerald
// Rapids class Xeon, 2 threads: lfm2-350m BF16 20-24 t/s without, 26-28 with
// 4 steps, 25-26 with 2, 25-26 with 8, 23-25 with 16; smol-135m BF16 54-65 ->
// 66-87; qwen35-0.8b 9.3-10.4 -> 12.5-13.8.
constexpr int64_t kPrefetchSteps = 4;
constexpr int kPrefetchMaxRows = 4;
// And into L2 this many steps (64 KiB) ahead, so that more of the stream is
// in flight than L1's fill buffers hold. Five alternating rounds, decode
// against a plain read beside each rep (bench_forward --reps 3 --prefill 0):
// lfm2-350m 0.86 -> 0.94 of the read (33.1 -> 34.3 t/s on average), smol-135m
// BF16 0.96 -> 1.03 (83 -> 87 t/s), qwen35-0.8b 0.86 -> 0.87 (15.3 -> 15.0).
constexpr int64_t kPrefetchL2Steps = 32;

// Tiles: 0, 1 = rows [0, m0) x columns 0-15 / 16-31; 2, 3 = rows [16, 16 + m1);
// 4, 5 = the A tiles of those rows (64 bytes: 16 pairs); 6, 7 = the B tiles.
inline tiles::TileConfig config(int m0, int m1) {
  tiles::TileConfig c;
  for (int t : {0, 1, 4}) c.set(t, m0, 64);
  for (int t : {2, 3, 5}) c.set(t, m1, 64);
  c.set(6, kStepPairs, 64);
  c.set(7, kStepPairs, 64);
  return c;
}

// y (m = m0 + m1, valid) = x rows · panelᵀ over `steps` steps of 16 pairs; the
// last step's B rows come from `last` (zero past the panel's pairs).
template <bool kTwo>
PREFIXD_VEC_INLINE void block(const uint8_t* panel, const uint8_t* last, int64_t steps, const uint16_t* xb,
                              int64_t ldx, float* y, int64_t ldy, int64_t valid, int m) {
  const int64_t x_bytes = ldx * 2;
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kTwo) {
    _tile_zero(2);
    _tile_zero(3);
  }
  // Few x rows (decode): the tile unit waits on the B tiles' loads, so the
  // steps kPrefetchSteps ahead (past the panel: the next panel's, which
  // follows it) are prefetched. Prefetches change no result.
  const bool prefetch = m <= kPrefetchMaxRows;
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* b = s + 1 == steps ? last : panel + s * kStepPairs * kRowBytes;
    if (prefetch) {
      const uint8_t* ahead = panel + (s + kPrefetchSteps) * kStepPairs * kRowBytes;
      const uint8_t* far = panel + (s + kPrefetchL2Steps) * kStepPairs * kRowBytes;
      for (int64_t l = 0; l < kStepPairs * kRowBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(far + l), _MM_HINT_T1);
      }
    }
    _tile_loadd(6, b, kRowBytes);
    _tile_loadd(7, b + 64, kRowBytes);
    _tile_loadd(4, xb + s * 2 * kStepPairs, x_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwo) {
      _tile_loadd(5, xb + kTileRows * ldx + s * 2 * kStepPairs, x_bytes);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  const int64_t y_bytes = ldy * static_cast<int64_t>(sizeof(float));
  if (valid == P) {
    _tile_stored(0, y, y_bytes);
    _tile_stored(1, y + 16, y_bytes);
    if constexpr (kTwo) {
      _tile_stored(2, y + kTileRows * ldy, y_bytes);
      _tile_stored(3, y + kTileRows * ldy + 16, y_bytes);
    }
    return;
  }
  alignas(64) float c[2 * kTileRows][P];  // the accumulators, then their valid columns
  _tile_stored(0, c[0], P * 4);
  _tile_stored(1, c[0] + 16, P * 4);
  if constexpr (kTwo) {
    _tile_stored(2, c[kTileRows], P * 4);
    _tile_stored(3, c[kTileRows] + 16, P * 4);
  }
  for (int i = 0; i < m; ++i) std::memcpy(y + i * ldy, c[i], valid * sizeof(float));
}

// y (m <= 32 rows, valid) = xb rows · panelᵀ, panel (K2, 32, 2) bf16, on the
// configuration config(m0, m1) already loaded; xb rows ldx apart and zero
// from column 2*K2 to a multiple of 32. Only the rows a block stores are
// computed: its tiles have m0 and m1 rows, so no x row past the call's is read.
inline void rows_on_panel(const uint16_t* panel16, int64_t K2, const uint16_t* xb, int64_t ldx, float* y,
                          int64_t ldy, int64_t valid, int m) {
  const auto* panel = reinterpret_cast<const uint8_t*>(panel16);
  const int64_t steps = (K2 + kStepPairs - 1) / kStepPairs;
  const uint8_t* last = panel + (steps - 1) * kStepPairs * kRowBytes;
  alignas(64) uint8_t padded[kStepPairs * kRowBytes];  // a short last step, zero past the panel's pairs
  const int64_t last_pairs = K2 - (steps - 1) * kStepPairs;
  if (last_pairs < kStepPairs) {
    std::memcpy(padded, last, last_pairs * kRowBytes);
    std::memset(padded + last_pairs * kRowBytes, 0, (kStepPairs - last_pairs) * kRowBytes);
    last = padded;
  }
  if (m > kTileRows) {
    block<true>(panel, last, steps, xb, ldx, y, ldy, valid, m);
  } else {
    block<false>(panel, last, steps, xb, ldx, y, ldy, valid, m);
  }
}

// Loads the configuration of a block of m x rows (the thread's, when it is already).
inline void configure_rows(int m) {
  const int m0 = std::min(m, kTileRows);
  tiles::use_config(config(m0, m - m0));
}

// y (n_rows, valid) = xb (n_rows, 2*K2) bf16 · panelᵀ over one panel, 32 x rows at a time.
inline void panel_rows(const uint16_t* panel, const uint16_t* xb, int64_t ldx, int64_t K2, float* y,
                       int64_t ldy, int64_t valid, int64_t n_rows) {
  for (int64_t i = 0; i < n_rows; i += 2 * kTileRows) {
    const int m = static_cast<int>(std::min<int64_t>(2 * kTileRows, n_rows - i));
    configure_rows(m);
    rows_on_panel(panel, K2, xb + i * ldx, ldx, y + i * ldy, ldy, valid, m);
  }
}

// GemmArgs' BF16 panels [p0, p1) x rows [i0, i1): 32 x rows at a time over
// every panel, so that a call's last, shorter block loads its configuration
// once, not once per panel.
inline void panels(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  const int64_t K2 = (a.cols + 1) / 2;
  for (int64_t i = i0; i < i1; i += 2 * kTileRows) {
    const int m = static_cast<int>(std::min<int64_t>(2 * kTileRows, i1 - i));
    configure_rows(m);
    for (int64_t p = p0; p < p1; ++p) {
      const uint16_t* panel = static_cast<const uint16_t*>(a.packed) + p * K2 * P * 2;
      rows_on_panel(panel, K2, a.xb + i * a.xb_stride, a.xb_stride, a.y + i * a.rows + p * P, a.rows,
                    std::min(P, a.rows - p * P), m);
    }
  }
}

}  // namespace bf16_tiles

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
