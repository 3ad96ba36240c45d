// RoPE in place on x (n_tokens, n_heads, head_dim) at the batch's positions.
// One thread per rotated pair; the pair's indices come from op::rope_pair (both
// conventions) and the angle from op::rope_cos_sin with a host-computed f64
// inverse-frequency table (rope_dim / 2) that already holds any frequency
// factors (Llama 3.1 scaling: inv_freq_i = base^(-2i/rope_dim) / factor_i).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"
#include "kernels/op_math_ext.h"

namespace prefixd::cuda {
namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n_pairs_total,
                            int32_t n_heads, int32_t head_dim, int32_t rope_dim,
                            const double* inv_freq, bool neox) {
  const int32_t half = rope_dim / 2;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n_pairs_total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int32_t i = static_cast<int32_t>(idx % half);
    const int64_t head_row = idx / half;  // token * n_heads + head
    const int64_t token = head_row / n_heads;
    float* h = x + head_row * head_dim;
    int32_t a, b;
    op::rope_pair(neox, i, rope_dim, &a, &b);
    float c, s;
    op::rope_cos_sin(positions[token], inv_freq[i], &c, &s);
    float y0, y1;
    op::rope_rotate(h[a], h[b], c, s, &y0, &y1);
    h[a] = y0;
    h[b] = y1;
  }
}

}  // namespace

void launch_rope(float* x, const DeviceBatch& b, int32_t n_heads, int32_t head_dim,
                 int32_t rope_dim, const double* inv_freq, RopeStyle style, cudaStream_t stream) {
  const LaunchConfig c = rope_launch(b.layout.n_tokens, n_heads, rope_dim);
  if (c.empty()) return;
  const int64_t n_pairs = int64_t(b.layout.n_tokens) * n_heads * (rope_dim / 2);
  rope_kernel<<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
      x, b.positions(), n_pairs, n_heads, head_dim, rope_dim, inv_freq, style == RopeStyle::kNeox);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
