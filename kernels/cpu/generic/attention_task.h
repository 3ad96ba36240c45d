// Paged causal attention (flash-attention style, online softmax) for one task,
// written once over a set's vector layer `Vec` (N lanes). Lanes run over N
// (query row, head) pairs of one KV-head group, so scores, max, exp and the
// softmax sums are all vertical operations. Per chunk of C keys in f32 (from
// the rows attention() converted once for all tasks of the KV head, or
// converted here from the pool), shared by every lane group of the task, both
// products are register-tiled like a matrix product: R keys x G lane groups of scores
// (S = K Qᵀ: each K value loaded once for G groups, each Q vector once for R
// keys), then R head-dim rows x G groups of P·V (accᵀ = accᵀ·alpha + Vᵀ P).
// Sets with a BF16 dot product multiply a BF16 pool's rows as they are, with
// Q and the probabilities rounded to BF16 (FlashAttention's BF16 operands):
// the products then take pairs of head-dim elements (scores) or of keys (P·V).
// A task (run_task_on) loads its lane groups' Q (load_group), then per chunk
// takes the shared operand rows or converts its own (PoolRows), attends to it
// a group tile at a time (attend_chunk: chunk_step's score_chunk,
// softmax_chunk, pv_chunk), and stores its rows (store_group).
// Included by kernels/cpu/<isa>/kernels.cpp only.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/with_count.h"
#include "kernels/dtype.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace attn {

using V = typename Vec::T;
constexpr int kLanes = Vec::N;
constexpr int kGroups = 64 / kLanes;            // lane groups per task: 64 (row, head) pairs
constexpr int kGroupTile = Vec::kAttnGroupTile;  // lane groups per register tile
constexpr int kRowTile = Vec::kAttnRowTile;      // keys (scores) or head-dim rows (P·V) per tile
constexpr int kChunk = Vec::kAttnChunk;          // keys per online-softmax step
static_assert(kChunk % kRowTile == 0, "a chunk is whole score tiles");
static_assert(kGroups % kGroupTile == 0, "a task is whole group tiles");

// Scratch: qt, acc [kGroups][head_dim][kLanes]; kc, vc [kChunk][head_dim];
// p [kGroupTile][kChunk][kLanes] (one tile's scores, then probabilities);
// pb, the same probabilities as BF16 key pairs (half as many floats).
inline size_t scratch_floats(int32_t head_dim) {
  return 2 * static_cast<size_t>(kGroups) * head_dim * kLanes + 2 * static_cast<size_t>(kChunk) * head_dim +
         static_cast<size_t>(kGroupTile) * kChunk * kLanes * 3 / 2;
}

// Whether a pool's rows are multiplied in BF16 (else converted to F32).
inline bool bf16_operands(DType dtype, int32_t head_dim) {
  return Vec::kHasBf16Dot && dtype == DType::BF16 && head_dim % 2 == 0;
}

// Operand rows of one KV head, per key: F32 K and V rows (key, D); in BF16,
// K rows (key, D) as in the pool and V in key pairs (key / 2, D, 2), so a
// V element's two keys sit side by side for the dot product.
inline size_t key_bytes(DType dtype, int32_t head_dim) {
  return static_cast<size_t>(head_dim) * (bf16_operands(dtype, head_dim) ? 2 : 4);
}

// dst (n) f32 = src (n) in `dtype`.
PREFIXD_VEC_INLINE void load_row(DType dtype, const void* src, float* dst, int32_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      int32_t i = 0;
      for (; i + kLanes <= n; i += kLanes) Vec::store(dst + i, Vec::load_f16(s + i));
      if (i < n) Vec::store_n(dst + i, Vec::load_f16_n(s + i, n - i), n - i);
      break;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      int32_t i = 0;
      for (; i + kLanes <= n; i += kLanes) Vec::store(dst + i, Vec::load_bf16(s + i));
      if (i < n) Vec::store_n(dst + i, Vec::load_bf16_n(s + i, n - i), n - i);
      break;
    }
  }
}

// Keys [j0, j0 + n) of one KV head, whose pool rows sit `stride` bytes apart
// from k_src and v_src, into operand rows (see key_bytes) at key j0 of the
// regions. A V key pair split over two calls is put a half at a time.
inline void put_keys(DType dtype, const void* k_src, const void* v_src, size_t stride, int32_t D, int32_t j0,
                     int32_t n, void* k_region, void* v_region) {
  const auto* ks = static_cast<const uint8_t*>(k_src);
  const auto* vs = static_cast<const uint8_t*>(v_src);
  if (!bf16_operands(dtype, D)) {
    float* kd = static_cast<float*>(k_region) + static_cast<size_t>(j0) * D;
    float* vd = static_cast<float*>(v_region) + static_cast<size_t>(j0) * D;
    for (int32_t t = 0; t < n; ++t) {
      load_row(dtype, ks + t * stride, kd + static_cast<size_t>(t) * D, D);
      load_row(dtype, vs + t * stride, vd + static_cast<size_t>(t) * D, D);
    }
    return;
  }
#if defined(__AVX512BF16__)
  auto* kd = static_cast<uint16_t*>(k_region);
  auto* vd = static_cast<uint16_t*>(v_region);
  for (int32_t t = 0; t < n; ++t) {
    uint16_t* dst = kd + static_cast<size_t>(j0 + t) * D;
    const auto* src = reinterpret_cast<const uint16_t*>(ks + t * stride);
    int32_t d = 0;
    for (; d + 2 * kLanes <= D; d += 2 * kLanes)
      Vec::store_pairs(dst + d, Vec::load_pairs(src + d));
    if (d < D) std::memcpy(dst + d, src + d, (D - d) * sizeof(uint16_t));
  }
  for (int32_t t = 0; t < n;) {
    const int32_t j = j0 + t;
    uint16_t* pair = vd + static_cast<size_t>(j & ~1) * D;  // (D, 2): keys j & ~1 and (j & ~1) + 1
    const auto* row = reinterpret_cast<const uint16_t*>(vs + t * stride);
    if ((j & 1) == 0 && t + 1 < n) {
      const auto* next = reinterpret_cast<const uint16_t*>(vs + (t + 1) * stride);
      int32_t d = 0;
      for (; d + kLanes <= D; d += kLanes) Vec::store_pairs(pair + 2 * d, Vec::zip_bf16(row + d, next + d));
      for (; d < D; ++d) {
        pair[2 * d] = row[d];
        pair[2 * d + 1] = next[d];
      }
      t += 2;
    } else {
      for (int32_t d = 0; d < D; ++d) pair[2 * d + (j & 1)] = row[d];
      t += 1;
    }
  }
#endif
}

// Zero operand rows of keys [j0, j1) (past the last key: finite, and masked
// as future).
inline void zero_keys(DType dtype, int32_t D, int32_t j0, int32_t j1, void* k_region, void* v_region) {
  if (j1 <= j0) return;
  const size_t row = key_bytes(dtype, D);
  std::memset(static_cast<uint8_t*>(k_region) + j0 * row, 0, (j1 - j0) * row);
  if (!bf16_operands(dtype, D)) {
    std::memset(static_cast<uint8_t*>(v_region) + j0 * row, 0, (j1 - j0) * row);
    return;
  }
  auto* vd = static_cast<uint16_t*>(v_region);
  for (int32_t j = j0; j < j1; ++j) {
    uint16_t* pair = vd + static_cast<size_t>(j & ~1) * D;
    for (int32_t d = 0; d < D; ++d) pair[2 * d + (j & 1)] = 0;
  }
}

// Register-tile helpers: zero; load R head-dim rows from d0 of G groups'
// accumulators (group stride D * kLanes), times alpha[g], the online-softmax
// rescale, unless every alpha is 1 (no lane's maximum moved: most chunks of a
// long context); store them back.
template <int R, int G>
PREFIXD_VEC_INLINE void zero_tile(V (&t)[R][G]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) t[r][g] = Vec::zero();
}
template <int R, int G>
PREFIXD_VEC_INLINE void load_rescaled(V (&t)[R][G], const float* acc, const V* alpha, bool rescale,
                                      int32_t D, int32_t d0) {
  if (!rescale) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        t[r][g] = Vec::load(acc + (static_cast<size_t>(g) * D + d0 + r) * kLanes);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
      t[r][g] = Vec::mul(Vec::load(acc + (static_cast<size_t>(g) * D + d0 + r) * kLanes), alpha[g]);
}
template <int R, int G>
PREFIXD_VEC_INLINE void store_tile(const V (&t)[R][G], float* acc, int32_t D, int32_t d0) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) Vec::store(acc + (static_cast<size_t>(g) * D + d0 + r) * kLanes, t[r][g]);
}

// Causal and window mask (-inf where key `key_r0 + r` is in a lane's future,
// or before its window's first key qlo) and running max of R x G accumulated
// scores, stored to s (group stride kChunk * kLanes, key stride kLanes). The
// scores stay unscaled: the exp scales them (chunk_step).
template <int R, int G>
PREFIXD_VEC_INLINE void score_epilogue(V (&acc)[R][G], float* s, bool mask, float key_r0,
                                       const V* qpos, const V* qlo, V* mx) {
  const V neg_inf = Vec::set1(-INFINITY);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      V v = acc[r][g];
      if (mask) {
        const V key = Vec::set1(key_r0 + static_cast<float>(r));
        v = Vec::select_gt(key, qpos[g], neg_inf, v);
        v = Vec::select_gt(qlo[g], key, neg_inf, v);
      }
      mx[g] = Vec::max(mx[g], v);
      Vec::store(s + (static_cast<size_t>(g) * kChunk + r) * kLanes, v);
    }
  }
}

// Scores of R keys for G lane groups: s[g][r] = sum_d kc[r][d] * qt[g][d] (unscaled),
// masked, mx[g] taking their maximum (score_epilogue). qt: G groups of
// (D, kLanes), group stride D * kLanes. kc: (R, D). kHeadDim > 0 fixes D at
// compile time (offsets become constants, which frees registers); 0 reads
// `dynamic_d`.
template <int R, int G, int kHeadDim>
inline void score_tile(const float* qt, const float* kc, int32_t dynamic_d, float* s, bool mask,
                       float key_r0, const V* qpos, const V* qlo, V* mx) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V acc[R][G];
  zero_tile<R, G>(acc);
  for (int32_t d = 0; d < D; ++d) {
    V q[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) q[g] = Vec::load(qt + (static_cast<size_t>(g) * D + d) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V k = Vec::set1(kc[r * D + d]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = Vec::fmadd(k, q[g], acc[r][g]);
    }
  }
  score_epilogue<R, G>(acc, s, mask, key_r0, qpos, qlo, mx);
}

// R head-dim rows from d0 of G groups' accumulators:
// acc[g][d] = acc[g][d] * alpha[g] + sum_j vc[j][d] * p[g][j], j in [0, kChunk).
// Each element sums in key order, the same order whatever the tile shape.
template <int R, int G, int kHeadDim>
inline void pv_tile(float* acc, const float* vc, const float* p, const V* alpha, bool rescale,
                    int32_t dynamic_d, int32_t d0) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V a[R][G];
  load_rescaled<R, G>(a, acc, alpha, rescale, D, d0);
  for (int j = 0; j < kChunk; ++j) {
    V pj[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) pj[g] = Vec::load(p + (static_cast<size_t>(g) * kChunk + j) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V v = Vec::set1(vc[j * D + d0 + r]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) a[r][g] = Vec::fmadd(v, pj[g], a[r][g]);
    }
  }
  store_tile<R, G>(a, acc, D, d0);
}

#if defined(__AVX512BF16__)
// score_tile with BF16 operands: qt G groups of (D / 2, kLanes, 2) BF16 at
// the F32 layout's group stride (2 * D * kLanes halves), kc (R, D) BF16; each
// dot product takes a pair of head-dim elements.
template <int R, int G, int kHeadDim>
inline void score_tile_bf16(const uint16_t* qt, const uint16_t* kc, int32_t dynamic_d, float* s,
                            bool mask, float key_r0, const V* qpos, const V* qlo, V* mx) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V acc[R][G];
  zero_tile<R, G>(acc);
  for (int32_t d = 0; d < D; d += 2) {
    typename Vec::PairT q[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) q[g] = Vec::load_pairs(qt + (static_cast<size_t>(g) * 2 * D + d) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t k;
      std::memcpy(&k, kc + r * D + d, sizeof(k));
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = Vec::dot_pairs(acc[r][g], q[g], k);
    }
  }
  score_epilogue<R, G>(acc, s, mask, key_r0, qpos, qlo, mx);
}

// pv_tile with BF16 operands: vc (kChunk / 2, D, 2) and pb G groups of
// (kChunk / 2, kLanes, 2) BF16 key pairs; sums run over key pairs in order.
template <int R, int G, int kHeadDim>
inline void pv_tile_bf16(float* acc, const uint16_t* vc, const uint16_t* pb, const V* alpha,
                         bool rescale, int32_t dynamic_d, int32_t d0) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V a[R][G];
  load_rescaled<R, G>(a, acc, alpha, rescale, D, d0);
  for (int j = 0; j < kChunk; j += 2) {
    typename Vec::PairT pj[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) pj[g] = Vec::load_pairs(pb + (static_cast<size_t>(g) * kChunk + j) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t v;
      std::memcpy(&v, vc + static_cast<size_t>(j) * D + 2 * (d0 + r), sizeof(v));
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) a[r][g] = Vec::dot_pairs(a[r][g], pj[g], v);
    }
  }
  store_tile<R, G>(a, acc, D, d0);
}
#endif

// Per-lane online-softmax state of one lane group: running maximum and sum,
// the query position and the first key of its window (-inf: no window).
struct LaneState {
  V m, l, qpos, qlo;
};

// Scores of one chunk's kChunk keys from position key0 for G lane groups,
// a tile of kRowTile keys at a time (score_tile), into p (G groups of
// (kChunk, kLanes)); mx[g] their unscaled maximum.
template <bool kBf16, int G, int kHeadDim>
PREFIXD_VEC_INLINE void score_chunk(const void* qt, const void* kc, float* p, int32_t D, float key0,
                                    bool need_mask, const V* qpos, const V* qlo, V* mx) {
#pragma GCC unroll 1
  for (int j0 = 0; j0 < kChunk; j0 += kRowTile) {
    const float fkey = key0 + static_cast<float>(j0);
    if constexpr (kBf16) {
#if defined(__AVX512BF16__)
      score_tile_bf16<kRowTile, G, kHeadDim>(static_cast<const uint16_t*>(qt),
                                             static_cast<const uint16_t*>(kc) + j0 * D, D,
                                             p + j0 * kLanes, need_mask, fkey, qpos, qlo, mx);
#endif
    } else {
      score_tile<kRowTile, G, kHeadDim>(static_cast<const float*>(qt),
                                        static_cast<const float*>(kc) + j0 * D, D, p + j0 * kLanes,
                                        need_mask, fkey, qpos, qlo, mx);
    }
  }
}

// The online-softmax update of one chunk for G lane groups: mx[g] (the
// chunk's unscaled maximum) becomes the new running maximum (log2 units),
// p's scores become probabilities (also as BF16 key pairs in pb, kBf16),
// st[g].m and st[g].l take the chunk, alpha[g] the rescale of what was
// accumulated before. Returns whether any alpha differs from 1.
template <bool kBf16, int G>
PREFIXD_VEC_INLINE bool softmax_chunk(float* p, uint16_t* pb, V vscale, V* mx, LaneState* st,
                                      V* alpha) {
  // A lane whose keys so far all lie before its window has maximum -inf; the
  // floor keeps s - max and m - max at -inf (probability 0) instead of NaN.
  // Finite maxima (every lane without a window) are unchanged.
  const V floor = Vec::set1(-FLT_MAX);
  for (int g = 0; g < G; ++g) mx[g] = Vec::max(Vec::max(st[g].m, Vec::mul(mx[g], vscale)), floor);
  for (int g = 0; g < G; ++g) {
    float* pg = p + static_cast<size_t>(g) * kChunk * kLanes;
    V sum = Vec::zero();
    if constexpr (kBf16) {
#if defined(__AVX512BF16__)
      alpha[g] = Vec::exp2_nonpositive_bf16(Vec::sub(st[g].m, mx[g]));  // 0 while m == -inf
      uint16_t* pbg = pb + static_cast<size_t>(g) * kChunk * kLanes;
      for (int j = 0; j < kChunk; j += 2) {
        const V e0 =
            Vec::exp2_nonpositive_bf16(Vec::fmsub(Vec::load(pg + j * kLanes), vscale, mx[g]));
        const V e1 =
            Vec::exp2_nonpositive_bf16(Vec::fmsub(Vec::load(pg + (j + 1) * kLanes), vscale, mx[g]));
        Vec::store_pairs(pbg + j * kLanes, Vec::round_pairs(e0, e1));
        sum = Vec::add(Vec::add(sum, e0), e1);
      }
#endif
    } else {
      alpha[g] = Vec::exp2_nonpositive(Vec::sub(st[g].m, mx[g]));  // 0 while m == -inf
      for (int j = 0; j < kChunk; ++j) {
        const V e = Vec::exp2_nonpositive(Vec::fmsub(Vec::load(pg + j * kLanes), vscale, mx[g]));
        Vec::store(pg + j * kLanes, e);
        sum = Vec::add(sum, e);
      }
    }
    st[g].l = Vec::fmadd(st[g].l, alpha[g], sum);
    st[g].m = mx[g];
  }
  bool rescale = false;
  for (int g = 0; g < G; ++g) rescale = rescale || !Vec::all_equal(alpha[g], 1.0f);
  return rescale;
}

// acc = acc * alpha + P·V for one chunk and G lane groups, kRowTile head-dim
// rows at a time (pv_tile; the last tile shorter when kRowTile does not
// divide D).
template <bool kBf16, int G, int kHeadDim>
PREFIXD_VEC_INLINE void pv_chunk(float* acc, const void* vc, const float* p, const uint16_t* pb,
                                 const V* alpha, bool rescale, int32_t D) {
  auto pv = [&]<int R>(int32_t d0) {
    if constexpr (kBf16) {
#if defined(__AVX512BF16__)
      pv_tile_bf16<R, G, kHeadDim>(acc, static_cast<const uint16_t*>(vc), pb, alpha, rescale, D,
                                   d0);
#endif
    } else {
      pv_tile<R, G, kHeadDim>(acc, static_cast<const float*>(vc), p, alpha, rescale, D, d0);
    }
  };
  for (int32_t d0 = 0; d0 < D; d0 += kRowTile) {
    const int rows = static_cast<int>(std::min<int32_t>(kRowTile, D - d0));
    if (rows == kRowTile) {
      pv.template operator()<kRowTile>(d0);
    } else {
      with_count<kRowTile - 1>(rows, [&]<int R>() { pv.template operator()<R>(d0); });
    }
  }
}

// One chunk of kChunk keys starting at position `key0` for G lane groups:
// scores, causal mask, online softmax update and P·V. qt, acc: G groups of
// (D, kLanes). kc, vc: the chunk's operand rows (key_bytes; f32, or with
// kBf16 BF16). p: the tile's score and probability scratch; pb: the
// probabilities as BF16 key pairs (kBf16).
template <bool kBf16, int G, int kHeadDim>
inline void chunk_step(const void* qt, float* acc, const void* kc, const void* vc, float* p, uint16_t* pb,
                       int32_t dynamic_d, float scale, float key0, bool need_mask, LaneState* st) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V qpos[G], qlo[G], mx[G];
  for (int g = 0; g < G; ++g) {
    qpos[g] = st[g].qpos;
    qlo[g] = st[g].qlo;
    mx[g] = Vec::set1(-INFINITY);  // the chunk's unscaled maximum first
  }
  score_chunk<kBf16, G, kHeadDim>(qt, kc, p, D, key0, need_mask, qpos, qlo, mx);
  // The exp scales the scores (s * scale - max, one fmsub), not the score
  // tiles, in log2 units (scale * log2 e) for Vec::exp2_nonpositive; the
  // running maxima are in those units too.
  const V vscale = Vec::set1(scale * 1.44269504088896341f);
  V alpha[G];
  const bool rescale = softmax_chunk<kBf16, G>(p, pb, vscale, mx, st, alpha);
  pv_chunk<kBf16, G, kHeadDim>(acc, vc, p, pb, alpha, rescale, D);
}

// --- the task runner: run_task_on's jobs, in the order it does them ---------

// A task's scratch (scratch_floats(D) floats), carved into its buffers.
struct TaskScratch {
  float* qt;   // kGroups x (D, kLanes) f32 transposed Q; BF16 operands: (D / 2, kLanes, 2)
               // halves per group at the same group stride
  float* acc;  // kGroups x (D, kLanes) f32 output accumulators
  float* kc;   // (kChunk, D) operand rows of one chunk's keys (key_bytes each)
  float* vc;   // (kChunk, D) the same for V
  float* p;    // (kGroupTile, kChunk, kLanes) f32 one tile's scores, then probabilities
  uint16_t* pb;  // the same probabilities as BF16 key pairs
  size_t group_floats;  // D * kLanes: one group's stride in qt and acc
};
PREFIXD_VEC_INLINE TaskScratch carve_scratch(float* scratch, int32_t D) {
  TaskScratch s;
  s.group_floats = static_cast<size_t>(D) * kLanes;
  s.qt = scratch;
  s.acc = s.qt + kGroups * s.group_floats;
  s.kc = s.acc + kGroups * s.group_floats;
  s.vc = s.kc + static_cast<size_t>(kChunk) * D;
  s.p = s.vc + static_cast<size_t>(kChunk) * D;
  s.pb = reinterpret_cast<uint16_t*>(s.p + static_cast<size_t>(kGroupTile) * kChunk * kLanes);
  return s;
}

// The least and greatest query position and window start of some lanes
// (a lane group's, or a register tile's groups').
struct LaneBounds {
  int32_t min_qpos = INT32_MAX, max_qpos = 0, min_qlo = INT32_MAX, max_qlo = 0;
  void add(int32_t qpos, int32_t qlo) {
    min_qpos = std::min(min_qpos, qpos);
    max_qpos = std::max(max_qpos, qpos);
    min_qlo = std::min(min_qlo, qlo);
    max_qlo = std::max(max_qlo, qlo);
  }
  void add(const LaneBounds& o) {
    min_qpos = std::min(min_qpos, o.min_qpos);
    max_qpos = std::max(max_qpos, o.max_qpos);
    min_qlo = std::min(min_qlo, o.min_qlo);
    max_qlo = std::max(max_qlo, o.max_qlo);
  }
};

// Lane group gi of the task: its Q rows transposed into qt (group stride
// D * kLanes; BF16 operands: rounded, in head-dim pairs), its accumulators
// zeroed, its online-softmax state started and its lanes' bounds. Padding
// lanes past f_end see every key; their output is discarded.
template <bool kBf16>
inline void load_group(const AttnArgs& a, const AttnTask& task, int32_t gi, float* qt, float* acc,
                       LaneState& st, LaneBounds& bounds) {
  const BatchSeq& seq = a.batch->seqs.data()[task.seq];
  const int32_t D = a.kv->geom.head_dim;
  const int32_t G = a.n_heads / a.kv->geom.n_kv_heads;
  const int64_t q_row = static_cast<int64_t>(a.n_heads) * D;
  const int32_t window = a.window_tokens;
  auto* qtb = reinterpret_cast<uint16_t*>(qt);
  std::memset(qt, 0, sizeof(float) * D * kLanes);
  std::memset(acc, 0, sizeof(float) * D * kLanes);
  alignas(64) float pos[kLanes], lo[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    const int32_t f = task.f_begin + gi * kLanes + lane;
    if (f >= task.f_end) {
      pos[lane] = INFINITY;  // padding lane: sees every key, output discarded
      lo[lane] = -INFINITY;
      continue;
    }
    const int32_t i = f / G;
    const int32_t h = task.kv_head * G + f % G;
    const int32_t pq = seq.pos0 + i;
    pos[lane] = static_cast<float>(pq);  // exact: positions are far below 2^24
    const int32_t first = window > 0 ? std::max(0, pq - window + 1) : 0;
    lo[lane] = window > 0 ? static_cast<float>(first) : -INFINITY;
    bounds.add(pq, first);
    const float* qv = a.q + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
    if constexpr (kBf16) {
      for (int32_t d = 0; d < D; d += 2) {
        qtb[(d * kLanes + 2 * lane)] = prefixd::f32_to_bf16(qv[d]);
        qtb[(d * kLanes + 2 * lane) + 1] = prefixd::f32_to_bf16(qv[d + 1]);
      }
    } else {
      for (int32_t d = 0; d < D; ++d) qt[d * kLanes + lane] = qv[d];
    }
  }
  st.qpos = Vec::load(pos);
  st.qlo = Vec::load(lo);
  st.m = Vec::set1(-INFINITY);
  st.l = Vec::zero();
}

// The task's KV head's rows in the pool, converted a chunk at a time into
// the scratch's kc and vc (when attention() has not converted them once for
// every task of the head).
struct PoolRows {
  DType dtype;
  int32_t D, bs, kv_len;
  const int32_t* table;  // the sequence's block table
  const uint8_t* k_base;  // the layer's K (and V) pool
  const uint8_t* v_base;
  size_t slot_bytes;  // one position's K (or V) row, every KV head
  size_t head_bytes;  // D * elem: one head's row
  size_t head_off;    // the task's head within a slot
  void* kc;
  void* vc;

  PoolRows(const AttnArgs& a, const AttnTask& task, void* kc_scratch, void* vc_scratch) {
    const KvGeometry& g = a.kv->geom;
    const BatchSeq& seq = a.batch->seqs.data()[task.seq];
    const size_t elem = dtype_bytes(g.dtype);
    dtype = g.dtype;
    D = g.head_dim;
    bs = a.batch->block_size;
    kv_len = task.kv_len;
    table = a.batch->block_tables.data() + seq.table_start;
    k_base = static_cast<const uint8_t*>(a.kv->k[a.layer]);
    v_base = static_cast<const uint8_t*>(a.kv->v[a.layer]);
    slot_bytes = static_cast<size_t>(g.n_kv_heads) * D * elem;
    head_bytes = D * elem;
    head_off = static_cast<size_t>(task.kv_head) * D * elem;
    kc = kc_scratch;
    vc = vc_scratch;
  }

  // fn(j, byte offset, run) for each run of keys [key, key + n) that sit in
  // one pool block (consecutive slots): this head's row of key `key + j` is
  // at the offset, the next run - 1 rows follow at slot_bytes apart.
  template <typename Fn>
  PREFIXD_VEC_INLINE void for_each_run(int32_t key, int32_t n, Fn&& fn) const {
    for (int32_t j = 0; j < n;) {
      const int32_t pk = key + j, in_block = pk % bs;
      const int32_t run = std::min(bs - in_block, n - j);
      const int64_t slot = static_cast<int64_t>(table[pk / bs]) * bs + in_block;
      fn(j, static_cast<size_t>(slot) * slot_bytes + head_off, run);
      j += run;
    }
  }

  // kc, vc = this head's operand rows of keys [key0, key0 + kChunk); keys
  // past the end are zeros.
  PREFIXD_VEC_INLINE void convert_chunk(int32_t key0) const {
    const int32_t n_keys = std::min(kChunk, kv_len - key0);
    for_each_run(key0, n_keys, [&](int32_t j, size_t off, int32_t run) {
      put_keys(dtype, k_base + off, v_base + off, slot_bytes, D, j, run, kc, vc);
    });
    // The next chunk's rows are fetched while this one computes: the blocks
    // are scattered over the pool, so the hardware prefetcher cannot follow
    // them, and each row would otherwise miss on its first touch.
    if (key0 + kChunk < kv_len) {
      const int32_t n_next = std::min(kChunk, kv_len - key0 - kChunk);
      for_each_run(key0 + kChunk, n_next, [&](int32_t, size_t off, int32_t run) {
        for (int32_t t = 0; t < run; ++t) {
          for (size_t b = 0; b < head_bytes; b += 64) {
            __builtin_prefetch(k_base + off + t * slot_bytes + b);
            __builtin_prefetch(v_base + off + t * slot_bytes + b);
          }
        }
      });
    }
    zero_keys(dtype, D, n_keys, kChunk, kc, vc);
  }
};

// One chunk of keys from key0 (operand rows kc, vc) for every lane group of
// the task, a register tile of groups at a time: tiles whose rows the chunk
// adds nothing to are skipped, and only tiles the chunk crosses a row's
// position or window start in are masked.
template <bool kBf16>
PREFIXD_VEC_INLINE void attend_chunk(const AttnArgs& a, const TaskScratch& s, int32_t n_groups,
                                     const LaneBounds* bounds, int32_t key0, const void* kc,
                                     const void* vc, LaneState* st) {
  const int32_t D = a.kv->geom.head_dim;
  const float fkey0 = static_cast<float>(key0);
  for (int32_t g0 = 0; g0 < n_groups; g0 += kGroupTile) {
    const int n_tile = static_cast<int>(std::min<int32_t>(kGroupTile, n_groups - g0));
    LaneBounds tile;
    for (int t = 0; t < n_tile; ++t) tile.add(bounds[g0 + t]);
    if (key0 > tile.max_qpos) continue;  // every key of the chunk is in these rows' future
    // Every key before these rows' windows: the chunk would add exactly
    // nothing (probability 0, rescale 1).
    if (key0 + kChunk - 1 < tile.min_qlo) continue;
    const bool need_mask = key0 + kChunk - 1 > tile.min_qpos || key0 < tile.max_qlo;
    const float* qt = s.qt + g0 * s.group_floats;
    float* acc = s.acc + g0 * s.group_floats;
    with_count<kGroupTile>(n_tile, [&]<int NG>() {
      switch (D) {
        case 64:
          chunk_step<kBf16, NG, 64>(qt, acc, kc, vc, s.p, s.pb, D, a.scale, fkey0, need_mask,
                                    st + g0);
          break;
        case 128:
          chunk_step<kBf16, NG, 128>(qt, acc, kc, vc, s.p, s.pb, D, a.scale, fkey0, need_mask,
                                     st + g0);
          break;
        default:
          chunk_step<kBf16, NG, 0>(qt, acc, kc, vc, s.p, s.pb, D, a.scale, fkey0, need_mask,
                                   st + g0);
      }
    });
  }
}

// out rows of lane group gi's pairs = its accumulators / its softmax sums.
inline void store_group(const AttnArgs& a, const AttnTask& task, int32_t gi, const float* acc,
                        const LaneState& st) {
  const BatchSeq& seq = a.batch->seqs.data()[task.seq];
  const int32_t D = a.kv->geom.head_dim;
  const int32_t G = a.n_heads / a.kv->geom.n_kv_heads;
  const int64_t q_row = static_cast<int64_t>(a.n_heads) * D;
  alignas(64) float inv_l[kLanes];
  Vec::store(inv_l, Vec::div(Vec::set1(1.0f), st.l));
  for (int lane = 0; lane < kLanes; ++lane) {
    const int32_t f = task.f_begin + gi * kLanes + lane;
    if (f >= task.f_end) break;
    const int32_t i = f / G;
    const int32_t h = task.kv_head * G + f % G;
    float* ov = a.out + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
    for (int32_t d = 0; d < D; ++d) ov[d] = acc[d * kLanes + lane] * inv_l[lane];
  }
}

// One task: load its lane groups' Q, attend to its keys a chunk at a time
// (the shared operand rows, or its own conversion of the pool's), store
// its outputs.
template <bool kBf16>
inline void run_task_on(const AttnArgs& a, const AttnTask& task, float* scratch) {
  const KvGeometry& g = a.kv->geom;
  const TaskScratch s = carve_scratch(scratch, g.head_dim);
  const int32_t n_groups = (task.f_end - task.f_begin + kLanes - 1) / kLanes;
  LaneState st[kGroups];
  LaneBounds bounds[kGroups];
  for (int32_t gi = 0; gi < n_groups; ++gi)
    load_group<kBf16>(a, task, gi, s.qt + gi * s.group_floats, s.acc + gi * s.group_floats, st[gi],
                      bounds[gi]);

  const PoolRows pool_rows(a, task, s.kc, s.vc);
  const size_t row_bytes = key_bytes(g.dtype, g.head_dim);
  const int64_t rows_offset =
      a.rows_offset != nullptr ? a.rows_offset[task.seq * g.n_kv_heads + task.kv_head] : -1;
  // Lanes' window starts are at or after task.key_first (its first row's
  // window, rounded down to a chunk): the chunks before it are all masked.
  for (int32_t key0 = task.key_first; key0 < task.kv_len; key0 += kChunk) {
    const void* kc = s.kc;
    const void* vc = s.vc;
    if (rows_offset >= 0) {  // converted once for every task of this KV head
      kc = static_cast<const uint8_t*>(a.rows_k) + rows_offset + static_cast<size_t>(key0) * row_bytes;
      vc = static_cast<const uint8_t*>(a.rows_v) + rows_offset + static_cast<size_t>(key0) * row_bytes;
    } else {
      pool_rows.convert_chunk(key0);
    }
    attend_chunk<kBf16>(a, s, n_groups, bounds, key0, kc, vc, st);
  }

  for (int32_t gi = 0; gi < n_groups; ++gi)
    store_group(a, task, gi, s.acc + gi * s.group_floats, st[gi]);
}

inline void run_task(const AttnArgs& a, const AttnTask& task, float* scratch) {
#if defined(__AVX512BF16__)
  if (bf16_operands(a.kv->geom.dtype, a.kv->geom.head_dim)) {
    run_task_on<true>(a, task, scratch);
    return;
  }
#endif
  run_task_on<false>(a, task, scratch);
}

}  // namespace attn

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
