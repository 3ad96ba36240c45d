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

#include <functional>

#include "common/result.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
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
  // One run's output: waits for the stream (a device fault is logged with
  // `who`, then aborts: the context is lost), copies n floats of `dev` into
  // *out and zeroes `dev` for the next run.
  Status download_and_clear(float* dev, size_t n, std::vector<float>* out, const std::string& who,
                            const std::function<void(const std::string&)>& log) {
    out->assign(n, 0.0f);
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
      log(who + ": the device failed: " + cudaGetErrorString(e));
      PREFIXD_CUDA_CHECK(e);
    }
    PREFIXD_CUDA_CHECK(cudaMemcpyAsync(out->data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    PREFIXD_CUDA_CHECK(cudaMemsetAsync(dev, 0, n * sizeof(float), stream));
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Status::ok_status();
  }
};

// `layer`'s attention (heads, scale, window) over a check's own pools, q
// and output, and the check's packed batch at device `words`.
inline AttentionArgs check_attention_args(const AttentionArgs& layer, const void* k_pool, const void* v_pool,
                                          const void* q, void* out) {
  AttentionArgs a = layer;
  a.k_pool = k_pool;
  a.v_pool = v_pool;
  a.q = static_cast<const float*>(q);
  a.out = static_cast<float*>(out);
  return a;
}
inline DeviceBatch check_device_batch(const void* words, const PackedBatch& packed) {
  DeviceBatch db;
  db.words = static_cast<const int32_t*>(words);
  db.layout = packed;
  db.layout.words.clear();
  return db;
}

// A value in [-1, 1] that `t` (F16 or BF16) holds exactly, and its bits.
inline uint16_t random_half(std::mt19937& rng, DType t, float* value) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float x = u(rng);
  const uint16_t bits = t == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x);
  *value = t == DType::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  return bits;
}

}  // namespace prefixd::cuda
