// Embedding lookup: out (n_tokens, dim) f32 = table[token] (n_vocab, dim) in
// the table's stored dtype. One block per token row, threads stride the row.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace prefixd::cuda {
namespace {

template <DType T>
__global__ void embed_kernel(const typename Elem<T>::Storage* table, int64_t dim,
                             const int32_t* tokens, float* out) {
  const int64_t row = blockIdx.x;
  const int64_t src = static_cast<int64_t>(tokens[row]) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    out[row * dim + j] = Elem<T>::load(table, src + j);
  }
}

}  // namespace

void launch_embed(const void* table, DType type, int64_t dim, const DeviceBatch& b, float* out,
                  cudaStream_t stream) {
  const LaunchConfig c = row_launch(b.layout.n_tokens, dim);
  if (c.empty()) return;
  PREFIXD_DISPATCH_DTYPE(type, {
    embed_kernel<kT><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        static_cast<const typename Elem<kT>::Storage*>(table), dim, b.tokens(), out);
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
