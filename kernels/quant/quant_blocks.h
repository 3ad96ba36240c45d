// The ggml block formats as they lie in a GGUF file, and the dequantization of
// one block to F32 with ggml's own arithmetic (same operations, same order), so
// a row dequantized here equals llama.cpp's dequantization. Each weight format
// has its own header in kernels/quant/formats/ (layout, scale unpack, scalar
// reference, chunk decoder), listed in formats/registry.h; this file adds the
// activation-only Q8_K block and the dispatch over the registry.
//
// Usable from host and device code (PREFIXD_HD). Each CPU instruction set's
// translation unit includes this file with PREFIXD_ISA_NS defined; the
// functions then live in that set's namespace so code compiled with one set's
// flags is never linked in for another (see tests/scripts/test_cpu_isa_isolation.sh).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/quant/formats/decode_ops.h"
#include "kernels/quant/formats/registry.h"
#include "kernels/quant/weight_type.h"

namespace PREFIXD_QUANT_NS {

// Activations of the K formats: F32 scale, and the sums of each 16 values
// (never a weight). Q8_1, the activations of the *_1 formats, is q8_0.h's.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// One block of `type` (block_elements values; F32/F16/BF16: one value) to F32.
// `src` needs no alignment beyond 2 bytes (GGUF data is 32-byte aligned and
// every block size is even).
PREFIXD_HD void dequant_block(WeightType type, const void* src, float* y) {
  switch (type) {
    case WeightType::F32: memcpy(y, src, 4); return;
    case WeightType::F16: y[0] = f16_to_f32(*static_cast<const uint16_t*>(src)); return;
    case WeightType::BF16: y[0] = bf16_to_f32(*static_cast<const uint16_t*>(src)); return;
#define PREFIXD_DEQUANT_BLOCK(T, Block) \
  case WeightType::T: dequant_by_chunks(*static_cast<const Block*>(src), y); return;
      PREFIXD_BLOCK_FORMATS(PREFIXD_DEQUANT_BLOCK)
#undef PREFIXD_DEQUANT_BLOCK
    case WeightType::Q8_1:
    case WeightType::Q8_K: return;  // activation formats: never dequantized as weights
  }
}

}  // namespace
