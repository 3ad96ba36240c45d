// Q8_0, the home of its decoding: the block layout, the scalar reference
// (ggml's dequantize_row_q8_0 values), the host/device chunk decoder the CUDA
// kernels run (the reference is a loop over it), and, for the CPU sets, the
// F32 rows and the int8 unpack over a set's vector layer. Q8_1, the
// activation block of the *_1 formats (never a weight), lies here too.
//
// A block is 32 signed 8-bit values with an F16 scale d: w = d * q.
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h), where the vector-layer section below is compiled too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/int8_unpack.h"

namespace PREFIXD_QUANT_NS {

struct BlockQ8_0 {
  static constexpr int kValues = kQK;
  static PREFIXD_HD void decode_chunk(const uint8_t* b, int c, float (&v)[8]);
  uint16_t d;        // F16
  int8_t qs[kQK];    // value j
};
// Q8_0 plus s = d * sum(q) (activations of the *_1 formats; never decoded).
struct BlockQ8_1 {
  uint16_t d, s;     // F16
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 && offsetof(BlockQ8_0, qs) == 2);

// v (8) f32 = values 8c .. 8c + 7 (c in [0, 4)) of the Q8_0 block at b.
PREFIXD_HD void BlockQ8_0::decode_chunk(const uint8_t* b, int c, float (&v)[8]) {
  const float d = chunk::f16(b);
  const chunk::Bytes8 q = chunk::bytes8(b + offsetof(BlockQ8_0, qs) + 8 * c);
  PREFIXD_UNROLL
  for (int t = 0; t < 8; ++t) v[t] = chunk::mul(static_cast<float>(static_cast<int8_t>(q[t])), d);
}

// The scalar reference (decode_ops.h).
PREFIXD_HD void dequant_q8_0(const BlockQ8_0& b, float* y) { dequant_by_chunks(b, y); }

#if defined(PREFIXD_ISA_NS)
// --- a CPU set's vector layer ---------------------------------------------------

// y (32) f32 = the block's values, Vec::N at a time.
template <class Vec>
inline void dequant_vec(const BlockQ8_0& b, float* y) {
  const auto d = Vec::set1(f16_to_f32(b.d));
#pragma GCC unroll 8
  for (int e = 0; e < kQK; e += Vec::N) Vec::store(y + e, Vec::mul(Vec::q_float(Vec::q_i8(b.qs + e)), d));
}

// On the set's 8-bit layer I8 (int8_unpack.h's protocol): q = the 32 signed values, sc = d.
template <class I8>
struct Int8Unpack<I8, BlockQ8_0> : Int8Q32<BlockQ8_0, true> {
  static inline __attribute__((always_inline)) void unpack(const BlockQ8_0& b, typename I8::B* q, float* sc, float*) {
    q[0] = I8::load(b.qs);
    sc[0] = I8::half(b.d);
  }
};
#endif  // PREFIXD_ISA_NS

}  // namespace
