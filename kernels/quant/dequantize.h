// Dequantization of whole rows of any weight type to F32: the reference every
// faster path (the CPU sets, CUDA) is tested against, and what the quantize
// tool and the loader's checks use.
#pragma once

#include <cstdint>

#include "kernels/quant/weight_type.h"

namespace prefixd::quant {

// dst (n) f32 = n values of `type` starting at `src` (n a multiple of the block).
void dequantize_row(WeightType type, const void* src, float* dst, int64_t n);

}  // namespace prefixd::quant
