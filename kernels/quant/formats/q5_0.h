// Q5_0 and Q5_1: their block layout and scalar references; the chunk
// decoder, the F32 rows and the int8 unpack are Q4_0's family templates
// (q4_0.h, kBits = 5), written once for the four formats.
//
// A block is 32 values with an F16 scale d, 5 bits each: the low 4 as Q4_0's
// (value j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of
// qs[j - 16]), the fifth bit of value j is bit j of qh.
// Q5_0: w = d * (q - 16). Q5_1: w = d * q + m (kMin).
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/q4_0.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ5_0 {
  static constexpr int kValues = kQK, kBits = 5;
  static constexpr bool kMin = false;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;            // F16
  uint8_t qh[4];         // bit j: the fifth bit of value j
  uint8_t qs[kQK / 2];   // as Q4_0's
};
struct BlockQ5_1 {
  static constexpr int kValues = kQK, kBits = 5;
  static constexpr bool kMin = true;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d, m;         // F16
  uint8_t qh[4];         // as Q5_0's
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);
static_assert(offsetof(BlockQ5_1, m) == 2 && offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ5_1, qs) == 8);

PREFIXD_HD void BlockQ5_0::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q<BlockQ5_0>(b, c, v); }
PREFIXD_HD void BlockQ5_1::decode_chunk(const uint8_t* b, int c, float (&v)[8]) { decode_chunk_q<BlockQ5_1>(b, c, v); }

// The scalar references (decode_ops.h).
PREFIXD_HD void dequant_q5_0(const BlockQ5_0& b, float* y) { dequant_by_chunks(b, y); }
PREFIXD_HD void dequant_q5_1(const BlockQ5_1& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
template <class Vec>
inline void dequant_vec(const BlockQ5_0& b, float* y) { dequant_q_vec<Vec>(b, y); }
template <class Vec>
inline void dequant_vec(const BlockQ5_1& b, float* y) { dequant_q_vec<Vec>(b, y); }
#endif  // PREFIXD_ISA_NS

}  // namespace
