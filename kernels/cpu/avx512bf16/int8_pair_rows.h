// Decode products of the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL) in 512-bit registers with AVX512_VNNI (the avx512bf16 set): two
// consecutive blocks of a weight row are unpacked into one zmm of 64 unsigned
// bytes and multiplied with the two x blocks in one vpdpbusd; each half is
// scaled by its block's d times x's d, and the constant term (the mins, and the
// offsets that make signed values unsigned: 8, 16, 128) comes from x's sums
// (XQ8Block::ds). Why: generic/int8_gemm.h's 256-bit tiles take one block per
// vector (Q8_0: abs, sign, dot, two float scalings per 32 weights); here a
// pair of blocks costs one to four instructions to unpack, one vpdpbusd and
// one float scaling. Decode products of 1536 x 576, one Zen 5 thread: Q4_0
// 24 -> 15 us, Q5_0 31 -> 19, IQ4_NL 28 -> 17, Q8_0 17.8 -> 15 (docs/cpu.md). gemm.cpp sends calls of fewer than kInt8MaxRows x rows here
// (through the set's gemm_int8_rows).
//
// Batch invariance: each output y[i][r] sums its block pairs in order into one
// float accumulator (and the constant terms into another) and reduces them
// once, whatever the tile it falls in.
#pragma once

#if !defined(__AVX512VNNI__)
#error "avx512bf16/int8_pair_rows.h needs AVX512_VNNI (the avx512bf16 set)"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/generic/int8_gemm.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace i8pair {

using Z = __m512i;

// How far ahead of the block pairs being multiplied the next ones are
// prefetched: twice generic/int8_gemm.h's distance (llama-245m Q8_0 decode,
// Zen 5, 2 threads: 2 KiB 136-142 t/s, 4 KiB 163-168, 8 KiB 168-176, 16 KiB 163-168).
constexpr size_t kPrefetchBytes = 8192;

// Two blocks of a row unpacked: q holds block 0's 32 values then block 1's
// (unsigned bytes); weight = d[k] * q + m[k] for block k (lanes 0, 1 of d and
// m). Formats without a min (kMin false) leave m unset: their m is d times
// the format's kOffset (the offset that made the values unsigned), and their
// constant terms are summed as d * x's sums and scaled by kOffset once at the
// end. kOffset is a power of two, so the sum equals the one of the terms
// (d * kOffset) * s bit for bit, one multiplication a block pair less.
struct Pair {
  Z q;
  __m128 d, m;
};

PREFIXD_VEC_INLINE Z bytes(uint8_t v) { return _mm512_set1_epi8(static_cast<char>(v)); }

// 32 bytes at p0 and 32 at p1 in one zmm.
PREFIXD_VEC_INLINE Z load_pair32(const void* p0, const void* p1) {
  const __m256i lo = _mm256_loadu_si256(static_cast<const __m256i*>(p0));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(static_cast<const __m256i*>(p1)), 1);
}

// 16 nibble bytes of each block -> [lo 0, hi 0 | lo 1, hi 1]: values 0..15 are
// the low nibbles, 16..31 the high ones (the 32-value formats' layout).
PREFIXD_VEC_INLINE Z nibbles_pair(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i v = _mm256_setr_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  const Z twice = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(v));
  return _mm512_and_si512(_mm512_mask_srli_epi16(twice, 0xFF00FF00u, twice, 4), bytes(0x0F));
}

// Two F16 values as floats in lanes 0 and 1.
PREFIXD_VEC_INLINE __m128 halves2(uint16_t a, uint16_t b) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (static_cast<uint32_t>(b) << 16))));
}

// The fifth bits of two blocks (bit j of qh: value j) as a byte mask.
template <class Block>
PREFIXD_VEC_INLINE __mmask64 high_bits(const Block& b0, const Block& b1) {
  uint32_t h0, h1;
  std::memcpy(&h0, b0.qh, 4);
  std::memcpy(&h1, b1.qh, 4);
  return _cvtu64_mask64(h0 | (static_cast<uint64_t>(h1) << 32));
}

struct PairQ4_0 {
  static constexpr bool kMin = false;
  static constexpr float kOffset = -8.0f;
  using Block = quant::BlockQ4_0;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    p.q = nibbles_pair(b0.qs, b1.qs);
    p.d = halves2(b0.d, b1.d);
  }
};

struct PairQ4_1 {
  static constexpr bool kMin = true;  // w = d * q + m
  using Block = quant::BlockQ4_1;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    p.q = nibbles_pair(b0.qs, b1.qs);
    p.d = halves2(b0.d, b1.d);
    p.m = halves2(b0.m, b1.m);
  }
};

struct PairQ5_0 {
  static constexpr bool kMin = false;
  static constexpr float kOffset = -16.0f;
  using Block = quant::BlockQ5_0;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    const Z lo = nibbles_pair(b0.qs, b1.qs);
    p.q = _mm512_mask_add_epi8(lo, high_bits(b0, b1), lo, bytes(0x10));
    p.d = halves2(b0.d, b1.d);
  }
};

struct PairQ5_1 {
  static constexpr bool kMin = true;  // w = d * q + m
  using Block = quant::BlockQ5_1;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    const Z lo = nibbles_pair(b0.qs, b1.qs);
    p.q = _mm512_mask_add_epi8(lo, high_bits(b0, b1), lo, bytes(0x10));
    p.d = halves2(b0.d, b1.d);
    p.m = halves2(b0.m, b1.m);
  }
};

// Q8_0: signed values made unsigned by flipping the top bit (q + 128).
struct PairQ8_0 {
  static constexpr bool kMin = false;
  static constexpr float kOffset = -128.0f;
  using Block = quant::BlockQ8_0;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    p.q = _mm512_xor_si512(load_pair32(b0.qs, b1.qs), bytes(0x80));
    p.d = halves2(b0.d, b1.d);
  }
};

// IQ4_NL's code book plus 128 (unsigned), as a vpshufb table in every lane.
alignas(16) inline constexpr uint8_t kIq4nlPlus128[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                          129, 141, 153, 166, 181, 197, 217, 241};

struct PairIQ4_NL {
  static constexpr bool kMin = false;
  static constexpr float kOffset = -128.0f;
  using Block = quant::BlockIQ4_NL;
  static PREFIXD_VEC_INLINE void unpack(const Block& b0, const Block& b1, Pair& p) {
    const Z table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlPlus128)));
    p.q = _mm512_shuffle_epi8(table, nibbles_pair(b0.qs, b1.qs));
    p.d = halves2(b0.d, b1.d);
  }
};

// vpermps indices: lane 0 of a vector in lanes 0-7, lane 1 in lanes 8-15.
alignas(64) inline constexpr int32_t kPairLanes[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};

// One x row's two blocks: their 64 bytes, [d0, d1] and the sums the weight
// format's constant terms multiply, [s0, s1] (kMin: XQ8Block::s, else ds).
struct XPair {
  Z q;
  __m128 d, ds;
};

template <bool kMin>
PREFIXD_VEC_INLINE float x_sum(const XQ8Block& a) {
  return kMin ? a.s : a.ds;
}

template <bool kMin>
PREFIXD_VEC_INLINE XPair x_pair(const XQ8Block& a, const XQ8Block& b) {
  return {load_pair32(a.q, b.q), _mm_setr_ps(a.d, b.d, 0, 0), _mm_setr_ps(x_sum<kMin>(a), x_sum<kMin>(b), 0, 0)};
}

// The last block of an odd count: block 1 is absent (zero bytes, zero scales).
template <bool kMin>
PREFIXD_VEC_INLINE XPair x_single(const XQ8Block& a) {
  return {_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q))),
          _mm_setr_ps(a.d, 0, 0, 0), _mm_setr_ps(x_sum<kMin>(a), 0, 0, 0)};
}

// acc += block pair p · x pair xp; cst += its constant terms (without a
// min: divided by the format's kOffset).
template <bool kMin>
PREFIXD_VEC_INLINE void accumulate(const Pair& p, const XPair& xp, __m512& acc, __m128& cst) {
  const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), p.q, xp.q));
  const __m512 scale = _mm512_permutexvar_ps(_mm512_load_si512(kPairLanes), _mm512_castps128_ps512(_mm_mul_ps(p.d, xp.d)));
  acc = _mm512_fmadd_ps(dot, scale, acc);
  cst = _mm_fmadd_ps(kMin ? p.m : p.d, xp.ds, cst);
}

// The constant terms' sum of the two lanes of cst (see Pair).
template <class Fmt>
PREFIXD_VEC_INLINE float constant_sum(__m128 cst) {
  const float sum = _mm_cvtss_f32(cst) + _mm_cvtss_f32(_mm_movehdup_ps(cst));
  if constexpr (Fmt::kMin) {
    return sum;
  } else {
    return Fmt::kOffset * sum;
  }
}

// y[i * ldy + m] for MR weight rows (w, row_bytes apart) and NR x rows
// (x_stride blocks apart), over n_blocks blocks.
template <class Fmt, int MR, int NR>
PREFIXD_VEC_INLINE void tile(const uint8_t* w, size_t row_bytes, const XQ8Block* x, int64_t x_stride,
                             int64_t n_blocks, float* y, int64_t ldy) {
  using Block = typename Fmt::Block;
  const Block zero_block{};  // the pair's second block when n_blocks is odd
  __m512 acc[MR][NR];
  __m128 cst[MR][NR];
  i8gemm::fill(acc, _mm512_setzero_ps(), cst, _mm_setzero_ps());
  for (int64_t b = 0; b < n_blocks; b += 2) {
    const bool single = b + 1 == n_blocks;
    i8gemm::prefetch_ahead<MR * 2 * sizeof(Block)>(w, b / 2, kPrefetchBytes);
    XPair xp[NR];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      const XQ8Block* xi = x + i * x_stride + b;
      xp[i] = single ? x_single<Fmt::kMin>(xi[0]) : x_pair<Fmt::kMin>(xi[0], xi[1]);
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const Block* row = reinterpret_cast<const Block*>(w + m * row_bytes) + b;
      Pair p;
      Fmt::unpack(row[0], single ? zero_block : row[1], p);
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) accumulate<Fmt::kMin>(p, xp[i], acc[m][i], cst[m][i]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      y[i * ldy + m] = _mm512_reduce_add_ps(acc[m][i]) + constant_sum<Fmt>(cst[m][i]);
    }
}

// Weight rows [r0, r1) x activation rows [i0, i1): tiles of 4 x rows by one
// weight row, the last x rows one by one against 4 weight rows.
template <class Fmt>
inline void run(const GemmArgs& a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
  const int64_t stride = a.cols / 32;
  i8gemm::each_tile<4, 1, 4>(r0, r1, i0, i1, [&]<int MR, int NR>(int64_t r, int64_t i) {
    tile<Fmt, MR, NR>(a.rows_data + r * a.row_bytes, a.row_bytes, a.xq + i * stride, stride, stride,
                      a.y + i * a.rows + r, a.rows);
  });
}

// y rows [i0, i1) x the weight rows of the 32-row groups [p0, p1), for the
// formats above; false (nothing done) for any other row type.
inline bool rows(const GemmArgs& a, int64_t p0, int64_t p1, int64_t i0, int64_t i1) {
  const int64_t r0 = p0 * kGemmPanel, r1 = std::min(a.rows, p1 * kGemmPanel);
  switch (a.row_type) {
    case WeightType::Q4_0: run<PairQ4_0>(a, r0, r1, i0, i1); return true;
    case WeightType::Q4_1: run<PairQ4_1>(a, r0, r1, i0, i1); return true;
    case WeightType::Q5_0: run<PairQ5_0>(a, r0, r1, i0, i1); return true;
    case WeightType::Q5_1: run<PairQ5_1>(a, r0, r1, i0, i1); return true;
    case WeightType::Q8_0: run<PairQ8_0>(a, r0, r1, i0, i1); return true;
    case WeightType::IQ4_NL: run<PairIQ4_NL>(a, r0, r1, i0, i1); return true;
    default: return false;
  }
}

}  // namespace i8pair

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
