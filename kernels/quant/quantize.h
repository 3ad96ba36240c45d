// Quantization of F32 rows to the ggml block formats, following llama.cpp's
// reference quantizers without an importance matrix (what `llama-quantize`
// runs without --imatrix), so a row quantized here has llama.cpp's bytes.
// The inverse is quant::dequantize_row (dequantize.h).
#pragma once

#include <cstdint>

#include "kernels/quant/weight_type.h"

namespace prefixd::quant {

// Whether quantize_row writes `type`: F32, F16, BF16 (plain conversions),
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
// IQ4_NL and IQ4_XS; that is, every WeightType.
bool can_quantize(WeightType type);

// dst (weight_row_bytes(type, n) bytes) = the n values at `src` (f32) in
// `type`. n must be a multiple of the type's block (32 or 256 values); the
// caller checks that (an unsupported type or a partial block aborts).
// Deterministic and thread-safe: no state beyond the arguments.
void quantize_row(WeightType type, const float* src, void* dst, int64_t n);

}  // namespace prefixd::quant
