// Paged attention for decode: one query row per sequence, split over the KV
// length for long contexts.
//
// Decomposition (launch_config.h: decode_split, attention_decode_launch):
//   grid (n_decode_seqs, n_heads, n_splits), block kDecodeWarps x 32 threads.
//   A block owns keys [split * keys_per_split, min(kv_len, (split+1) * keys_per_split))
//   of one sequence and query head. Warps take 32-key chunks in turn: lane j
//   scores key c0 + j (reading its K row through the block table), the warp
//   folds the chunk into its online-softmax state, and lane l accumulates V
//   dims l + 32 c with p_j broadcast by shuffle (coalesced V reads).
//   The warps' (m, l, acc) meet in shared memory and merge (op::softmax_merge).
//   One split: the block writes the normalised output. Several: it writes a
//   partial (m, l, acc[head_dim]) and attention_decode_reduce_kernel merges the
//   splits of each (sequence, head) in order.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"
#include "kernels/op_math_ext.h"

namespace prefixd::cuda {
namespace {

template <DType T, int DPL>
__global__ void __launch_bounds__(kDecodeWarps * 32, 1)
    attention_decode_kernel(const typename Elem<T>::Storage* __restrict__ k_pool,
                            const typename Elem<T>::Storage* __restrict__ v_pool,
                            int32_t block_size, int32_t n_heads, int32_t n_kv_heads,
                            int32_t head_dim, float scale, int32_t window,
                            const float* __restrict__ q,
                            float* __restrict__ out, const int32_t* __restrict__ seqs,
                            const int32_t* __restrict__ tables,
                            const int32_t* __restrict__ decode_seqs, int32_t keys_per_split,
                            int32_t n_splits, float* __restrict__ partials) {
  extern __shared__ float smem[];
  const int32_t hd = head_dim;
  float* q_s = smem;         // (hd) f32
  float* merge = q_s + hd;   // (kDecodeWarps, hd + 2) f32: acc[hd], m, l

  const int32_t item = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int32_t* s = seqs + decode_seqs[item] * kSeqWords;
  const int32_t row = s[0], pos0 = s[2];
  const int32_t* table = tables + s[3];
  const int32_t kv_head = head / (n_heads / n_kv_heads);
  const int64_t q_stride = int64_t(n_heads) * hd;
  const int64_t kv_stride = int64_t(n_kv_heads) * hd;
  const int32_t kv_len = pos0 + 1;
  const int32_t k_begin = split * keys_per_split;
  const int32_t k_end = min(kv_len, k_begin + keys_per_split);
  const int32_t k_lo = window > 0 ? max(0, pos0 - window + 1) : 0;  // first key in the window

  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = q[row * q_stride + head * hd + d];
  __syncthreads();

  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[DPL];
#pragma unroll
  for (int c = 0; c < DPL; ++c) acc[c] = 0.0f;
  op::SoftmaxState st = op::softmax_init();

  for (int32_t c0 = k_begin + warp * 32; c0 < k_end; c0 += kDecodeWarps * 32) {
    if (c0 + 32 <= k_lo) continue;  // every key before the window (warp-uniform)
    const int32_t p = c0 + lane;
    float score = -INFINITY;
    int32_t slot = 0;  // pool slot of key p (n_blocks * block_size < 2^31)
    if (p < k_end && p >= k_lo) {
      slot = table[p / block_size] * block_size + p % block_size;
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
    const int32_t n_keys = min(32, k_end - c0);
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
    if (d < hd) mine[d] = acc[c];
  }
  if (lane == 0) {
    mine[hd] = st.m;
    mine[hd + 1] = st.l;
  }
  __syncthreads();

  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    op::SoftmaxState total{merge[hd], merge[hd + 1]};
    float a = merge[d];
    for (int w = 1; w < kDecodeWarps; ++w) {
      const float* other = merge + w * (hd + 2);
      float sa, sb;
      total = op::softmax_merge(total, op::SoftmaxState{other[hd], other[hd + 1]}, &sa, &sb);
      a = a * sa + other[d] * sb;
    }
    if (n_splits == 1) {
      out[row * q_stride + head * hd + d] = a / total.l;
    } else {
      float* part = partials + ((int64_t(item) * n_heads + head) * n_splits + split) * (hd + 2);
      part[2 + d] = a;
      if (d == 0) {
        part[0] = total.m;
        part[1] = total.l;
      }
    }
  }
}

// grid (n_decode_seqs, n_heads), one thread per head dim: merges the splits'
// partials (m, l, acc) of one (sequence, head) in split order.
__global__ void attention_decode_reduce_kernel(const float* __restrict__ partials, int32_t n_heads,
                                               int32_t head_dim, int32_t n_splits,
                                               float* __restrict__ out,
                                               const int32_t* __restrict__ seqs,
                                               const int32_t* __restrict__ decode_seqs) {
  const int32_t hd = head_dim;
  const int32_t item = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  if (d >= hd) return;
  const int32_t row = seqs[decode_seqs[item] * kSeqWords];
  const float* part = partials + (int64_t(item) * n_heads + head) * n_splits * (hd + 2);
  op::SoftmaxState total{part[0], part[1]};
  float a = part[2 + d];
  for (int32_t sp = 1; sp < n_splits; ++sp) {
    const float* p = part + sp * (hd + 2);
    float sa, sb;
    total = op::softmax_merge(total, op::SoftmaxState{p[0], p[1]}, &sa, &sb);
    a = a * sa + p[2 + d] * sb;
  }
  out[row * int64_t(n_heads) * hd + head * hd + d] = a / total.l;
}

template <DType T, int DPL>
void launch_variant(const AttentionArgs& a, const DeviceBatch& b, const DecodeSplit& split,
                    const LaunchConfig& c, float* partials, cudaStream_t stream) {
  auto kernel = attention_decode_kernel<T, DPL>;
  if (c.smem_bytes > kSmemDefaultLimitBytes) {
    PREFIXD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(c.smem_bytes)));
  }
  using S = typename Elem<T>::Storage;
  kernel<<<dim3(c.grid.x, c.grid.y, c.grid.z), dim3(c.block.x), c.smem_bytes, stream>>>(
      static_cast<const S*>(a.k_pool), static_cast<const S*>(a.v_pool), a.block_size, a.n_heads,
      a.n_kv_heads, a.head_dim, a.scale, a.window_tokens, a.q, a.out, b.seqs(), b.tables(),
      b.decode_seqs(),
      split.keys_per_split, split.n_splits, partials);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention_decode(const AttentionArgs& a, const DeviceBatch& b, const DecodeSplit& split,
                             float* partials, cudaStream_t stream) {
  const LaunchConfig c = attention_decode_launch(b.layout.n_decode_seqs, a.n_heads, a.head_dim, split);
  if (c.empty()) return;
  PREFIXD_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "heads not a multiple of kv heads");
  PREFIXD_CHECK(split.n_splits == 1 || partials != nullptr, "split decode needs a workspace");
  const int32_t dpl = attention_dims_per_lane(a.head_dim);
  PREFIXD_CHECK(dpl != 0, "head_dim unsupported by the CUDA attention kernels (max 256)");
  PREFIXD_DISPATCH_DTYPE(a.kv_dtype, {
    switch (dpl) {
      case 1: launch_variant<kT, 1>(a, b, split, c, partials, stream); break;
      case 2: launch_variant<kT, 2>(a, b, split, c, partials, stream); break;
      case 4: launch_variant<kT, 4>(a, b, split, c, partials, stream); break;
      default: launch_variant<kT, 8>(a, b, split, c, partials, stream); break;
    }
  });
  if (split.n_splits > 1) {
    const LaunchConfig r = attention_decode_reduce_launch(b.layout.n_decode_seqs, a.n_heads, a.head_dim);
    attention_decode_reduce_kernel<<<dim3(r.grid.x, r.grid.y), dim3(r.block.x), 0, stream>>>(
        partials, a.n_heads, a.head_dim, split.n_splits, a.out, b.seqs(), b.decode_seqs());
    PREFIXD_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace prefixd::cuda
