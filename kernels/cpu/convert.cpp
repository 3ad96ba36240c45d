// Bulk F16/BF16 <-> F32 conversions on AVX-512, bit-identical to kernels/dtype.h
// (exported so tests can check the vector paths against the scalar ones).
#include <immintrin.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace prefixd::cpu {

void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, simd::maskz_load_f16(m, src + i));
  }
}

void f32_to_f16_n(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask(n - i);
    simd::mask_store_f16(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
  }
}

void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, simd::maskz_load_bf16(m, src + i));
  }
}

void f32_to_bf16_n(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask(n - i);
    simd::mask_store_bf16(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
  }
}

}  // namespace prefixd::cpu
