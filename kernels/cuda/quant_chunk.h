// Decoding of one chunk (8 consecutive values) of a ggml weight block, per
// format, with the arithmetic of kernels/quant/quant_blocks.h: the same
// operations in the same order, never fused into a multiply-add, so each value
// equals quant::dequantize_row's bit for bit. Host and device (PREFIXD_HD): the
// CUDA kernels decode through it (quant_matvec.cu, quant_dequantize.cu) and
// tests/test_cuda_launch.cpp checks it on the CPU against dequantize_row.
// Formats with a header in kernels/quant/formats/ (Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K) decode there, where their reference is the same code; the rest are written here.
//
// Block addresses only need 2-byte alignment (every block size is even and
// rows are runs of whole blocks), so multi-byte fields are read as 16-bit words
// (quant::chunk, formats/decode_ops.h). Everything lives in registers: no
// array is indexed with a runtime value.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/result.h"
#include "kernels/dtype.h"
#include "kernels/quant/quant_blocks.h"
#include "kernels/quant/weight_type.h"

namespace prefixd::cuda {

inline constexpr int32_t kQuantChunkValues = 8;  // values decoded at once

namespace chunk = quant::chunk;  // the chunk arithmetic (formats/decode_ops.h)

// Chunks<T>::decode(block, c, v): v (8) f32 = values 8c .. 8c + 7 of the block
// at `block`, c in [0, kBlockValues / 8). Indices follow quant_blocks.h.
template <WeightType T>
struct Chunks;

// The formats with a header in kernels/quant/formats/: its block's decoder.
template <typename Block>
struct BlockChunks {
  static constexpr int kBlockValues = Block::kValues, kBlockBytes = sizeof(Block);
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) { Block::decode_chunk(b, c, v); }
};
template <>
struct Chunks<WeightType::Q4_0> : BlockChunks<quant::BlockQ4_0> {};
template <>
struct Chunks<WeightType::Q4_1> : BlockChunks<quant::BlockQ4_1> {};
template <>
struct Chunks<WeightType::Q5_0> : BlockChunks<quant::BlockQ5_0> {};
template <>
struct Chunks<WeightType::Q5_1> : BlockChunks<quant::BlockQ5_1> {};
template <>
struct Chunks<WeightType::Q4_K> : BlockChunks<quant::BlockQ4_K> {};
template <>
struct Chunks<WeightType::Q5_K> : BlockChunks<quant::BlockQ5_K> {};

// The 32-value formats: value j < 16 in the low nibble of qs[j], j >= 16 in
// the high nibble of qs[j - 16]; chunk c reads qs[8 (c & 1) ..] at shift 4 (c >> 1).

template <>
struct Chunks<WeightType::Q8_0> {  // d@0 qs@2, value j = qs[j]
  static constexpr int kBlockValues = 32, kBlockBytes = 34;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const float d = chunk::f16(b);
    const chunk::Bytes8 q = chunk::bytes8(b + 2 + 8 * c);
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t) v[t] = chunk::mul(static_cast<float>(static_cast<int8_t>(q[t])), d);
  }
};

template <>
struct Chunks<WeightType::IQ4_NL> {  // d@0 qs@2, nibbles index the code book
  static constexpr int kBlockValues = 32, kBlockBytes = 18;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const float d = chunk::f16(b);
    const chunk::Bytes8 q = chunk::bytes8(b + 2 + 8 * (c & 1));
    const int shift = 4 * (c >> 1);
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t)
      v[t] = chunk::mul(
          d, static_cast<float>(chunk::iq4nl(static_cast<uint32_t>(chunk::nibble(q, t, shift)))));
  }
};

// The 256-value super-blocks. Value k of Q2_K / Q3_K: half h = k / 128, then
// within it 2-bit plane j = (k / 32) % 4 of byte 16 s + l (s = (k / 16) % 2,
// l = k % 16) of the half's 32 bytes; scale index k / 16.

template <>
struct Chunks<WeightType::Q2_K> {  // scales@0 qs@16 d@80 dmin@82
  static constexpr int kBlockValues = 256, kBlockBytes = 84;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const int k = 8 * c, h = k >> 7, j = (k >> 5) & 3, s = (k >> 4) & 1, l = k & 15;
    const float d = chunk::f16(b + 80), dmin = chunk::f16(b + 82);
    const uint32_t sc = b[k >> 4];
    const float dl = chunk::mul(d, static_cast<float>(sc & 0xFu));
    const float ml = chunk::mul(dmin, static_cast<float>(sc >> 4));
    const chunk::Bytes8 q = chunk::bytes8(b + 16 + 32 * h + 16 * s + l);
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t)
      v[t] = chunk::sub(chunk::mul(dl, static_cast<float>((q[t] >> (2 * j)) & 3u)), ml);
  }
};

template <>
struct Chunks<WeightType::Q3_K> {  // hmask@0 qs@32 scales@96 d@108
  static constexpr int kBlockValues = 256, kBlockBytes = 110;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const int k = 8 * c, h = k >> 7, j = (k >> 5) & 3, s = (k >> 4) & 1, l = k & 15;
    const float d_all = chunk::f16(b + 108);
    // Scale i (quant::q3_k_scales): low 4 bits from byte i % 8 (high nibble
    // when i >= 8), high 2 bits from byte 8 + i % 4 at bit 2 (i / 4).
    const int i = k >> 4;
    const uint32_t lo = (static_cast<uint32_t>(b[96 + (i & 7)]) >> (4 * (i >> 3))) & 0xFu;
    const uint32_t hi = (static_cast<uint32_t>(b[104 + (i & 3)]) >> (2 * (i >> 2))) & 3u;
    const float dl = chunk::mul(d_all, static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32));
    const chunk::Bytes8 q = chunk::bytes8(b + 32 + 32 * h + 16 * s + l);
    const chunk::Bytes8 hm = chunk::bytes8(b + 16 * s + l);
    const int m_bit = 4 * h + j;
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t) {
      const int x = static_cast<int>((q[t] >> (2 * j)) & 3u) - (((hm[t] >> m_bit) & 1u) ? 0 : 4);
      v[t] = chunk::mul(dl, static_cast<float>(x));
    }
  }
};

// Q6_K: value k, half h = k / 128, group g = (k / 32) % 4, l = k % 32: low 4
// bits from ql[64 h + 32 (g % 2) + l] (high nibble when g >= 2), top 2 bits
// from qh[32 h + l] at bit 2 g, scale scales[8 h + l / 16 + 2 g], offset 32.
template <>
struct Chunks<WeightType::Q6_K> {  // ql@0 qh@128 scales@192 (int8) d@208
  static constexpr int kBlockValues = 256, kBlockBytes = 210;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const int k = 8 * c, h = k >> 7, g = (k >> 5) & 3, l = k & 31;
    const float d = chunk::f16(b + 208);
    const float dsc =
        chunk::mul(d, static_cast<float>(static_cast<int8_t>(b[192 + 8 * h + (l >> 4) + 2 * g])));
    const chunk::Bytes8 ql = chunk::bytes8(b + 64 * h + 32 * (g & 1) + l);
    const chunk::Bytes8 qh = chunk::bytes8(b + 128 + 32 * h + l);
    const int shift = 4 * (g >> 1);
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t) {
      const int x =
          (chunk::nibble(ql, t, shift) | static_cast<int>(((qh[t] >> (2 * g)) & 3u) << 4)) - 32;
      v[t] = chunk::mul(dsc, static_cast<float>(x));
    }
  }
};

// IQ4_XS: sub-block ib = k / 32 as an IQ4_NL block of 16 bytes at qs@8 + 16 ib,
// scale 6 bits (low 4 in scales_l@4, high 2 in scales_h@2) offset 32.
template <>
struct Chunks<WeightType::IQ4_XS> {  // d@0 scales_h@2 scales_l@4 qs@8
  static constexpr int kBlockValues = 256, kBlockBytes = 136;
  static PREFIXD_HD void decode(const uint8_t* b, int c, float (&v)[8]) {
    const int ib = c >> 2, cc = c & 3;
    const float d = chunk::f16(b);
    const uint32_t scales_h = chunk::u16(b + 2);
    const int ls =
        static_cast<int>(((static_cast<uint32_t>(b[4 + (ib >> 1)]) >> (4 * (ib & 1))) & 0xFu) |
                         (((scales_h >> (2 * ib)) & 3u) << 4));
    const float dl = chunk::mul(d, static_cast<float>(ls - 32));
    const chunk::Bytes8 q = chunk::bytes8(b + 8 + 16 * ib + 8 * (cc & 1));
    const int shift = 4 * (cc >> 1);
    PREFIXD_UNROLL
    for (int t = 0; t < 8; ++t)
      v[t] = chunk::mul(
          dl, static_cast<float>(chunk::iq4nl(static_cast<uint32_t>(chunk::nibble(q, t, shift)))));
  }
};

static_assert(Chunks<WeightType::Q4_0>::kBlockBytes == sizeof(quant::BlockQ4_0));
static_assert(Chunks<WeightType::Q4_1>::kBlockBytes == sizeof(quant::BlockQ4_1));
static_assert(Chunks<WeightType::Q5_0>::kBlockBytes == sizeof(quant::BlockQ5_0));
static_assert(Chunks<WeightType::Q5_1>::kBlockBytes == sizeof(quant::BlockQ5_1));
static_assert(Chunks<WeightType::Q8_0>::kBlockBytes == sizeof(quant::BlockQ8_0));
static_assert(Chunks<WeightType::Q2_K>::kBlockBytes == sizeof(quant::BlockQ2_K));
static_assert(Chunks<WeightType::Q3_K>::kBlockBytes == sizeof(quant::BlockQ3_K));
static_assert(Chunks<WeightType::Q4_K>::kBlockBytes == sizeof(quant::BlockQ4_K));
static_assert(Chunks<WeightType::Q5_K>::kBlockBytes == sizeof(quant::BlockQ5_K));
static_assert(Chunks<WeightType::Q6_K>::kBlockBytes == sizeof(quant::BlockQ6_K));
static_assert(Chunks<WeightType::IQ4_NL>::kBlockBytes == sizeof(quant::BlockIQ4_NL));
static_assert(Chunks<WeightType::IQ4_XS>::kBlockBytes == sizeof(quant::BlockIQ4_XS));

template <WeightType T>
using BlockTypeTag = std::integral_constant<WeightType, T>;

// Calls f(BlockTypeTag<T>{}) with the weight block type `type` as a compile-time
// value (host code: kernel template instantiation). Aborts for F32/F16/BF16
// and the activation-only formats, which have no Chunks.
template <typename F>
void dispatch_block_type(WeightType type, F&& f) {
  switch (type) {
    case WeightType::Q4_0:
      f(BlockTypeTag<WeightType::Q4_0>{});
      return;
    case WeightType::Q4_1:
      f(BlockTypeTag<WeightType::Q4_1>{});
      return;
    case WeightType::Q5_0:
      f(BlockTypeTag<WeightType::Q5_0>{});
      return;
    case WeightType::Q5_1:
      f(BlockTypeTag<WeightType::Q5_1>{});
      return;
    case WeightType::Q8_0:
      f(BlockTypeTag<WeightType::Q8_0>{});
      return;
    case WeightType::Q2_K:
      f(BlockTypeTag<WeightType::Q2_K>{});
      return;
    case WeightType::Q3_K:
      f(BlockTypeTag<WeightType::Q3_K>{});
      return;
    case WeightType::Q4_K:
      f(BlockTypeTag<WeightType::Q4_K>{});
      return;
    case WeightType::Q5_K:
      f(BlockTypeTag<WeightType::Q5_K>{});
      return;
    case WeightType::Q6_K:
      f(BlockTypeTag<WeightType::Q6_K>{});
      return;
    case WeightType::IQ4_NL:
      f(BlockTypeTag<WeightType::IQ4_NL>{});
      return;
    case WeightType::IQ4_XS:
      f(BlockTypeTag<WeightType::IQ4_XS>{});
      return;
    default:
      break;
  }
  PREFIXD_CHECK(false, "not a weight block type");
}

}  // namespace prefixd::cuda
