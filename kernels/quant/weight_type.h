// The element types a weight matrix can arrive in from a GGUF file, numbered as
// ggml numbers them (so a GGUF tensor's type field is a WeightType), with the
// block geometry of each: a row of a quantized matrix is a run of blocks of
// `block_elements` values stored in `block_bytes` bytes. The block layouts and
// their dequantization are in quant_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace prefixd {

enum class WeightType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,   // activations only (never a weight in a file we load)
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activations only
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
};

struct WeightTypeTraits {
  WeightType type;
  const char* name;        // as ggml spells it: "Q4_K", "BF16"
  int32_t block_elements;  // values per block (1 for F32/F16/BF16)
  int32_t block_bytes;     // bytes per block
  bool weight;             // a type a model's weight may have
};

// Every type above, in enum order.
inline constexpr WeightTypeTraits kWeightTypes[] = {
    {WeightType::F32, "F32", 1, 4, true},
    {WeightType::F16, "F16", 1, 2, true},
    {WeightType::Q4_0, "Q4_0", 32, 18, true},
    {WeightType::Q4_1, "Q4_1", 32, 20, true},
    {WeightType::Q5_0, "Q5_0", 32, 22, true},
    {WeightType::Q5_1, "Q5_1", 32, 24, true},
    {WeightType::Q8_0, "Q8_0", 32, 34, true},
    {WeightType::Q8_1, "Q8_1", 32, 36, false},
    {WeightType::Q2_K, "Q2_K", 256, 84, true},
    {WeightType::Q3_K, "Q3_K", 256, 110, true},
    {WeightType::Q4_K, "Q4_K", 256, 144, true},
    {WeightType::Q5_K, "Q5_K", 256, 176, true},
    {WeightType::Q6_K, "Q6_K", 256, 210, true},
    {WeightType::Q8_K, "Q8_K", 256, 292, false},
    {WeightType::IQ4_NL, "IQ4_NL", 32, 18, true},
    {WeightType::IQ4_XS, "IQ4_XS", 256, 136, true},
    {WeightType::BF16, "BF16", 1, 2, true},
};

// Traits of a raw ggml type number; nullptr when this project does not know it.
inline const WeightTypeTraits* weight_type_traits(uint32_t ggml_type) {
  for (const WeightTypeTraits& t : kWeightTypes) {
    if (static_cast<uint32_t>(t.type) == ggml_type) return &t;
  }
  return nullptr;
}
inline const WeightTypeTraits& weight_type_traits(WeightType type) {
  return *weight_type_traits(static_cast<uint32_t>(type));
}
inline const char* weight_type_name(WeightType type) { return weight_type_traits(type).name; }

// A quantized (block) type: rows are runs of blocks, read through quant_blocks.h.
inline bool is_block_type(WeightType type) { return weight_type_traits(type).block_elements > 1; }

// Bytes of a row of `cols` values (cols a multiple of the block).
inline size_t weight_row_bytes(WeightType type, int64_t cols) {
  const WeightTypeTraits& t = weight_type_traits(type);
  return static_cast<size_t>(cols / t.block_elements) * static_cast<size_t>(t.block_bytes);
}

}  // namespace prefixd
