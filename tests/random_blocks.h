// Random ggml weight blocks of every block format, for tests: random bytes with
// each F16 scale field (d, and m or dmin where the format has one) replaced by
// a finite value of chosen magnitude, so every weight dequantizes to a finite
// number. The other bits of every format are valid whatever their value.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/quant/weight_type.h"

namespace prefixd::testing {

// Every weight type stored as blocks (quantized), in enum order.
inline std::vector<WeightType> block_weight_types() {
  std::vector<WeightType> out;
  for (const WeightTypeTraits& t : kWeightTypes)
    if (t.weight && t.block_elements > 1) out.push_back(t.type);
  return out;
}

// Byte offsets of the F16 scale fields in one block of `type` (the layouts of
// kernels/quant/quant_blocks.h).
inline std::vector<int> f16_scale_offsets(WeightType type) {
  switch (type) {
    case WeightType::Q4_0:
    case WeightType::Q5_0:
    case WeightType::Q8_0:
    case WeightType::IQ4_NL:
    case WeightType::IQ4_XS:
      return {0};
    case WeightType::Q4_1:
    case WeightType::Q5_1:
    case WeightType::Q4_K:
    case WeightType::Q5_K:
      return {0, 2};
    case WeightType::Q2_K:
      return {80, 82};
    case WeightType::Q3_K:
      return {108};
    case WeightType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// A (rows, cols) matrix of block type `type`: rows of whole blocks as in a
// GGUF file, scales of either sign with magnitude in [scale_lo, scale_hi].
inline std::vector<uint8_t> random_weight_blocks(WeightType type, int64_t rows, int64_t cols,
                                                 uint32_t seed, float scale_lo = 1e-3f,
                                                 float scale_hi = 1e-2f) {
  const WeightTypeTraits& t = weight_type_traits(type);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * weight_row_bytes(type, cols));
  std::mt19937 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> magnitude(scale_lo, scale_hi);
  const std::vector<int> offsets = f16_scale_offsets(type);
  for (size_t block = 0; block < out.size() / t.block_bytes; ++block) {
    for (int off : offsets) {
      const float v = (rng() & 1) ? -magnitude(rng) : magnitude(rng);
      const uint16_t h = f32_to_f16(v);
      std::memcpy(out.data() + block * t.block_bytes + off, &h, 2);
    }
  }
  return out;
}

}  // namespace prefixd::testing
