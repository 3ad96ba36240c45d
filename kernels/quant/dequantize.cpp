// Row dequantization: block after block through quant_blocks.h.
#include "kernels/quant/dequantize.h"

#include "kernels/quant/quant_blocks.h"

namespace prefixd::quant {

void dequantize_row(WeightType type, const void* src, float* dst, int64_t n) {
  const WeightTypeTraits& t = weight_type_traits(type);
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / t.block_elements; ++i) {
    dequant_block(type, p + i * t.block_bytes, dst + i * t.block_elements);
  }
}

}  // namespace prefixd::quant
