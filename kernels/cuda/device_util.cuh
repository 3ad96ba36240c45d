// Device helpers shared by the kernels: element loads/stores in a KV or weight
// dtype through the conversions of kernels/dtype.h, and warp reductions.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace prefixd::cuda {

template <DType T>
struct Elem;
template <>
struct Elem<DType::F32> {
  using Storage = float;
  static __device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
  static __device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
};
template <>
struct Elem<DType::F16> {
  using Storage = uint16_t;
  static __device__ __forceinline__ float load(const uint16_t* p, int64_t i) { return f16_to_f32(p[i]); }
  static __device__ __forceinline__ void store(uint16_t* p, int64_t i, float v) { p[i] = f32_to_f16(v); }
};
template <>
struct Elem<DType::BF16> {
  using Storage = uint16_t;
  static __device__ __forceinline__ float load(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }
  static __device__ __forceinline__ void store(uint16_t* p, int64_t i, float v) { p[i] = f32_to_bf16(v); }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Calls f.template operator()<T>() with the DType as a template argument.
#define PREFIXD_DISPATCH_DTYPE(dtype, ...)                   \
  switch (dtype) {                                           \
    case DType::F32: {                                       \
      constexpr DType kT = DType::F32;                       \
      __VA_ARGS__;                                           \
    } break;                                                 \
    case DType::F16: {                                       \
      constexpr DType kT = DType::F16;                       \
      __VA_ARGS__;                                           \
    } break;                                                 \
    case DType::BF16: {                                      \
      constexpr DType kT = DType::BF16;                      \
      __VA_ARGS__;                                           \
    } break;                                                 \
  }

}  // namespace prefixd::cuda
