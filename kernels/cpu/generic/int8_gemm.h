// Matrix products over block-format weights with the activations quantized to
// 8 bits: every 32 weights are unpacked to bytes in registers and multiplied
// with the activation bytes as integers. The 32-value formats scale each
// product once per 32 in floats (x quantized per 32: XQ8Block); the K formats
// and IQ4_XS apply their group scales inside vpmaddwd and sum a 256-value
// super-block in int32 before one float multiply (x quantized per 256:
// XQ8KBlock); IQ4_NL and IQ4_XS map their 4-bit indices through the code book
// with one byte shuffle (vpshufb). This is the arithmetic of llama.cpp's
// vec_dot kernels; it reads a 4.5-bit weight as 4.5 bits, where dequantizing
// to F32 first costs a conversion, a multiply and a store per weight. gemm.cpp sends calls with fewer than kInt8MaxRows x rows
// here (decode, short suffixes), through the set's gemm_int8_rows (its
// kernels.cpp's int8_rows), which gives the formats a set has its own tiles for
// (avx512/int8_k_rows.h, avx512bf16/int8_pair_rows.h, avx2/int8_k_rows.h) to
// those and the rest to i8gemm::rows here; longer calls take the
// int8 or dequantized panels.
//
// Batch invariance: each output y[i][r] is accumulated in the same order (over
// the row's blocks, then one fixed lane reduction) whatever the tile it falls
// in, so within this path a row's result does not depend on how many other
// rows were in the call (decode alone or batched gives the same numbers).
//
// Formats (int8_weight_type()): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL per 32;
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS per 256 (k_weight_type()).
// Included by kernels/cpu/<isa>/kernels.cpp only (through kernel_set.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant/quant_blocks.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8gemm {

using B = typename I8::B;
using F = typename I8::F;

// --- activations --------------------------------------------------------------

// Rows [r0, r1) of x (., cols) -> out (., cols / 32) blocks; cols is a multiple of 32.
inline void quantize_x(const float* x, int64_t r0, int64_t r1, int64_t cols, XQ8Block* out) {
  const int64_t nb = cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      XQ8Block& o = out[r * nb + b];
      int sum = 0;
      float d = 0;
      I8::quantize32(x + r * cols + b * 32, o.q, &d, &sum);
      o.d = f16_to_f32(f32_to_f16(d));
      o.ds = o.d * static_cast<float>(sum);  // exact: 11 bits of d times |sum| <= 4064
      o.s = f16_to_f32(f32_to_f16(d * static_cast<float>(sum)));
    }
  }
}

// Rows [r0, r1) of x (., cols) -> out (., cols / 256) blocks; cols is a multiple of 256.
inline void quantize_x_k(const float* x, int64_t r0, int64_t r1, int64_t cols, XQ8KBlock* out) {
  const int64_t nb = cols / 256;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      XQ8KBlock& o = out[r * nb + b];
      I8::quantize256(x + r * cols + b * 256, o.q, &o.d, o.bsums);
      for (int g = 0; g < 8; ++g) o.sums32[g] = static_cast<int16_t>(o.bsums[2 * g] + o.bsums[2 * g + 1]);
    }
  }
}

// How far ahead of the weights being multiplied the next ones are prefetched.
constexpr size_t kPrefetchBytes = 4096;
// ... and, into L2 only, how much further: more of the stream in flight than
// the L1 prefetches and the hardware prefetcher keep. Emerald Rapids Xeon
// without AMX, bench_cpu_kernels 2 --stream (mean fraction of the plain read
// over Qwen3.5-0.8B's shapes, two alternating rounds), none / 16 / 24 / 40
// KiB: Q8_0 0.82 / 0.88-0.91 / 0.87-0.95 / 0.90, Q6_K 0.79-0.83 / 0.89-0.91
// / 0.89-0.93 / 0.90, Q4_K 0.76 / 0.77-0.80 / 0.75-0.79 / 0.75; Q5_0 stays at
// 0.72 (its tile is compute-bound: 25 GB/s from L2).
constexpr size_t kPrefetchL2Bytes = 24 * 1024;

// A tile's MR weight rows are one contiguous span, read as MR short streams
// that the hardware prefetcher does not follow: at each step, fetch the
// span's next kStep bytes `distance` bytes ahead of the tile, linearly, into
// L1, and kPrefetchL2Bytes further into L2. Prefetches change no result.
template <size_t kStep>
PREFIXD_VEC_INLINE void prefetch_ahead(const uint8_t* w, int64_t step, size_t distance) {
  const uint8_t* pf = w + distance + static_cast<size_t>(step) * kStep;
#pragma GCC unroll 16
  for (size_t o = 0; o < kStep + 64; o += 64) __builtin_prefetch(pf + o);
#pragma GCC unroll 16
  for (size_t o = 0; o < kStep + 64; o += 64) __builtin_prefetch(pf + kPrefetchL2Bytes + o, 0, 2);
}

// Every element of a tile's MR x NR accumulators a set to va (and, in the
// same pass, of b to vb).
template <typename T, int MR, int NR>
PREFIXD_VEC_INLINE void fill(T (&a)[MR][NR], T va) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) a[m][i] = va;
}
template <typename T, typename U, int MR, int NR>
PREFIXD_VEC_INLINE void fill(T (&a)[MR][NR], T va, U (&b)[MR][NR], U vb) {
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      a[m][i] = va;
      b[m][i] = vb;
    }
}

// --- weight formats -------------------------------------------------------------
// Each format's unpack is its header's (kernels/quant/formats/, the protocol in
// formats/int8_unpack.h): the 32-value formats give groups of 32 bytes with a
// float scale and constant term each (x as XQ8Block); the K formats and IQ4_XS
// give a 256-value super-block as 8 groups of 32 whose integer products are
// scaled by their 16-bit group scales inside vpmaddwd and summed in int32 over
// the whole super-block, then scaled once in floats by d(weight) * d(x); mins
// and offsets come from the activation sums per 32 or per 16 (extra()).
template <typename Block>
using Fmt = quant::Int8Unpack<I8, Block>;
using KUnpacked = quant::KUnpacked<I8>;

// y[i * ldy + m] for MR weight rows and NR activation rows of a K format.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile_k(const uint8_t* w, size_t row_bytes, const XQ8KBlock* x, int64_t x_stride,
                               int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  F acc[MR][NR];
  float extra[MR][NR];
  fill(acc, I8::zero(), extra, 0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead<MR * sizeof(Block)>(w, b, kPrefetchBytes);
    KUnpacked u[MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) Fmt::unpack(reinterpret_cast<const Block*>(w + m * row_bytes)[b], u[m]);
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      const XQ8KBlock& xb = x[i * x_stride + b];
      typename I8::I isum[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) isum[m] = I8::izero();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const B a = I8::load(xb.q + 32 * k);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) {
          const B s = Fmt::kSigned ? I8::sign(a, u[m].signs[k]) : a;
          isum[m] = I8::dot_scaled(u[m].q[k], s, Fmt::scale(u[m], k), isum[m]);
        }
      }
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        acc[m][i] = I8::fmadd(I8::to_float(isum[m]), I8::set1(u[m].d * xb.d), acc[m][i]);
        if constexpr (Fmt::kExtra) extra[m][i] += xb.d * Fmt::extra(u[m], xb);
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) y[i * ldy + m] = I8::reduce(acc[m][i]) + extra[m][i];
}

// --- tiles (32-value formats) ---------------------------------------------------

// y[i * ldy + m] for MR weight rows (w, row_bytes apart) and NR activation rows
// (x, x_stride blocks apart), over n_blocks blocks of the format.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile(const uint8_t* w, size_t row_bytes, const XQ8Block* x, int64_t x_stride,
                             int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  constexpr int S = Fmt::kSub;
  F acc[MR][NR];
  float mins[MR][NR];
  fill(acc, I8::zero(), mins, 0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    B q[MR][S];
    float sc[MR][S];
    float mn[MR][S];
    prefetch_ahead<MR * sizeof(Block)>(w, b, kPrefetchBytes);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) Fmt::unpack(reinterpret_cast<const Block*>(w + m * row_bytes)[b], q[m], sc[m], mn[m]);
#pragma GCC unroll 8
    for (int k = 0; k < S; ++k) {
      B u[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) u[m] = Fmt::kSigned ? I8::abs(q[m][k]) : q[m][k];
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) {
        const XQ8Block& xb = x[i * x_stride + b * S + k];
        const B a = I8::load(xb.q);
        const F xd = I8::set1(xb.d);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) {
          const B s = Fmt::kSigned ? I8::sign(a, q[m][k]) : a;
          acc[m][i] = I8::fmadd(I8::mul(I8::dot(u[m], s), xd), I8::set1(sc[m][k]), acc[m][i]);
          // Q4_1's and Q5_1's mins (Block::kMin) multiply llama.cpp's Q8_1 sum;
          // the offsets of Q4_0 and Q5_0 the exact one (XQ8Block).
          if constexpr (Fmt::kMin) mins[m][i] += mn[m][k] * (Block::kMin ? xb.s : xb.ds);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) y[i * ldy + m] = I8::reduce(acc[m][i]) + mins[m][i];
}

// Weight rows [r0, r1) x activation rows [i, i + NR) in tiles of MR weight
// rows, the last rows one by one: tile_at.template operator()<MR, NR>(r, i).
template <int MR, int NR, class TileAt>
PREFIXD_VEC_INLINE void row_tiles(int64_t r0, int64_t r1, int64_t i, TileAt& tile_at) {
  int64_t r = r0;
  for (; r + MR <= r1; r += MR) tile_at.template operator()<MR, NR>(r, i);
  for (; r < r1; ++r) tile_at.template operator()<1, NR>(r, i);
}

// Weight rows [r0, r1) x activation rows [i0, i1), in groups of 32 weight rows
// that stay in L1 while every activation tile passes over them: tiles of NX
// activation rows by MX weight rows, the last activation rows one by one
// against M1 weight rows. The decode tiles of every set (this file's and the
// AVX-512 sets' int8_k_rows.h and int8_pair_rows.h, avx2/int8_k_rows.h) run through here.
template <int NX, int MX, int M1, class TileAt>
PREFIXD_VEC_INLINE void each_tile(int64_t r0, int64_t r1, int64_t i0, int64_t i1, TileAt&& tile_at) {
  constexpr int64_t kRowGroup = 32;
  for (int64_t g = r0; g < r1; g += kRowGroup) {
    const int64_t g1 = std::min(r1, g + kRowGroup);
    int64_t i = i0;
    for (; i + NX <= i1; i += NX) row_tiles<MX, NX>(g, g1, i, tile_at);
    for (; i < i1; ++i) row_tiles<M1, 1>(g, g1, i, tile_at);
  }
}

// y rows [i0, i1) x the weight rows of the 32-row groups [p0, p1) for a set's
// own K-format decode tiles (avx512/int8_k_rows.h, avx2/int8_k_rows.h): Q4_K,
// Q5_K and Q6_K take formats F4, F5, F6 through
// tile.template operator()<Fmt, MR, NR>(w, row_bytes, x, x_stride, n_blocks, y, ldy),
// in tiles of 4 x rows by one weight row and the last x rows against 4 weight
// rows. False (nothing done) for any other row type.
template <class F4, class F5, class F6, class Tile>
inline bool k_format_rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1, Tile&& tile) {
  const int64_t r0 = p0 * kGemmPanel, r1 = std::min(a.rows, p1 * kGemmPanel);
  const int64_t stride = a.cols / 256;
  auto run = [&]<class Fmt>() {
    each_tile<4, 1, 4>(r0, r1, i0, i1, [&]<int MR, int NR>(int64_t r, int64_t i) {
      tile.template operator()<Fmt, MR, NR>(a.rows_data + r * a.row_bytes, a.row_bytes, a.xqk + i * stride, stride,
                                            stride, a.y + i * a.rows + r, a.rows);
    });
  };
  switch (a.row_type) {
    case WeightType::Q4_K: run.template operator()<F4>(); return true;
    case WeightType::Q5_K: run.template operator()<F5>(); return true;
    case WeightType::Q6_K: run.template operator()<F6>(); return true;
    default: return false;
  }
}

// Weight rows [r0, r1) x activation rows [i0, i1): tiles of I8::kTileW rows by
// I8::kTileX activations (4 weight rows for a single activation row).
template <class Fmt>
inline void run(const GemmArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  each_tile<I8::kTileX, I8::kTileW, 4>(r0, r1, i0, i1, [&]<int MR, int NR>(int64_t r, int64_t i) {
    const uint8_t* w = a.rows_data + r * a.row_bytes;
    float* y = a.y + i * a.rows + r;
    if constexpr (Fmt::kSuper) {
      const int64_t stride = a.cols / 256;
      tile_k<Fmt, MR, NR>(w, a.row_bytes, a.xqk + i * stride, stride, stride, y, a.rows);
    } else {
      const int64_t stride = a.cols / 32;
      tile<Fmt, MR, NR>(w, a.row_bytes, a.xq + i * stride, stride, stride / Fmt::kSub, y, a.rows);
    }
  });
}

// y rows [i0, i1) x output columns of the 32-row groups [p0, p1); a.xq holds x
// quantized. Every format of formats/registry.h, unpacked by its header.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  const int64_t r0 = p0 * kGemmPanel, r1 = std::min(a.rows, p1 * kGemmPanel);
  switch (a.row_type) {
#define PREFIXD_INT8_ROWS(T, Block) \
  case WeightType::T: run<Fmt<quant::Block>>(a, r0, r1, i0, i1); return;
    PREFIXD_BLOCK_FORMATS(PREFIXD_INT8_ROWS)  // formats/registry.h: each header's Int8Unpack
#undef PREFIXD_INT8_ROWS
    default: PREFIXD_CHECK(false, "not an int8 weight type");
  }
}

}  // namespace i8gemm

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
