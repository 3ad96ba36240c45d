// KV store: k, v (n_tokens, kv_dim) f32 written into one layer of the paged
// pool, viewed as (n_blocks * block_size, kv_dim) in the pool dtype, at the
// batch's slots. One block per token row. (Whole-block copies for tiers and
// copy-on-write are plain cudaMemcpyAsync calls in cuda_backend.cpp.)
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace prefixd::cuda {
namespace {

template <DType T>
__global__ void kv_store_kernel(const float* k, const float* v, typename Elem<T>::Storage* k_pool,
                                typename Elem<T>::Storage* v_pool, int32_t kv_dim,
                                const int32_t* slots) {
  const int64_t row = blockIdx.x;
  const int64_t dst = static_cast<int64_t>(slots[row]) * kv_dim;
  for (int32_t j = threadIdx.x; j < kv_dim; j += blockDim.x) {
    Elem<T>::store(k_pool, dst + j, k[row * kv_dim + j]);
    Elem<T>::store(v_pool, dst + j, v[row * kv_dim + j]);
  }
}

}  // namespace

void launch_kv_store(const float* k, const float* v, void* k_pool, void* v_pool, DType type,
                     int32_t kv_dim, const DeviceBatch& b, cudaStream_t stream) {
  const LaunchConfig c = row_launch(b.layout.n_tokens, kv_dim);
  if (c.empty()) return;
  PREFIXD_DISPATCH_DTYPE(type, {
    using S = typename Elem<kT>::Storage;
    kv_store_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        k, v, static_cast<S*>(k_pool), static_cast<S*>(v_pool), kv_dim, b.slots());
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
