// `prefixd quantize IN.gguf OUT.gguf TYPE`: rewrites a model with its matrices
// quantized to one of llama.cpp's mixes (engine/model/quantize_model.h) and
// prints, per output type, the tensor count, bytes and round-trip error.
#pragma once

#include <string>

#include "engine/model/quantize_model.h"

namespace prefixd {

struct QuantizeOptions {
  std::string in_path;   // GGUF to read (F32, F16, BF16 or quantized tensors)
  std::string out_path;  // GGUF to write (atomically)
  std::string
      type_name;  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K (any case)
};

// The report as a table: a header line, one line per output type (tensors,
// bytes, relative RMS error, max abs error), and a total line.
std::string format_quantize_report(const QuantizeReport& report);

// Returns the process exit code: 0 after printing the report, 2 after
// printing the error (unknown type, unreadable input, unwritable output).
int run_quantize(const QuantizeOptions& opts);

}  // namespace prefixd
