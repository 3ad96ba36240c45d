// Host launchers of the CUDA kernels (one .cu file per op family). Every
// launcher takes an explicit stream, computes its configuration with
// launch_config.h, skips empty launches and checks the launch.
// Pointers are device pointers; shapes and dtypes as stated per function.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/launch_config.h"

namespace prefixd::cuda {

// Device view of a PackedBatch: `words` is the uploaded PackedBatch::words,
// the offsets and counts are copied from it.
struct DeviceBatch {
  const int32_t* words = nullptr;  // device, PackedBatch layout
  PackedBatch layout;              // host copy (words left empty)
  const int32_t* tokens() const { return words + layout.tokens_off; }
  const int32_t* positions() const { return words + layout.positions_off; }
  const int32_t* slots() const { return words + layout.slots_off; }
  const int32_t* seqs() const { return words + layout.seqs_off; }
  const int32_t* tables() const { return words + layout.tables_off; }
  const int32_t* output_rows() const { return words + layout.output_rows_off; }
  const int32_t* prefill_tiles() const { return words + layout.prefill_tiles_off; }
  const int32_t* decode_seqs() const { return words + layout.decode_seqs_off; }
};

// embed.cu: out (n_tokens, dim) f32 = table rows (n_vocab, dim) in `type` picked by tokens.
void launch_embed(const void* table, DType type, int64_t dim, const DeviceBatch& b, float* out,
                  cudaStream_t stream);

// quant_dequantize.cu: out (n_tokens, cols) f32 = rows of `table` (n_vocab,
// cols), raw ggml blocks of block type `type`, picked by the batch's tokens.
void launch_embed_blocks(const void* table, WeightType type, int64_t cols, const DeviceBatch& b,
                         float* out, cudaStream_t stream);

// quant_dequantize.cu: out (n_rows, cols) f16 bits = rows [row0, row0 + n_rows)
// of w (rows, cols), raw ggml blocks of block type `type`; out 16-byte aligned.
void launch_dequantize_f16(const void* w, WeightType type, int64_t row0, int64_t n_rows,
                           int64_t cols, uint16_t* out, cudaStream_t stream);

// quant_matvec.cu: y (n, rows) f32 = x (n, cols) f32 · Wᵀ for 1 <= n <=
// kMatvecMaxRows, W (rows, cols) raw ggml blocks of block type `type` read in
// place (F32 accumulation).
void launch_quant_matvec(const void* w, WeightType type, int64_t rows, int64_t cols, const float* x,
                         float* y, int64_t n, cudaStream_t stream);

// rmsnorm.cu: whether this binary holds kernel code for the current device
// (cudaErrorNoKernelImageForDevice otherwise); never aborts.
cudaError_t probe_kernel_image();

// A second copy of an op's f32 output in a 16-bit type (a GEMM input in the
// weight's type, activation_twins.h): element i = round-to-nearest-even of
// the f32 value the op stores at i, so equal bit for bit to
// launch_convert_f32 of the output. data (n) F16 or BF16, device; null: none.
struct TwinOut {
  void* data = nullptr;
  DType type = DType::BF16;
};

// rmsnorm.cu: out (n, dim) = x * rms_inv * weight (dim); out may equal x;
// twin (n, dim) the same values in twin.type.
void launch_rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
                    float eps, cudaStream_t stream, TwinOut twin = {});

// rope.cu: in place on x (n_tokens, n_heads, head_dim); inv_freq (rope_dim / 2) f64.
void launch_rope(float* x, const DeviceBatch& b, int32_t n_heads, int32_t head_dim,
                 int32_t rope_dim, const double* inv_freq, RopeStyle style, cudaStream_t stream);

// elementwise.cu: out (n) = op::swiglu(gate, up); twin (n) the same values in twin.type.
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
                   TwinOut twin = {});
// out (n) = op::geglu(gate, up) (tanh GELU gate); twin as launch_swiglu's.
void launch_geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream,
                  TwinOut twin = {});
// y (n) *= factor.
void launch_scale(float* y, float factor, int64_t n, cudaStream_t stream);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t stream);
void launch_add_bias(float* y, const float* bias, int64_t n, int64_t dim, cudaStream_t stream);
// dst (n) in `type` (F16 or BF16) = round-to-nearest-even of src (n) f32.
void launch_convert_f32(const float* src, void* dst, DType type, int64_t n, cudaStream_t stream);
// out (n_output_rows, dim) = rows b.output_rows of x (n_tokens, dim).
void launch_gather_rows(const float* x, float* out, int64_t dim, const DeviceBatch& b,
                        cudaStream_t stream);

// kv_cache.cu: k, v (n_tokens, kv_dim) f32 -> pool layer (n_blocks * block_size, kv_dim) at slots.
void launch_kv_store(const float* k, const float* v, void* k_pool, void* v_pool, DType type,
                     int32_t kv_dim, const DeviceBatch& b, cudaStream_t stream);

// Shape of one attention call.
struct AttentionArgs {
  const void* k_pool = nullptr;  // (n_blocks, block_size, n_kv_heads, head_dim) kv_dtype
  const void* v_pool = nullptr;  // same
  DType kv_dtype = DType::F32;
  int32_t block_size = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t window_tokens = 0;  // > 0: a row at position p reads keys (p - window_tokens, p] only
  const float* q = nullptr;  // (n_tokens, n_heads * head_dim) f32
  float* out = nullptr;      // (n_tokens, n_heads * head_dim) f32
};

// attention_prefill.cu: sequences with n_q > 1 (the batch's prefill tiles).
void launch_attention_prefill(const AttentionArgs& a, const DeviceBatch& b, cudaStream_t stream);

// convert_to_f32.cu: dst (n) f32 = src (n) in `type` (F16 or BF16; F32 copies).
void launch_convert_to_f32(const void* src, DType type, float* dst, int64_t n, cudaStream_t stream);

// Decode: sequences with n_q == 1, their keys split `n_splits` ways
// (decode_split_count; any value in [1, kDecodeMaxSplits] is correct for any
// lengths). `partials` holds decode_workspace_bytes(n_decode_seqs, n_heads,
// head_dim, n_splits) bytes (may be null when that is 0). Neither the grids
// nor the kernel arguments depend on sequence lengths: the launches may be
// captured in a CUDA graph and replayed over new batch contents of the same
// sequence count.
// attention_decode.cu: flash decode, for shapes flash_decode_shape() supports
// (aborts otherwise); pools 16-byte aligned.
void launch_attention_decode(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                             float* partials, cudaStream_t stream);
// attention_decode_simple.cu: the simple kernel, any head_dim <= 256.
void launch_attention_decode_simple(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                                    float* partials, cudaStream_t stream);
// attention_decode.cu: merges the partials both decode kernels write (a no-op
// for n_splits == 1); each launcher above calls it.
void launch_attention_decode_reduce(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                                    float* partials, cudaStream_t stream);

}  // namespace prefixd::cuda
