// Elementwise kernels over f32 activations (grid-stride loops): SwiGLU, GeGLU
// (with an optional 16-bit twin of their output, kernels.h TwinOut), scale,
// add, bias add, f32 -> F16/BF16 conversion for the GEMM inputs, and the
// gather of output rows before the logits.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"

namespace prefixd::cuda {
namespace {

#define PREFIXD_GRID_STRIDE(i, n)                                             \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// kTwin F16/BF16: each stored value also written converted to kTwin; F32: none.
template <DType kTwin>
__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n,
                              typename Elem<kTwin>::Storage* twin) {
  PREFIXD_GRID_STRIDE(i, n) {
    const float y = op::swiglu(gate[i], up[i]);
    out[i] = y;
    if constexpr (kTwin != DType::F32) Elem<kTwin>::store(twin, i, y);
  }
}

template <DType kTwin>
__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n,
                             typename Elem<kTwin>::Storage* twin) {
  PREFIXD_GRID_STRIDE(i, n) {
    const float y = op::geglu(gate[i], up[i]);
    out[i] = y;
    if constexpr (kTwin != DType::F32) Elem<kTwin>::store(twin, i, y);
  }
}

__global__ void scale_kernel(float* y, float factor, int64_t n) {
  PREFIXD_GRID_STRIDE(i, n) y[i] *= factor;
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  PREFIXD_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t n_total, int64_t dim) {
  PREFIXD_GRID_STRIDE(i, n_total) y[i] += bias[i % dim];
}

template <DType T>
__global__ void convert_kernel(const float* src, typename Elem<T>::Storage* dst, int64_t n) {
  PREFIXD_GRID_STRIDE(i, n) Elem<T>::store(dst, i, src[i]);
}

__global__ void gather_rows_kernel(const float* x, float* out, int64_t dim, const int32_t* rows) {
  const int64_t src = static_cast<int64_t>(rows[blockIdx.x]) * dim;
  const int64_t dst = static_cast<int64_t>(blockIdx.x) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) out[dst + j] = x[src + j];
}

}  // namespace

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
                   TwinOut twin) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  const DType t = twin.data == nullptr ? DType::F32 : twin.type;
  PREFIXD_DISPATCH_DTYPE(t, {
    swiglu_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        gate, up, out, n, static_cast<typename Elem<kT>::Storage*>(twin.data));
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
                  TwinOut twin) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  const DType t = twin.data == nullptr ? DType::F32 : twin.type;
  PREFIXD_DISPATCH_DTYPE(t, {
    geglu_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        gate, up, out, n, static_cast<typename Elem<kT>::Storage*>(twin.data));
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_scale(float* y, float factor, int64_t n, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  scale_kernel<<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(y, factor, n);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  add_kernel<<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(y, x, n);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_add_bias(float* y, const float* bias, int64_t n, int64_t dim, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(n * dim);
  if (c.empty()) return;
  add_bias_kernel<<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(y, bias, n * dim, dim);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_convert_f32(const float* src, void* dst, DType type, int64_t n, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(n);
  if (c.empty()) return;
  PREFIXD_DISPATCH_DTYPE(type, {
    convert_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        src, static_cast<typename Elem<kT>::Storage*>(dst), n);
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const float* x, float* out, int64_t dim, const DeviceBatch& b,
                        cudaStream_t stream) {
  const LaunchConfig c = row_launch(b.layout.n_output_rows, dim);
  if (c.empty()) return;
  gather_rows_kernel<<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(x, out, dim, b.output_rows());
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
