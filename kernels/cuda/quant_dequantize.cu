// Dequantization of weights kept as raw ggml blocks (quant_chunk.h): a slab of
// rows to F16 for the prefill GEMM (one thread per 8-value chunk, one 16-byte
// store each), and the embedding lookup of a block table to F32.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_chunk.h"

namespace prefixd::cuda {
namespace {

// out (n_chunks * 8) f16 = chunks of consecutive rows of w starting at w;
// chunk g is chunk g % chunks_per_row of row g / chunks_per_row.
template <WeightType kType>
__global__ void dequantize_f16_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                                      int32_t chunks_per_row, int64_t n_chunks,
                                      uint4* __restrict__ out) {
  using C = Chunks<kType>;
  constexpr int kChunksPerBlock = C::kBlockValues / kQuantChunkValues;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < n_chunks;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / chunks_per_row;
    const int c = static_cast<int>(g - row * chunks_per_row);
    float v[8];
    C::decode(w + row * row_bytes + (c / kChunksPerBlock) * C::kBlockBytes, c % kChunksPerBlock, v);
    uint4 h;
    h.x = f32_to_f16(v[0]) | (static_cast<uint32_t>(f32_to_f16(v[1])) << 16);
    h.y = f32_to_f16(v[2]) | (static_cast<uint32_t>(f32_to_f16(v[3])) << 16);
    h.z = f32_to_f16(v[4]) | (static_cast<uint32_t>(f32_to_f16(v[5])) << 16);
    h.w = f32_to_f16(v[6]) | (static_cast<uint32_t>(f32_to_f16(v[7])) << 16);
    out[g] = h;
  }
}

// out (n_tokens, cols) f32: one block per token row, threads stride its chunks.
template <WeightType kType>
__global__ void embed_blocks_kernel(const uint8_t* __restrict__ table, int64_t row_bytes,
                                    int32_t cols, const int32_t* __restrict__ tokens,
                                    float* __restrict__ out) {
  using C = Chunks<kType>;
  constexpr int kChunksPerBlock = C::kBlockValues / kQuantChunkValues;
  const uint8_t* src = table + static_cast<int64_t>(tokens[blockIdx.x]) * row_bytes;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols / kQuantChunkValues; c += blockDim.x) {
    float v[8];
    C::decode(src + (c / kChunksPerBlock) * C::kBlockBytes, c % kChunksPerBlock, v);
#pragma unroll
    for (int t = 0; t < 8; ++t) dst[c * kQuantChunkValues + t] = v[t];
  }
}

}  // namespace

void launch_dequantize_f16(const void* w, WeightType type, int64_t row0, int64_t n_rows,
                           int64_t cols, uint16_t* out, cudaStream_t stream) {
  const LaunchConfig c = dequantize_launch(n_rows * cols);
  if (c.empty()) return;
  PREFIXD_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0,
                "dequantize: output not 16-byte aligned");
  const int64_t row_bytes = static_cast<int64_t>(weight_row_bytes(type, cols));
  const uint8_t* src = static_cast<const uint8_t*>(w) + row0 * row_bytes;
  const int32_t chunks_per_row = static_cast<int32_t>(cols / kQuantChunkValues);
  dispatch_block_type(type, [&](auto tag) {
    dequantize_f16_kernel<decltype(tag)::value><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        src, row_bytes, chunks_per_row, n_rows * chunks_per_row, reinterpret_cast<uint4*>(out));
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

void launch_embed_blocks(const void* table, WeightType type, int64_t cols, const DeviceBatch& b,
                         float* out, cudaStream_t stream) {
  const LaunchConfig c = embed_blocks_launch(b.layout.n_tokens, cols);
  if (c.empty()) return;
  const int64_t row_bytes = static_cast<int64_t>(weight_row_bytes(type, cols));
  dispatch_block_type(type, [&](auto tag) {
    embed_blocks_kernel<decltype(tag)::value><<<dim3(c.grid.x), dim3(c.block.x), 0, stream>>>(
        static_cast<const uint8_t*>(table), row_bytes, static_cast<int32_t>(cols), b.tokens(), out);
  });
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
