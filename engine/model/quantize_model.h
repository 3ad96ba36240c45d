// Rewrites a GGUF model with its weight matrices quantized to one of
// llama.cpp's mixes (quant_mix.h): what `prefixd quantize` and the quantized
// presets run. Metadata is copied (general.file_type and
// general.quantization_version set), matrices are dequantized to F32 when the
// input is F16/BF16/quantized and quantized row by row with quant::quantize_row,
// 1-D tensors (norms, biases, rope_freqs) are written as F32. Uses all hardware
// threads; safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"
#include "kernels/quant/weight_type.h"

namespace prefixd {

// The tensors of one output type and how far they moved.
struct QuantizeTypeStats {
  WeightType type = WeightType::F32;
  int64_t n_tensors = 0;
  uint64_t n_bytes = 0;  // tensor data bytes in the output file
  int64_t n_values = 0;
  double sum_sq_error = 0;   // sum over values of (w - dequantized)^2, w the input as F32
  double sum_sq = 0;         // sum of w^2
  double max_abs_error = 0;  // max |w - dequantized|
  // sqrt(sum_sq_error / sum_sq); 0 for an all-zero input.
  double rel_rms_error() const;
};

struct QuantizeReport {
  std::string mix;                         // "Q4_K_M"
  uint32_t file_type = 0;                  // the general.file_type written
  uint64_t in_tensor_bytes = 0;            // tensor data of the input
  uint64_t out_tensor_bytes = 0;           // tensor data of the output
  std::vector<QuantizeTypeStats> by_type;  // one per output type, in ggml type order
  std::vector<std::pair<std::string, WeightType>>
      tensors;  // every tensor's output type, in file order
};

// Reads the GGUF at `in_path`, writes the quantized model to `out_path`
// (atomically). `type_name` is one of quant_mix_names(), any case. Fails
// naming the value and what is accepted for an unknown type name, a missing
// or non-GGUF input, or an unwritable output. `report` may be null.
Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const std::string& type_name, QuantizeReport* report);

// The same from a file already parsed (the quantized presets pass their F32
// model straight from memory). `in` must stay alive during the call.
Status quantize_gguf(const GgufFile& in, const std::string& out_path, const std::string& type_name,
                     QuantizeReport* report);

}  // namespace prefixd
