// RMSNorm: out (n, dim) = x * rms_inv(sum(x^2)) * weight (dim). One block per
// row; each thread sums squares over a stride of the row, then warp shuffles
// and a (32) f32 shared array reduce them. out may equal x (each element is
// read before it is written by the same thread). With a twin (kTwin F16 or
// BF16; F32 = none) each stored value is also written converted to kTwin.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"

namespace prefixd::cuda {
namespace {

template <DType kTwin>
__global__ void rmsnorm_kernel(const float* x, const float* weight, float* out, int64_t dim,
                               float eps, typename Elem<kTwin>::Storage* twin) {
  __shared__ float warp_sums[32];  // (blockDim.x / 32) partial sums
  __shared__ float inv_rms;
  const float* xr = x + blockIdx.x * dim;
  float* yr = out + blockIdx.x * dim;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += xr[j] * xr[j];
  s = warp_sum(s);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x / 32;
    float t = lane < n_warps ? warp_sums[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) inv_rms = op::rms_inv(t, dim, eps);
  }
  __syncthreads();
  const float r = inv_rms;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float y = xr[j] * r * weight[j];
    yr[j] = y;
    if constexpr (kTwin != DType::F32) Elem<kTwin>::store(twin, blockIdx.x * dim + j, y);
  }
}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, rmsnorm_kernel<DType::F32>);
}

void launch_rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
                    float eps, cudaStream_t stream, TwinOut twin) {
  const LaunchConfig c = row_launch(n, dim);
  if (c.empty()) return;
  const DType t = twin.data == nullptr ? DType::F32 : twin.type;
  PREFIXD_DISPATCH_DTYPE(t, {
    rmsnorm_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        x, weight, out, dim, eps, static_cast<typename Elem<kT>::Storage*>(twin.data));
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
