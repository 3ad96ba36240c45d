// Widening of F16/BF16 values to F32: the rows of an attention output that a
// cuDNN plan wrote in the pool dtype (kernels/cuda/prefill_attention.cpp).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace prefixd::cuda {
namespace {

template <DType T>
__global__ void widen_kernel(const typename Elem<T>::Storage* src, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = Elem<T>::load(src, i);
}

}  // namespace

void launch_convert_to_f32(const void* src, DType type, float* dst, int64_t n, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  PREFIXD_DISPATCH_DTYPE(type, {
    widen_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        static_cast<const typename Elem<kT>::Storage*>(src), dst, n);
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
