// What a start-up self-check (self_check.h) of the CUDA backend runs on:
// device memory of one check, freed with it, and random values a 16-bit pool
// holds exactly. Used by the cuDNN prefill check (prefill_attention.cpp) and
// the flash-decode check (decode_self_check.cpp).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/dtype.h"

namespace prefixd::cuda {

// Device memory of one self-check, freed with it; uploads are ordered on
// `stream` (the host buffers outlive the check).
struct CheckAllocations {
  cudaStream_t stream;
  std::vector<void*> ptrs;
  explicit CheckAllocations(cudaStream_t s) : stream(s) {}
  ~CheckAllocations() {
    cudaStreamSynchronize(stream);
    for (void* p : ptrs) cudaFree(p);
  }
  CheckAllocations(const CheckAllocations&) = delete;
  CheckAllocations& operator=(const CheckAllocations&) = delete;
  Status upload(const void* host, size_t n_bytes, void** dev) {
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(n_bytes, 16)); e != cudaSuccess) {
      cudaGetLastError();
      return Status::error("cudaMalloc of " + std::to_string(n_bytes) + " bytes: " + cudaGetErrorString(e));
    }
    ptrs.push_back(p);
    if (n_bytes) PREFIXD_CUDA_CHECK(cudaMemcpyAsync(p, host, n_bytes, cudaMemcpyHostToDevice, stream));
    *dev = p;
    return Status::ok_status();
  }
};

// A value in [-1, 1] that `t` (F16 or BF16) holds exactly, and its bits.
inline uint16_t random_half(std::mt19937& rng, DType t, float* value) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float x = u(rng);
  const uint16_t bits = t == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x);
  *value = t == DType::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  return bits;
}

}  // namespace prefixd::cuda
