// The quantization mixes prefixd writes (llama.cpp's LLAMA_FTYPE names such as
// Q4_K_M) and the type each tensor of a model gets under one: llama.cpp's
// llama_tensor_get_type for dense llama-family models, including its per-layer
// rules and its fallback for rows the chosen type's blocks do not divide.
// Plain functions of their arguments; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/quant/weight_type.h"

namespace prefixd {

struct QuantMix {
  std::string name;        // as llama-quantize spells it: "Q4_K_M"
  uint32_t file_type = 0;  // llama.cpp's LLAMA_FTYPE_MOSTLY_* number, written as general.file_type
  WeightType base = WeightType::Q8_0;  // the type most matrices get
};

// The accepted mixes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K.
const std::vector<QuantMix>& quant_mixes();
// "Q8_0, Q4_0, ..." for messages and help texts.
std::string quant_mix_names();
// Case-insensitive lookup; an unknown name fails with a message naming it and the accepted names.
Result<QuantMix> find_quant_mix(const std::string& name);

// One tensor as the mix rules see it.
struct TensorShape {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first (the row length)
};

// Whether llama.cpp quantizes this tensor at all: at least 2-D, named
// "*weight", not a norm, not one of the small tensors llama.cpp keeps.
bool is_quantizable_tensor(const TensorShape& t);

// The output type of every tensor (same order as `tensors`) under `mix` for a
// model of `n_layers` blocks. Tensors that are not quantized get F32. The
// per-layer counters run in llama.cpp's order (by layer, then by name), and an
// absent output.weight means the output reuses token_embd.weight (tied), which
// then follows the output's rule.
std::vector<WeightType> plan_quant_types(const QuantMix& mix,
                                         const std::vector<TensorShape>& tensors, int n_layers);

// llama.cpp's replacement when rows of `cols` values do not fill `type`'s
// blocks: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS ->
// IQ4_NL; F16 when even the replacement does not fit. Returns `type` when it fits.
WeightType quant_fallback_type(WeightType type, int64_t cols);

}  // namespace prefixd
