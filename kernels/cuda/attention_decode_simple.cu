// Paged attention for decode, the simple kernel: one query row per sequence,
// one block per (sequence, query head, split), scalar loads. Takes any
// head_dim <= 256; the fallback of the flash decode kernel
// (attention_decode.cu) and the reference the start-up self-check runs it against.
//
// Decomposition (launch_config.h: attention_decode_launch, decode_split_count):
//   grid (n_decode_seqs, n_heads, n_splits), block kDecodeWarps x 32 threads.
//   A block takes split `split` of its sequence's visible keys
//   [paging::window_first_key(pos0), pos0 + 1) (paging::split_range; blocks
//   past paging::split_count exit). Warps take 32-key chunks of the split in
//   turn: lane j scores key c0 + j (reading its K row through the block
//   table), the warp folds the chunk into its online-softmax state, and lane l
//   accumulates V dims l + 32 c with p_j broadcast by shuffle (coalesced V
//   reads). The warps' (m, l, acc) meet in shared memory and merge
//   (paging::merge_partial_*). One used split: the block writes the normalised
//   output. Several: it writes a partial (m, l, acc[head_dim]) and
//   attention_decode_reduce_kernel (attention_decode.cu) merges them.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"
#include "kernels/op_math_ext.h"
#include "kernels/paging.h"

namespace prefixd::cuda {
namespace {

// Stays long: one register schedule (the header's decomposition); pieces would be
// force-inlined __device__ functions sharing its state, and test_cuda_ptxas guards
// its spills as it is.
template <DType T, int DPL>
__global__ void __launch_bounds__(kDecodeWarps * 32, 1) attention_decode_simple_kernel(
    const typename Elem<T>::Storage* __restrict__ k_pool,
    const typename Elem<T>::Storage* __restrict__ v_pool, int32_t block_size, int32_t n_heads,
    int32_t n_kv_heads, int32_t head_dim, float scale, int32_t window, const float* __restrict__ q,
    float* __restrict__ out, const int32_t* __restrict__ seqs, const int32_t* __restrict__ tables,
    const int32_t* __restrict__ decode_seqs, int32_t n_splits, float* __restrict__ partials) {
  extern __shared__ float smem[];
  const int32_t hd = head_dim;
  float* q_s = smem;        // (hd) f32
  float* merge = q_s + hd;  // (kDecodeWarps, hd + 2) f32: m, l, acc[hd]

  const int32_t item = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int32_t* s = seqs + decode_seqs[item] * kSeqWords;
  const int32_t row = s[0], pos0 = s[2];
  const int32_t* table = tables + s[3];
  const int32_t first = paging::window_first_key(pos0, window), kv_end = pos0 + 1;
  const int32_t used = paging::split_count(kv_end - first, kDecodeSplitChunkKeys, n_splits);
  if (split >= used) return;  // block-uniform: an empty split
  const paging::KeyRange keys =
      paging::split_range(first, kv_end, kDecodeSplitChunkKeys, split, used);
  const int32_t kv_head = head / (n_heads / n_kv_heads);
  const int64_t q_stride = int64_t(n_heads) * hd;
  const int64_t kv_stride = int64_t(n_kv_heads) * hd;

  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = q[row * q_stride + head * hd + d];
  __syncthreads();

  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[DPL];
#pragma unroll
  for (int c = 0; c < DPL; ++c) acc[c] = 0.0f;
  op::SoftmaxState st = op::softmax_init();

  for (int32_t c0 = keys.begin + warp * 32; c0 < keys.end; c0 += kDecodeWarps * 32) {
    const int32_t p = c0 + lane;
    float score = -INFINITY;
    int32_t slot = 0;  // pool slot of key p
    if (p < keys.end) {
      slot = paging::slot_of(table, block_size, p);
      const int64_t base = slot * kv_stride + kv_head * hd;
      float dot = 0.0f;
      for (int32_t d = 0; d < hd; ++d) dot += q_s[d] * Elem<T>::load(k_pool, base + d);
      score = dot * scale;
    }
    const float factor = op::softmax_fold_max(&st, warp_max(score));
    const float pj = score == -INFINITY ? 0.0f : expf(score - st.m);
    st.l += warp_sum(pj);
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[c] *= factor;
    const int32_t n_keys = min(32, keys.end - c0);
    for (int32_t j = 0; j < n_keys; ++j) {
      const float pb = __shfl_sync(0xffffffffu, pj, j);
      const int64_t vb = __shfl_sync(0xffffffffu, slot, j) * kv_stride + kv_head * hd;
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int32_t d = lane + 32 * c;
        if (d < hd) acc[c] += pb * Elem<T>::load(v_pool, vb + d);
      }
    }
  }

  float* mine = merge + warp * (hd + 2);
#pragma unroll
  for (int c = 0; c < DPL; ++c) {
    const int32_t d = lane + 32 * c;
    if (d < hd) mine[paging::kPartialHeaderFloats + d] = acc[c];
  }
  if (lane == 0) {
    mine[0] = st.m;
    mine[1] = st.l;
  }
  __syncthreads();

  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    const op::SoftmaxState total = paging::merge_partial_states(merge, kDecodeWarps, hd + 2);
    const float a = paging::merge_partial_acc(merge, kDecodeWarps, hd + 2, d, total.m);
    if (used == 1) {
      out[row * q_stride + head * hd + d] = paging::normalise(a, total.l);
    } else {
      float* part = partials + ((int64_t(item) * n_heads + head) * n_splits + split) * (hd + 2);
      part[paging::kPartialHeaderFloats + d] = a;
      if (d == 0) {
        part[0] = total.m;
        part[1] = total.l;
      }
    }
  }
}

template <DType T, int DPL>
void launch_variant(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                    const LaunchConfig& c, float* partials, cudaStream_t stream) {
  auto kernel = attention_decode_simple_kernel<T, DPL>;
  if (c.smem_bytes > kSmemDefaultLimitBytes) {
    PREFIXD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(c.smem_bytes)));
  }
  using S = typename Elem<T>::Storage;
  kernel<<<dim3(c.grid.x, c.grid.y, c.grid.z), dim3(c.block.x), c.smem_bytes, stream>>>(
      static_cast<const S*>(a.k_pool), static_cast<const S*>(a.v_pool), a.block_size, a.n_heads,
      a.n_kv_heads, a.head_dim, a.scale, a.window_tokens, a.q, a.out, b.seqs(), b.tables(),
      b.decode_seqs(), n_splits, partials);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention_decode_simple(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                                    float* partials, cudaStream_t stream) {
  const LaunchConfig c =
      attention_decode_launch(b.layout.n_decode_seqs, a.n_heads, a.head_dim, n_splits);
  if (c.empty()) return;
  PREFIXD_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
                "heads not a multiple of kv heads");
  PREFIXD_CHECK(n_splits >= 1 && n_splits <= kDecodeMaxSplits, "decode split count out of range");
  PREFIXD_CHECK(n_splits == 1 || partials != nullptr, "split decode needs a workspace");
  const int32_t dpl = attention_dims_per_lane(a.head_dim);
  PREFIXD_CHECK(dpl != 0, "head_dim unsupported by the CUDA attention kernels (max 256)");
  PREFIXD_DISPATCH_DTYPE(a.kv_dtype, {
    switch (dpl) {
      case 1:
        launch_variant<kT, 1>(a, b, n_splits, c, partials, stream);
        break;
      case 2:
        launch_variant<kT, 2>(a, b, n_splits, c, partials, stream);
        break;
      case 4:
        launch_variant<kT, 4>(a, b, n_splits, c, partials, stream);
        break;
      default:
        launch_variant<kT, 8>(a, b, n_splits, c, partials, stream);
        break;
    }
  });
  launch_attention_decode_reduce(a, b, n_splits, partials, stream);
}

}  // namespace prefixd::cuda
