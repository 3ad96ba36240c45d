// Paged attention for decode, flash-decoding: one query row per sequence, the
// keys split over thread blocks, partial results merged by log-sum-exp; all
// query heads of a KV head in one block (K and V read once per GQA group);
// K and V read as 16-byte vectors. Also the reduction of the splits, shared
// with the simple kernel (attention_decode_simple.cu).
//
// Decomposition (launch_config.h: flash_decode_shape, flash_decode_launch,
// decode_split_count):
//   grid (n_decode_seqs, n_kv_heads * head_groups, n_splits), block
//   kFlashDecodeWarps x 32 threads; GT = heads_per_block query heads
//   (h0 .. h0 + GT - 1 of KV head kv_head). Nothing in the grid or the
//   arguments depends on sequence lengths: a block reads its sequence's pos0
//   and block table from the packed batch and takes split `split` of its
//   visible keys [paging::window_first_key(pos0), pos0 + 1)
//   (paging::split_range; blocks past paging::split_count exit).
//   Lanes: a key row of head_dim elements is VEC-element 16-byte vectors;
//   TPK = lanes_per_key lanes read one row (lane gl of its group holds vectors
//   gl, gl + TPK, ...: NV = vecs_per_lane of them), so a warp reads
//   32 / TPK rows per load instruction, R = keys_per_group rows per lane
//   group per step (flash_decode_key), K and V of all R issued before use.
//   Per step: each group's R x GT dot products are reduced over its TPK lanes
//   (shuffle butterfly: every lane of a group holds the same score); the warp
//   folds the step's max per head into a warp-uniform running max
//   (op::softmax_fold_max), then each lane accumulates p * V for its dims.
//   A lane's sum l and accumulator cover its group's keys; after the last
//   step the groups of a warp add up (same max), the warps meet in shared
//   memory and merge (paging::merge_partial_*), and the block writes the
//   normalised output (one used split) or its partial (m, l, acc[head_dim]).
// Registers: q (GT, NV * VEC) and acc (GT, NV * VEC) f32 per lane, R x NV
// 16-byte vectors each of K and V in flight (R = 2 for GT = 8).
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/op_math.h"
#include "kernels/op_math_ext.h"
#include "kernels/paging.h"

namespace prefixd::cuda {
namespace {

// 16 bytes of a K or V row as floats (exact conversions, as kernels/dtype.h).
template <DType T>
struct KvVec;
template <>
struct KvVec<DType::F32> {
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void to_f32(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
};
template <>
struct KvVec<DType::BF16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void pair(uint32_t w, float* f) {
    f[0] = __uint_as_float(w << 16);  // element 2i: the low half (little-endian)
    f[1] = __uint_as_float(w & 0xffff0000u);
  }
  static __device__ __forceinline__ void to_f32(const uint4& u, float* f) {
    pair(u.x, f);
    pair(u.y, f + 2);
    pair(u.z, f + 4);
    pair(u.w, f + 6);
  }
};
template <>
struct KvVec<DType::F16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void pair(uint32_t w, float* f) {
    f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
    f[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
  static __device__ __forceinline__ void to_f32(const uint4& u, float* f) {
    pair(u.x, f);
    pair(u.y, f + 2);
    pair(u.z, f + 4);
    pair(u.w, f + 6);
  }
};

// Stays long: one register schedule (the header's decomposition); pieces would be
// force-inlined __device__ functions sharing every register array, and
// test_cuda_ptxas guards its spills as it is.
template <DType T, int TPK, int NV, int GT>
__global__ void __launch_bounds__(kFlashDecodeWarps * 32, 1)
    attention_decode_kernel(AttentionArgs a, const int32_t* __restrict__ seqs,
                            const int32_t* __restrict__ tables,
                            const int32_t* __restrict__ decode_seqs, int32_t n_splits,
                            float* __restrict__ partials) {
  constexpr int VEC = KvVec<T>::kElems;
  constexpr int R = flash_decode_keys_per_group(GT);
  extern __shared__ float smem[];  // (kFlashDecodeWarps, GT, head_dim + 2) f32: m, l, acc

  const int32_t hd = a.head_dim, n_vec = hd / VEC;
  const int32_t group = a.n_heads / a.n_kv_heads;
  const int32_t head_groups = (group + GT - 1) / GT;
  const int32_t item = blockIdx.x, split = blockIdx.z;
  const int32_t kv_head = blockIdx.y / head_groups;
  const int32_t h0 = kv_head * group + (blockIdx.y % head_groups) * GT;  // first query head
  const int32_t n_h = min(GT, (kv_head + 1) * group - h0);               // heads of this block
  const int32_t* s = seqs + decode_seqs[item] * kSeqWords;
  const int32_t row = s[0], pos0 = s[2];
  const int32_t* table = tables + s[3];
  const int32_t first = paging::window_first_key(pos0, a.window_tokens), kv_end = pos0 + 1;
  const int32_t used = paging::split_count(kv_end - first, kDecodeSplitChunkKeys, n_splits);
  if (split >= used) return;  // block-uniform: an empty split
  const paging::KeyRange keys =
      paging::split_range(first, kv_end, kDecodeSplitChunkKeys, split, used);

  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t grp = lane / TPK, gl = lane % TPK;
  const int64_t q_row = int64_t(row) * a.n_heads * hd;  // first float of the row in q and out

  float qv[GT][NV][VEC];  // this lane's dims of the block's query heads
#pragma unroll
  for (int h = 0; h < GT; ++h) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int32_t vi = v * TPK + gl;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        qv[h][v][e] =
            h < n_h && vi < n_vec ? a.q[q_row + int64_t(h0 + h) * hd + vi * VEC + e] : 0.0f;
    }
  }

  const int64_t slot_vecs = int64_t(a.n_kv_heads) * n_vec;  // 16-byte vectors per pool slot
  const uint4* k_head = static_cast<const uint4*>(a.k_pool) + int64_t(kv_head) * n_vec;
  const uint4* v_head = static_cast<const uint4*>(a.v_pool) + int64_t(kv_head) * n_vec;

  op::SoftmaxState st[GT];  // m: warp-uniform; l: this lane group's keys
  float acc[GT][NV][VEC];   // this lane group's keys, this lane's dims
#pragma unroll
  for (int h = 0; h < GT; ++h) {
    st[h] = op::softmax_init();
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[h][v][e] = 0.0f;
  }

  for (int32_t step = 0; flash_decode_key(keys.begin, step, warp, 0, 0, TPK, R) < keys.end;
       ++step) {
    uint4 kr[R][NV], vr[R][NV];
    bool valid[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int32_t key = flash_decode_key(keys.begin, step, warp, r, grp, TPK, R);
      valid[r] = key < keys.end;
      const int64_t at =
          valid[r] ? int64_t(paging::slot_of(table, a.block_size, key)) * slot_vecs : 0;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const int32_t vi = v * TPK + gl;
        if (valid[r] && vi < n_vec) {
          kr[r][v] = __ldg(k_head + at + vi);
          vr[r][v] = __ldg(v_head + at + vi);
        } else {
          kr[r][v] = make_uint4(0, 0, 0, 0);
          vr[r][v] = make_uint4(0, 0, 0, 0);
        }
      }
    }

    float sc[R][GT];  // scaled scores; -inf for keys past the split
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float kf[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; ++v) KvVec<T>::to_f32(kr[r][v], kf[v]);
#pragma unroll
      for (int h = 0; h < GT; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
          for (int e = 0; e < VEC; ++e) dot += qv[h][v][e] * kf[v][e];
#pragma unroll
        for (int off = TPK / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        sc[r][h] = valid[r] ? dot * a.scale : -INFINITY;
      }
    }

#pragma unroll
    for (int h = 0; h < GT; ++h) {
      float step_max = sc[0][h];
#pragma unroll
      for (int r = 1; r < R; ++r) step_max = fmaxf(step_max, sc[r][h]);
      const float factor = op::softmax_fold_max(&st[h], warp_max(step_max));
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[h][v][e] *= factor;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float vf[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; ++v) KvVec<T>::to_f32(vr[r][v], vf[v]);
#pragma unroll
      for (int h = 0; h < GT; ++h) {
        const float p = sc[r][h] == -INFINITY ? 0.0f : expf(sc[r][h] - st[h].m);
        st[h].l += p;
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[h][v][e] += p * vf[v][e];
      }
    }
  }

  // The warp's groups share the running max: their l and acc add up. Lane
  // gl of group 0 then holds the warp's acc for vectors gl + TPK v.
  const int32_t stride = GT * (hd + 2);
  float* mine = smem + warp * stride;
#pragma unroll
  for (int h = 0; h < GT; ++h) {
    float l = st[h].l;
#pragma unroll
    for (int off = TPK; off < 32; off *= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
#pragma unroll
        for (int off = TPK; off < 32; off *= 2)
          acc[h][v][e] += __shfl_xor_sync(0xffffffffu, acc[h][v][e], off);
    if (h < n_h) {
      float* part = mine + h * (hd + 2);
      if (lane == 0) {
        part[0] = st[h].m;
        part[1] = l;
      }
      if (grp == 0) {
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          const int32_t vi = v * TPK + gl;
          if (vi < n_vec) {
#pragma unroll
            for (int e = 0; e < VEC; ++e)
              part[paging::kPartialHeaderFloats + vi * VEC + e] = acc[h][v][e];
          }
        }
      }
    }
  }
  __syncthreads();

  for (int32_t i = threadIdx.x; i < n_h * hd; i += blockDim.x) {
    const int32_t h = i / hd, d = i % hd;
    const float* parts = smem + h * (hd + 2);  // warp w's partial at parts + w * stride
    const op::SoftmaxState total = paging::merge_partial_states(parts, kFlashDecodeWarps, stride);
    const float acc_d = paging::merge_partial_acc(parts, kFlashDecodeWarps, stride, d, total.m);
    const int32_t head = h0 + h;
    if (used == 1) {
      a.out[q_row + int64_t(head) * hd + d] = paging::normalise(acc_d, total.l);
    } else {
      float* part = partials + ((int64_t(item) * a.n_heads + head) * n_splits + split) * (hd + 2);
      part[paging::kPartialHeaderFloats + d] = acc_d;
      if (d == 0) {
        part[0] = total.m;
        part[1] = total.l;
      }
    }
  }
}

// grid (n_decode_seqs, n_heads), block round_up_warp(head_dim), one thread
// per head dim: merges the used splits' partials (m, l, acc) of one
// (sequence, head); a sequence with one used split was written by the split
// kernel. The weights exp(m_i - M) are computed once per block.
__global__ void attention_decode_reduce_kernel(const float* __restrict__ partials, int32_t n_heads,
                                               int32_t head_dim, int32_t window, int32_t n_splits,
                                               float* __restrict__ out,
                                               const int32_t* __restrict__ seqs,
                                               const int32_t* __restrict__ decode_seqs) {
  __shared__ float weight[kDecodeMaxSplits];  // (used) f32
  const int32_t hd = head_dim, stride = hd + 2;
  const int32_t item = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int32_t* s = seqs + decode_seqs[item] * kSeqWords;
  const int32_t row = s[0], pos0 = s[2];
  const int32_t first = paging::window_first_key(pos0, window);
  const int32_t used = paging::split_count(pos0 + 1 - first, kDecodeSplitChunkKeys, n_splits);
  if (used <= 1) return;  // block-uniform
  const float* part = partials + (int64_t(item) * n_heads + head) * n_splits * stride;
  const float m = paging::partials_max(part, used, stride);
  for (int32_t i = threadIdx.x; i < used; i += blockDim.x)
    weight[i] = paging::partial_weight(part[i * stride], m);
  __syncthreads();
  if (d >= hd) return;
  float l = 0.0f, acc = 0.0f;  // the sums of paging::merge_partial_states / merge_partial_acc
  for (int32_t i = 0; i < used; ++i) l += weight[i] * part[i * stride + 1];
  for (int32_t i = 0; i < used; ++i)
    acc += weight[i] * part[i * stride + paging::kPartialHeaderFloats + d];
  out[int64_t(row) * n_heads * hd + int64_t(head) * hd + d] = paging::normalise(acc, l);
}

template <DType T, int TPK, int NV, int GT>
void launch_variant(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                    const LaunchConfig& c, float* partials, cudaStream_t stream) {
  attention_decode_kernel<T, TPK, NV, GT>
      <<<dim3(c.grid.x, c.grid.y, c.grid.z), dim3(c.block.x), c.smem_bytes, stream>>>(
          a, b.seqs(), b.tables(), b.decode_seqs(), n_splits, partials);
  PREFIXD_CUDA_CHECK_LAUNCH();
}

template <DType T, int TPK, int NV>
void launch_heads(const FlashDecodeShape& s, const AttentionArgs& a, const DeviceBatch& b,
                  int32_t n_splits, const LaunchConfig& c, float* partials, cudaStream_t stream) {
  switch (s.heads_per_block) {
    case 1:
      launch_variant<T, TPK, NV, 1>(a, b, n_splits, c, partials, stream);
      break;
    case 2:
      launch_variant<T, TPK, NV, 2>(a, b, n_splits, c, partials, stream);
      break;
    case 4:
      launch_variant<T, TPK, NV, 4>(a, b, n_splits, c, partials, stream);
      break;
    default:
      launch_variant<T, TPK, NV, 8>(a, b, n_splits, c, partials, stream);
      break;
  }
}

// Instantiated layouts: F16/BF16 (8-element vectors) 1..32 lanes per key;
// F32 (4-element vectors, head_dim a multiple of 8) 2..32 lanes, and 2
// vectors per lane over 128 elements.
template <DType T>
void launch_lanes(const FlashDecodeShape& s, const AttentionArgs& a, const DeviceBatch& b,
                  int32_t n_splits, const LaunchConfig& c, float* partials, cudaStream_t stream) {
  if constexpr (T == DType::F32) {
    switch (s.lanes_per_key) {
      case 2:
        launch_heads<T, 2, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 4:
        launch_heads<T, 4, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 8:
        launch_heads<T, 8, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 16:
        launch_heads<T, 16, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      default:
        if (s.vecs_per_lane == 2)
          launch_heads<T, 32, 2>(s, a, b, n_splits, c, partials, stream);
        else
          launch_heads<T, 32, 1>(s, a, b, n_splits, c, partials, stream);
        break;
    }
  } else {
    switch (s.lanes_per_key) {
      case 1:
        launch_heads<T, 1, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 2:
        launch_heads<T, 2, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 4:
        launch_heads<T, 4, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 8:
        launch_heads<T, 8, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      case 16:
        launch_heads<T, 16, 1>(s, a, b, n_splits, c, partials, stream);
        break;
      default:
        launch_heads<T, 32, 1>(s, a, b, n_splits, c, partials, stream);
        break;
    }
  }
}

}  // namespace

void launch_attention_decode(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                             float* partials, cudaStream_t stream) {
  const FlashDecodeShape s = flash_decode_shape(a.kv_dtype, a.n_heads, a.n_kv_heads, a.head_dim);
  PREFIXD_CHECK(s.supported, "flash decode does not take this shape (see flash_decode_shape)");
  const LaunchConfig c =
      flash_decode_launch(b.layout.n_decode_seqs, a.n_kv_heads, a.head_dim, s, n_splits);
  if (c.empty()) return;
  PREFIXD_CHECK(n_splits >= 1 && n_splits <= kDecodeMaxSplits, "decode split count out of range");
  PREFIXD_CHECK(n_splits == 1 || partials != nullptr, "split decode needs a workspace");
  PREFIXD_CHECK(c.smem_bytes <= kSmemDefaultLimitBytes,
                "flash decode shared memory over the default limit");
  PREFIXD_CHECK(reinterpret_cast<uintptr_t>(a.k_pool) % kVecBytes == 0 &&
                    reinterpret_cast<uintptr_t>(a.v_pool) % kVecBytes == 0,
                "KV pool not 16-byte aligned");
  PREFIXD_DISPATCH_DTYPE(a.kv_dtype, { launch_lanes<kT>(s, a, b, n_splits, c, partials, stream); });
  launch_attention_decode_reduce(a, b, n_splits, partials, stream);
}

void launch_attention_decode_reduce(const AttentionArgs& a, const DeviceBatch& b, int32_t n_splits,
                                    float* partials, cudaStream_t stream) {
  if (n_splits <= 1) return;
  const LaunchConfig r =
      attention_decode_reduce_launch(b.layout.n_decode_seqs, a.n_heads, a.head_dim);
  if (r.empty()) return;
  attention_decode_reduce_kernel<<<dim3(r.grid.x, r.grid.y), dim3(r.block.x), 0, stream>>>(
      partials, a.n_heads, a.head_dim, a.window_tokens, n_splits, a.out, b.seqs(), b.decode_seqs());
  PREFIXD_CUDA_CHECK_LAUNCH();
}

}  // namespace prefixd::cuda
