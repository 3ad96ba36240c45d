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
      I8::quantize32(x + r * cols + b * 32, o.q, &o.d, &sum);
      o.ds = o.d * static_cast<float>(sum);
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

// A tile's MR weight rows are one contiguous span, read as MR short streams
// that the hardware prefetcher does not follow: at each step, fetch the
// span's next kStep bytes `distance` bytes ahead of the tile, linearly.
template <size_t kStep>
PREFIXD_VEC_INLINE void prefetch_ahead(const uint8_t* w, int64_t step, size_t distance) {
  const uint8_t* pf = w + distance + static_cast<size_t>(step) * kStep;
#pragma GCC unroll 16
  for (size_t o = 0; o < kStep + 64; o += 64) __builtin_prefetch(pf + o);
}

// --- weight formats -------------------------------------------------------------
// --- 32-value formats (x as XQ8Block) ----------------------------------------------
// Each format unpacks one block into kSub groups of 32 bytes `q` (signed weights
// when kSigned, else unsigned), a float scale per group and, when kMin, the
// group's constant term: value = scale * q + min.

// Q4_0/Q4_1 and Q5_0/Q5_1 (kernels/quant/formats/q4_0.h, q5_0.h), unpacked
// as q4_0.h writes it on this layer, one template for the four. Values stay
// unsigned (0..15, 0..31): the offset of 8 or 16 of Q4_0 and Q5_0 is a min of
// -8d or -16d, cheaper than signed bytes (vpabsb + vpsignb).
template <typename BlockT>
struct FmtQ4 {
  using Block = BlockT;
  static constexpr int kSub = 1;
  static constexpr bool kSuper = false;
  static constexpr bool kSigned = false, kMin = true;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, B* q, float* sc, float* mn) {
    quant::int8_unpack_q<I8>(b, q, sc, mn);
  }
};
using FmtQ4_0 = FmtQ4<quant::BlockQ4_0>;
using FmtQ4_1 = FmtQ4<quant::BlockQ4_1>;
using FmtQ5_0 = FmtQ4<quant::BlockQ5_0>;
using FmtQ5_1 = FmtQ4<quant::BlockQ5_1>;

// Q8_0 (formats/q8_0.h): signed values.
struct FmtQ8_0 {
  using Block = quant::BlockQ8_0;
  static constexpr int kSub = 1;
  static constexpr bool kSuper = false;
  static constexpr bool kSigned = true, kMin = false;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, B* q, float* sc, float*) {
    quant::int8_unpack_q8_0<I8>(b, q, sc);
  }
};

// IQ4_NL (formats/iq4_nl.h): the code book's signed values (-127..113), as Q8_0.
struct FmtIQ4_NL : FmtQ8_0 {
  using Block = quant::BlockIQ4_NL;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, B* q, float* sc, float*) {
    q[0] = quant::int8_iq4nl<I8>(b.qs);
    sc[0] = I8::half(b.d);
  }
};

// --- K formats (x as XQ8KBlock) -------------------------------------------------
// A 256-value super-block is 8 groups of 32: each group's integer products are
// scaled by its 16-bit scale inside vpmaddwd and summed in int32 over the whole
// super-block, then scaled once in floats by d(weight) * d(x). Mins (Q2_K, Q4_K,
// Q5_K) and the offsets of Q3_K (4) and Q6_K (32) come from the activation sums
// per 32 or per 16 (extra()). Weights are unsigned bytes, except IQ4_XS's
// (kSigned: q holds their magnitudes, `signs` the signed values, and the
// activations take their signs, as the 32-value Q8_0 does).

// vpshufb masks: kPickSame[k] puts 16-bit word k of each half in all 8 words of
// that half; kPickPair[j] puts word 2j in the low half and word 2j + 1 in the high.
struct PickMasks {
  alignas(32) uint8_t same[8][32];
  alignas(32) uint8_t pair[4][32];
  constexpr PickMasks() : same{}, pair{} {
    for (int k = 0; k < 8; ++k)
      for (int j = 0; j < 32; ++j) same[k][j] = static_cast<uint8_t>(2 * k + (j & 1));
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 32; ++j) pair[p][j] = static_cast<uint8_t>(2 * (2 * p + (j >= 16 ? 1 : 0)) + (j & 1));
  }
};
inline constexpr PickMasks kPick{};

// One K block unpacked: 8 groups of 32 unsigned bytes, their 16-bit scales
// (scale(k)), and the block's constant term for an x block (extra(): to be
// multiplied by x's d).
struct KUnpacked {
  B q[8];
  B signs[8];         // kSigned formats only: the signed weights (q: their magnitudes)
  B scales[2];        // 16-bit scales, the same 8 in both halves (Scale16: [0] scales 0..7, [1] 8..15)
  int16_t aux[16];    // Q4_K/Q5_K: the 8 mins; Q2_K: the 16 mins; Q3_K/Q6_K: the 16 scales
  float d, dmin;
};

// Q4_K and Q5_K (kernels/quant/formats/q4_k.h): the groups as q4_k.h
// unpacks them on this layer, the scales and mins from its k_scales.h; the
// group scale applies inside vpmaddwd, the mins against x's sums per 32.
struct ScaleMinK {
  static constexpr bool kSuper = true, kSigned = false, kExtra = true;
  // q (8): the 8 groups of 32 unsigned values.
  template <typename Block>
  static PREFIXD_VEC_INLINE void groups(const Block& b, B* q) {
    quant::int8_groups_k4<I8>(b, q);
  }
  template <typename Block>
  static PREFIXD_VEC_INLINE void unpack(const Block& b, KUnpacked& u) {
    groups(b, u.q);
    u.d = I8::half(b.d);
    u.dmin = I8::half(b.dmin);
    const quant::ScalesMinsK4 sm = quant::scales_mins_k4(b.scales);
    uint8_t sc[8], mn[8];
    std::memcpy(sc, &sm.scales, 8);
    std::memcpy(mn, &sm.mins, 8);
    u.scales[0] = I8::widen_u8x8(sc);
    for (int k = 0; k < 8; ++k) u.aux[k] = mn[k];
  }
  static PREFIXD_VEC_INLINE B scale(const KUnpacked& u, int k) { return I8::shuffle(u.scales[0], kPick.same[k]); }
  static PREFIXD_VEC_INLINE float extra(const KUnpacked& u, const XQ8KBlock& x) {
    return -u.dmin * static_cast<float>(I8::dot_i16x8(u.aux, x.sums32));
  }
};

struct FmtQ4_K : ScaleMinK {
  using Block = quant::BlockQ4_K;
};

struct FmtQ5_K : ScaleMinK {
  using Block = quant::BlockQ5_K;
};

// The formats of 16 groups of 16 (Q2_K, Q3_K, Q6_K): 16 signed 8-bit scales,
// group k of 32 bytes taking scales 2k (first 16 bytes) and 2k + 1 (last 16).
struct Scale16 {
  static constexpr bool kSuper = true, kSigned = false, kExtra = true;
  static PREFIXD_VEC_INLINE void set_scales(const int8_t* scales16, KUnpacked& u) {
    u.scales[0] = I8::widen_i8x8(scales16);
    u.scales[1] = I8::widen_i8x8(scales16 + 8);
  }
  static PREFIXD_VEC_INLINE B scale(const KUnpacked& u, int k) { return I8::shuffle(u.scales[k / 4], kPick.pair[k % 4]); }
};

// Q2_K (formats/q2_k.h): values 0..3, 4-bit scales and mins; w = d * sc * q - dmin * m.
struct FmtQ2_K : Scale16 {
  using Block = quant::BlockQ2_K;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, KUnpacked& u) {
    u.d = I8::half(b.d);
    u.dmin = I8::half(b.dmin);
    quant::int8_two_bit_groups<I8>(b.qs, u.q);
    int8_t scales[16];
    quant::q2_k_scales_mins(b, scales, u.aux);
    set_scales(scales, u);
  }
  static PREFIXD_VEC_INLINE float extra(const KUnpacked& u, const XQ8KBlock& x) {
    return -u.dmin * static_cast<float>(I8::dot_i16x16(u.aux, x.bsums));
  }
};

// Q3_K (formats/q3_k.h): values 0..7 kept unsigned; the offset of 4 is
// -4 * sum(scale * x sum) per 16; scales 6-bit signed.
struct FmtQ3_K : Scale16 {
  using Block = quant::BlockQ3_K;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, KUnpacked& u) {
    u.d = I8::half(b.d);
    quant::int8_groups_q3_k<I8>(b, u.q);
    int8_t scales[16];
    quant::q3_k_scales16(b.scales, scales);
    for (int j = 0; j < 16; ++j) u.aux[j] = scales[j];
    set_scales(scales, u);
  }
  static PREFIXD_VEC_INLINE float extra(const KUnpacked& u, const XQ8KBlock& x) {
    return -4.0f * u.d * static_cast<float>(I8::dot_i16x16(u.aux, x.bsums));
  }
};

// Q6_K (formats/q6_k.h): values 0..63 kept unsigned; the offset of 32 is
// -32 * sum(scale * x sum) per 16.
struct FmtQ6_K : Scale16 {
  using Block = quant::BlockQ6_K;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, KUnpacked& u) {
    u.d = I8::half(b.d);
    quant::int8_groups_q6_k<I8>(b, u.q);
    set_scales(b.scales, u);
    for (int j = 0; j < 16; ++j) u.aux[j] = b.scales[j];
  }
  static PREFIXD_VEC_INLINE float extra(const KUnpacked& u, const XQ8KBlock& x) {
    return -32.0f * u.d * static_cast<float>(I8::dot_i16x16(u.aux, x.bsums));
  }
};

// IQ4_XS (formats/iq4_nl.h): 8 groups of 32 through IQ4_NL's code book
// (signed), each with its 6-bit scale less 32; no offset.
struct FmtIQ4_XS {
  using Block = quant::BlockIQ4_XS;
  static constexpr bool kSuper = true, kSigned = true, kExtra = false;
  static PREFIXD_VEC_INLINE void unpack(const Block& b, KUnpacked& u) {
    u.d = I8::half(b.d);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      u.signs[k] = quant::int8_iq4nl<I8>(b.qs + 16 * k);
      u.q[k] = I8::abs(u.signs[k]);
    }
    const uint64_t scales = quant::iq4_xs_scales8(b);
    u.scales[0] = I8::widen_i8x8(reinterpret_cast<const int8_t*>(&scales));
  }
  static PREFIXD_VEC_INLINE B scale(const KUnpacked& u, int k) { return I8::shuffle(u.scales[0], kPick.same[k]); }
};

// y[i * ldy + m] for MR weight rows and NR activation rows of a K format.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile_k(const uint8_t* w, size_t row_bytes, const XQ8KBlock* x, int64_t x_stride,
                               int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  F acc[MR][NR];
  float extra[MR][NR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      acc[m][i] = I8::zero();
      extra[m][i] = 0.0f;
    }
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
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      acc[m][i] = I8::zero();
      mins[m][i] = 0.0f;
    }
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
          if constexpr (Fmt::kMin) mins[m][i] += mn[m][k] * xb.ds;
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
// quantized. Every format of formats/registry.h, through its Fmt adapter above.
inline void rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  const int64_t r0 = p0 * kGemmPanel, r1 = std::min(a.rows, p1 * kGemmPanel);
  switch (a.row_type) {
#define PREFIXD_INT8_ROWS(T, Block) \
  case WeightType::T: run<Fmt##T>(a, r0, r1, i0, i1); return;
    PREFIXD_BLOCK_FORMATS(PREFIXD_INT8_ROWS)  // formats/registry.h: Fmt<T> above for each
#undef PREFIXD_INT8_ROWS
    default: PREFIXD_CHECK(false, "not an int8 weight type");
  }
}

}  // namespace i8gemm

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
