// The 12-byte packing of the 8 six-bit scales and 8 six-bit mins of a Q4_K or
// Q5_K super-block (ggml's get_scale_min_k4), packed and unpacked here only:
// every decoder of those formats (the scalar reference and the host/device
// chunk decoder in q4_k.h, the CPU sets' int8 tiles and panels, the F32 rows)
// takes its scales from this file.
//
// Layout, sub-block j = 0..7, bytes p[0..11]:
//   j < 4:  scale = p[j] & 63,                            min = p[j + 4] & 63
//   j >= 4: scale = (p[j + 4] & 15) | (p[j - 4] >> 6) << 4, min = (p[j + 4] >> 4) | (p[j] >> 6) << 4
// The two bit formulas (first_half, second_half) act on bytes side by side in
// any unsigned word: one byte (one sub-block, the device's chunk decoder) or
// 8 at once in a 64-bit word (all sub-blocks, the CPU tiles).
//
// Host and device; in a CPU set's namespace within its translation unit
// (decode_ops.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"

namespace PREFIXD_QUANT_NS {

namespace k_scales {

// Byte b repeated in every byte of W.
template <typename W>
PREFIXD_HD W each_byte(uint8_t b) {
  return static_cast<W>(0x0101010101010101ull * b);
}

// Scales and mins 0-3: the low 6 bits of bytes 0-3 (scales) and 4-7 (mins).
template <typename W>
PREFIXD_HD W first_half(W low) {
  return low & each_byte<W>(0x3f);
}

// Scales and mins 4-7: 4 low bits from `nibbles` (byte 8 + j's low nibble for
// a scale, its high nibble shifted down for a min), the top 2 from the top 2
// of `tops` (byte j for a scale, j + 4 for a min), per byte.
template <typename W>
PREFIXD_HD W second_half(W nibbles, W tops) {
  return (nibbles & each_byte<W>(0x0f)) | ((tops >> 2) & each_byte<W>(0x30));
}

}  // namespace k_scales

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 packed bytes q.
PREFIXD_HD void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  using k_scales::first_half;
  using k_scales::second_half;
  if (j < 4) {
    *d = static_cast<uint8_t>(first_half<uint32_t>(q[j]));
    *m = static_cast<uint8_t>(first_half<uint32_t>(q[j + 4]));
  } else {
    *d = static_cast<uint8_t>(second_half<uint32_t>(q[j + 4], q[j - 4]));
    *m = static_cast<uint8_t>(second_half<uint32_t>(q[j + 4] >> 4, q[j]));
  }
}

// All 8 scales and mins of a block: byte j of `scales` (`mins`) is sub-block j's.
struct ScalesMinsK4 {
  uint64_t scales, mins;
};

PREFIXD_HD ScalesMinsK4 scales_mins_k4(const uint8_t* packed) {
  using k_scales::first_half;
  using k_scales::second_half;
  uint64_t u01;  // bytes 0-7
  uint32_t u2;   // bytes 8-11
  memcpy(&u01, packed, 8);
  memcpy(&u2, packed + 8, 4);
  const uint64_t lo = first_half(u01);  // scales 0-3, mins 0-3
  const uint64_t hi = second_half(u2 | (static_cast<uint64_t>(u2 >> 4) << 32), u01);  // scales 4-7, mins 4-7
  return {(lo & 0xFFFFFFFFull) | (hi << 32), (lo >> 32) | (hi & 0xFFFFFFFF00000000ull)};
}

// The inverse: scales ls[8] and mins lm[8] (each < 64) -> the 12 bytes `packed`.
PREFIXD_HD void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
  }
}

}  // namespace
