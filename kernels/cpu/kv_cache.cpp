// kv_store: writes the batch's new K/V rows (f32) into the paged pool in the
// pool dtype, rounding to nearest even exactly as kernels/dtype.h does (the
// instruction set's bulk conversions).
#include <cstring>

#include "kernels/cpu/cpu_backend.h"

namespace prefixd::cpu {

namespace {

// dst (n) in `dtype` = src (n) f32.
void store_row(const CpuKernels& k, DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case DType::F16:
      k.f32_to_f16_n(src, static_cast<uint16_t*>(dst), n);
      break;
    case DType::BF16:
      k.f32_to_bf16_n(src, static_cast<uint16_t*>(dst), n);
      break;
  }
}

}  // namespace

void kv_store(const CpuKernels& k, const CpuBatch& batch, KvPool& kv, int32_t layer, const float* key,
              const float* value) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  const int64_t row = static_cast<int64_t>(g.n_kv_heads) * g.head_dim;
  const size_t row_bytes = row * dtype_bytes(g.dtype);
  const int64_t n_slots = static_cast<int64_t>(g.layer_blocks(layer)) * g.block_size;
  auto* k_base = static_cast<uint8_t*>(kv.k[layer]);
  auto* v_base = static_cast<uint8_t*>(kv.v[layer]);
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const int64_t slot = batch.slots[t];
    PREFIXD_CHECK(slot >= 0 && slot < n_slots, "KV slot out of range");
    store_row(k, g.dtype, key + t * row, k_base + slot * row_bytes, row);
    store_row(k, g.dtype, value + t * row, v_base + slot * row_bytes, row);
  }
}

}  // namespace prefixd::cpu
