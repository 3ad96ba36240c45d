// Decode matmul over weights kept as raw ggml blocks: y (n, rows) f32 =
// x (n, cols) f32 · Wᵀ for n <= kMatvecMaxRows, reading each block once.
// One warp per output row; lane l decodes the row's 8-value chunks l, l + 32,
// ... (quant_chunk.h) and multiplies each into all n rows of x, accumulating
// in F32; a warp reduction per row of x gives y. Consecutive lanes read
// consecutive chunks, so a warp walks a row's bytes in order.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_chunk.h"

namespace prefixd::cuda {
namespace {

// Loads x[0..7] at `p`: two 16-byte loads when x is 16-byte aligned (rows of
// x then are too: cols is a multiple of 32), else eight scalar loads.
__device__ __forceinline__ void load_x8(const float* __restrict__ p, bool aligned16,
                                        float (&xv)[8]) {
  if (aligned16) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
    xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
  } else {
#pragma unroll
    for (int t = 0; t < 8; ++t) xv[t] = p[t];
  }
}

// grid (ceil(rows / kMatvecWarps)), block kMatvecWarps * 32; kRows >= n rows
// of x, rows n..kRows-1 masked.
template <WeightType kType, int kRows>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    quant_matvec_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int32_t rows,
                        int32_t cols, const float* __restrict__ x, float* __restrict__ y, int32_t n,
                        bool x_aligned16) {
  using C = Chunks<kType>;
  constexpr int kChunksPerBlock = C::kBlockValues / kQuantChunkValues;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kMatvecWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp: no lane is left out of the reduction
  const uint8_t* wr = w + row * row_bytes;
  const int n_chunks = cols / kQuantChunkValues;
  float acc[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
  for (int c = lane; c < n_chunks; c += 32) {
    float v[8];
    C::decode(wr + (c / kChunksPerBlock) * C::kBlockBytes, c % kChunksPerBlock, v);
    const float* xc = x + static_cast<int64_t>(c) * kQuantChunkValues;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (kRows == 1 || i < n) {
        float xv[8];
        load_x8(xc + static_cast<int64_t>(i) * cols, x_aligned16, xv);
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[i] = fmaf(v[t], xv[t], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0 && i < n) y[static_cast<int64_t>(i) * rows + row] = s;
  }
}

template <WeightType kType, int kRows>
void launch_variant(const LaunchConfig& c, const void* w, int64_t row_bytes, int64_t rows,
                    int64_t cols, const float* x, float* y, int64_t n, bool x_aligned16,
                    cudaStream_t stream) {
  quant_matvec_kernel<kType, kRows><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
      static_cast<const uint8_t*>(w), row_bytes, static_cast<int32_t>(rows),
      static_cast<int32_t>(cols), x, y, static_cast<int32_t>(n), x_aligned16);
}

}  // namespace

void launch_quant_matvec(const void* w, WeightType type, int64_t rows, int64_t cols, const float* x,
                         float* y, int64_t n, cudaStream_t stream) {
  const int32_t variant = matvec_rows_variant(n);
  PREFIXD_CHECK(variant != 0, "quant_matvec: n outside [1, kMatvecMaxRows]");
  const LaunchConfig c = quant_matvec_launch(rows, cols);
  if (c.empty()) return;
  const int64_t row_bytes = static_cast<int64_t>(weight_row_bytes(type, cols));
  const bool x_aligned16 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  dispatch_block_type(type, [&](auto tag) {
    constexpr WeightType kT = decltype(tag)::value;
    switch (variant) {
      case 1:
        launch_variant<kT, 1>(c, w, row_bytes, rows, cols, x, y, n, x_aligned16, stream);
        break;
      case 2:
        launch_variant<kT, 2>(c, w, row_bytes, rows, cols, x, y, n, x_aligned16, stream);
        break;
      case 4:
        launch_variant<kT, 4>(c, w, row_bytes, rows, cols, x, y, n, x_aligned16, stream);
        break;
      default:
        launch_variant<kT, 8>(c, w, row_bytes, rows, cols, x, y, n, x_aligned16, stream);
        break;
    }
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
