// Paged causal attention for prefill (varlen: many query rows per sequence).
//
// Decomposition (launch_config.h: attention_prefill_launch):
//   grid (n_prefill_tiles, n_heads), block kPrefillWarps x 32 threads.
//   A block owns kPrefillTileQ (16) consecutive query rows of one sequence and
//   one query head h, reading KV head h / (n_heads / n_kv_heads). Warp w owns
//   rows 4w..4w+3 of the tile; lane l owns output dims l + 32 c (c < DPL).
// Per KV tile of kTileKeys (32) positions, staged through shared memory as f32
// (converted from the pool dtype, gathered through the block table):
//   score: lane j computes dot(q_row, K[j]) for key k0 + j (K rows padded to
//          head_dim + 1 floats, so the 32 lanes hit 32 banks);
//   online softmax per row over the tile (op::softmax_fold_max), then each
//   lane accumulates sum_j p_j V[j][d] for its dims with p_j broadcast by shuffle.
// Causality: key position p is visible to the row at position q = pos0 + r when p <= q,
// and, with a window w > 0, when p > q - w (tiles wholly before every row's window are skipped).
// Registers: acc[4][DPL] + 4 softmax states per lane; no local arrays (see
// tests/scripts/test_cuda_ptxas.sh for the spill check).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"
#include "kernels/op_math_ext.h"
#include "kernels/paging.h"

namespace prefixd::cuda {
namespace {

// Stays long: one register schedule (acc[4][DPL], see the header); pieces would be
// force-inlined __device__ functions sharing it, and test_cuda_ptxas guards its
// spills as it is.
template <DType T, int DPL>
__global__ void __launch_bounds__(kPrefillWarps * 32, 1)
    attention_prefill_kernel(const typename Elem<T>::Storage* __restrict__ k_pool,
                             const typename Elem<T>::Storage* __restrict__ v_pool,
                             int32_t block_size, int32_t n_heads, int32_t n_kv_heads,
                             int32_t head_dim, float scale, int32_t window,
                             const float* __restrict__ q,
                             float* __restrict__ out, const int32_t* __restrict__ seqs,
                             const int32_t* __restrict__ tables,
                             const int32_t* __restrict__ tiles) {
  extern __shared__ float smem[];
  const int32_t hd = head_dim;
  float* q_s = smem;                               // (kPrefillTileQ, hd) f32
  float* k_s = q_s + kPrefillTileQ * hd;           // (kTileKeys, hd + 1) f32
  float* v_s = k_s + kTileKeys * (hd + 1);         // (kTileKeys, hd) f32

  const int32_t head = blockIdx.y;
  const int32_t seq = tiles[2 * blockIdx.x];
  const int32_t row0 = tiles[2 * blockIdx.x + 1];  // first row of the tile within the sequence
  const int32_t* s = seqs + seq * kSeqWords;
  const int32_t q_start = s[0], n_q = s[1], pos0 = s[2];
  const int32_t* table = tables + s[3];
  const int32_t kv_head = head / (n_heads / n_kv_heads);
  const int32_t n_rows = min(kPrefillTileQ, n_q - row0);
  const int64_t q_stride = int64_t(n_heads) * hd;     // floats per q/out row
  const int64_t kv_stride = int64_t(n_kv_heads) * hd; // elements per pool slot
  const int32_t kv_end =
      paging::causal_key_end(row0 + n_rows - 1, n_q, pos0 + n_q);  // keys [0, kv_end) are needed

  for (int32_t e = threadIdx.x; e < kPrefillTileQ * hd; e += blockDim.x) {
    const int32_t r = e / hd, d = e % hd;
    q_s[e] = r < n_rows ? q[(q_start + row0 + r) * q_stride + head * hd + d] : 0.0f;
  }

  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kPrefillRowsPerWarp][DPL];
  op::SoftmaxState st[kPrefillRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
    st[i] = op::softmax_init();
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[i][c] = 0.0f;
  }

  // The first row's window starts the key tiles (0 without a window).
  const int32_t k_first = paging::window_first_key(pos0 + row0, window) / kTileKeys * kTileKeys;
  for (int32_t k0 = k_first; k0 < kv_end; k0 += kTileKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, Q is staged)
    for (int32_t e = threadIdx.x; e < kTileKeys * hd; e += blockDim.x) {
      const int32_t j = e / hd, d = e % hd;
      const int32_t p = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (p < kv_end) {
        const int64_t slot = paging::slot_of(table, block_size, p);
        const int64_t idx = slot * kv_stride + kv_head * hd + d;
        kv = Elem<T>::load(k_pool, idx);
        vv = Elem<T>::load(v_pool, idx);
      }
      k_s[j * (hd + 1) + d] = kv;
      v_s[j * hd + d] = vv;
    }
    __syncthreads();

#pragma unroll
    for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
      const int32_t r = warp * kPrefillRowsPerWarp + i;
      const int32_t q_pos = pos0 + row0 + r;
      const int32_t q_end = paging::causal_key_end(row0 + r, n_q, pos0 + n_q);  // q_pos + 1
      const int32_t q_lo =
          paging::window_first_key(q_pos, window);  // first key in the row's window
      if (r >= n_rows || k0 >= q_end || k0 + kTileKeys <= q_lo) continue;  // warp-uniform
      const int32_t p = k0 + lane;
      float score = -INFINITY;
      if (p < q_end && p >= q_lo) {
        const float* qr = q_s + r * hd;
        const float* kr = k_s + lane * (hd + 1);
        float dot = 0.0f;
        for (int32_t d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        score = dot * scale;
      }
      const float factor = op::softmax_fold_max(&st[i], warp_max(score));
      const float pj = score == -INFINITY ? 0.0f : expf(score - st[i].m);
      st[i].l += warp_sum(pj);
#pragma unroll
      for (int c = 0; c < DPL; ++c) acc[i][c] *= factor;
      const int32_t n_keys = min(kTileKeys, q_end - k0);
      for (int32_t j = 0; j < n_keys; ++j) {
        const float pb = __shfl_sync(0xffffffffu, pj, j);
        const float* vr = v_s + j * hd;
#pragma unroll
        for (int c = 0; c < DPL; ++c) {
          const int32_t d = lane + 32 * c;
          if (d < hd) acc[i][c] += pb * vr[d];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
    const int32_t r = warp * kPrefillRowsPerWarp + i;
    if (r >= n_rows) continue;
    const float inv_l = 1.0f / st[i].l;
    float* o = out + (q_start + row0 + r) * q_stride + head * hd;
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      const int32_t d = lane + 32 * c;
      if (d < hd) o[d] = acc[i][c] * inv_l;
    }
  }
}

template <DType T, int DPL>
void launch_variant(const AttentionArgs& a, const DeviceBatch& b, const LaunchConfig& c,
                    cudaStream_t stream) {
  auto kernel = attention_prefill_kernel<T, DPL>;
  if (c.smem_bytes > kSmemDefaultLimitBytes) {
    PREFIXD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(c.smem_bytes)));
  }
  using S = typename Elem<T>::Storage;
  kernel<<<dim3(c.grid.x, c.grid.y), dim3(c.block.x), c.smem_bytes, stream>>>(
      static_cast<const S*>(a.k_pool), static_cast<const S*>(a.v_pool), a.block_size, a.n_heads,
      a.n_kv_heads, a.head_dim, a.scale, a.window_tokens, a.q, a.out, b.seqs(), b.tables(),
      b.prefill_tiles());
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention_prefill(const AttentionArgs& a, const DeviceBatch& b, cudaStream_t stream) {
  const LaunchConfig c = attention_prefill_launch(b.layout.n_prefill_tiles, a.n_heads, a.head_dim);
  if (c.empty()) return;
  PREFIXD_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "heads not a multiple of kv heads");
  const int32_t dpl = attention_dims_per_lane(a.head_dim);
  PREFIXD_CHECK(dpl != 0, "head_dim unsupported by the CUDA attention kernels (max 256)");
  PREFIXD_DISPATCH_DTYPE(a.kv_dtype, {
    switch (dpl) {
      case 1: launch_variant<kT, 1>(a, b, c, stream); break;
      case 2: launch_variant<kT, 2>(a, b, c, stream); break;
      case 4: launch_variant<kT, 4>(a, b, c, stream); break;
      default: launch_variant<kT, 8>(a, b, c, stream); break;
    }
  });
}

}  // namespace prefixd::cuda
