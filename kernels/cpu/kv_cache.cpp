// kv_store: writes the batch's new K/V rows (f32) into the paged pool in the
// pool dtype, rounding to nearest even exactly as kernels/dtype.h does.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace prefixd::cpu {

namespace {

// dst (n) in `dtype` = src (n) f32.
void store_row(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = simd::tail_mask(n - i);
        simd::mask_store_f16(d + i, m, _mm512_maskz_loadu_ps(m, src + i));
      }
      break;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = simd::tail_mask(n - i);
        simd::mask_store_bf16(d + i, m, _mm512_maskz_loadu_ps(m, src + i));
      }
      break;
    }
  }
}

}  // namespace

void kv_store(ThreadPool& pool, const CpuBatch& batch, KvPool& kv, int32_t layer, const float* k,
              const float* v) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  const int64_t row = static_cast<int64_t>(g.n_kv_heads) * g.head_dim;
  const size_t row_bytes = row * dtype_bytes(g.dtype);
  const int64_t n_slots = static_cast<int64_t>(g.n_blocks) * g.block_size;
  auto* k_base = static_cast<uint8_t*>(kv.k[layer]);
  auto* v_base = static_cast<uint8_t*>(kv.v[layer]);
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const int64_t slot = batch.slots[t];
    PREFIXD_CHECK(slot >= 0 && slot < n_slots, "KV slot out of range");
    store_row(g.dtype, k + t * row, k_base + slot * row_bytes, row);
    store_row(g.dtype, v + t * row, v_base + slot * row_bytes, row);
  }
}

}  // namespace prefixd::cpu
