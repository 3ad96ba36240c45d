// Paged causal attention (flash-attention style, online softmax) for one task,
// written once over a set's vector layer `Vec` (N lanes). Lanes run over N
// (query row, head) pairs of one KV-head group, so scores, max, exp and the
// softmax sums are all vertical operations. Per chunk of C keys in f32 (from
// the rows attention() converted once for all tasks of the KV head, or
// converted here from the pool), shared by every lane group of the task, both
// products are register-tiled like a matrix product: R keys x G lane groups of scores
// (S = K Qᵀ: each K value loaded once for G groups, each Q vector once for R
// keys), then R head-dim rows x G groups of P·V (accᵀ = accᵀ·alpha + Vᵀ P).
// Included by kernels/cpu/<isa>/kernels.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/generic/with_count.h"

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
// p [kGroupTile][kChunk][kLanes] (one tile's scores, then probabilities).
inline size_t scratch_floats(int32_t head_dim) {
  return 2 * static_cast<size_t>(kGroups) * head_dim * kLanes + 2 * static_cast<size_t>(kChunk) * head_dim +
         static_cast<size_t>(kGroupTile) * kChunk * kLanes;
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

// Scores of R keys for G lane groups: s[g][r] = scale * sum_d kc[r][d] * qt[g][d],
// -inf where key `key_r0 + r` is in lane's future (with `mask`); mx[g] takes
// their maximum. qt: G groups of (D, kLanes), group stride D * kLanes.
// kc: (R, D). s: group stride kChunk * kLanes, key stride kLanes. kHeadDim > 0
// fixes D at compile time (offsets become constants, which frees registers);
// 0 reads `dynamic_d`.
template <int R, int G, int kHeadDim>
inline void score_tile(const float* qt, const float* kc, int32_t dynamic_d, float* s, V scale, bool mask,
                       float key_r0, const V* qpos, V* mx) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = Vec::zero();
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
  const V neg_inf = Vec::set1(-INFINITY);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      V v = Vec::mul(acc[r][g], scale);
      if (mask) v = Vec::select_gt(Vec::set1(key_r0 + static_cast<float>(r)), qpos[g], neg_inf, v);
      mx[g] = Vec::max(mx[g], v);
      Vec::store(s + (static_cast<size_t>(g) * kChunk + r) * kLanes, v);
    }
  }
}

// R head-dim rows from d0 of G groups' accumulators:
// acc[g][d] = acc[g][d] * alpha[g] + sum_j vc[j][d] * p[g][j], j in [0, kChunk).
// Each element sums in key order, the same order whatever the tile shape.
template <int R, int G, int kHeadDim>
inline void pv_tile(float* acc, const float* vc, const float* p, const V* alpha, int32_t dynamic_d, int32_t d0) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V a[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
      a[r][g] = Vec::mul(Vec::load(acc + (static_cast<size_t>(g) * D + d0 + r) * kLanes), alpha[g]);
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
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) Vec::store(acc + (static_cast<size_t>(g) * D + d0 + r) * kLanes, a[r][g]);
}

// Per-lane online-softmax state of one lane group.
struct LaneState {
  V m, l, qpos;
};

// One chunk of kChunk keys starting at position `key0` for G lane groups:
// scores, causal mask, online softmax update and P·V. qt, acc: G groups of
// (D, kLanes). kc, vc: (kChunk, D) f32. p: the tile's probability scratch.
template <int G, int kHeadDim>
inline void chunk_step(const float* qt, float* acc, const float* kc, const float* vc, float* p,
                       int32_t dynamic_d, float scale, float key0, bool need_mask, LaneState* st) {
  const int32_t D = kHeadDim > 0 ? kHeadDim : dynamic_d;
  V qpos[G], mx[G];
  for (int g = 0; g < G; ++g) {
    qpos[g] = st[g].qpos;
    mx[g] = st[g].m;
  }
  const V vscale = Vec::set1(scale);
#pragma GCC unroll 1
  for (int j0 = 0; j0 < kChunk; j0 += kRowTile) {
    score_tile<kRowTile, G, kHeadDim>(qt, kc + j0 * D, D, p + j0 * kLanes, vscale, need_mask,
                                      key0 + static_cast<float>(j0), qpos, mx);
  }
  V alpha[G];
  for (int g = 0; g < G; ++g) {
    float* pg = p + static_cast<size_t>(g) * kChunk * kLanes;
    alpha[g] = Vec::exp(Vec::sub(st[g].m, mx[g]));  // 0 while m == -inf
    V sum = Vec::zero();
    for (int j = 0; j < kChunk; ++j) {
      const V e = Vec::exp(Vec::sub(Vec::load(pg + j * kLanes), mx[g]));
      Vec::store(pg + j * kLanes, e);
      sum = Vec::add(sum, e);
    }
    st[g].l = Vec::fmadd(st[g].l, alpha[g], sum);
    st[g].m = mx[g];
  }

  for (int32_t d0 = 0; d0 < D; d0 += kRowTile) {
    const int rows = static_cast<int>(std::min<int32_t>(kRowTile, D - d0));
    if (rows == kRowTile) {
      pv_tile<kRowTile, G, kHeadDim>(acc, vc, p, alpha, D, d0);
    } else {
      with_count<kRowTile - 1>(rows, [&]<int R>() { pv_tile<R, G, kHeadDim>(acc, vc, p, alpha, D, d0); });
    }
  }
}

inline void run_task(const AttnArgs& a, const AttnTask& task, float* scratch) {
  const CpuBatch& batch = *a.batch;
  const KvPool& kv = *a.kv;
  const KvGeometry& g = kv.geom;
  const int32_t D = g.head_dim;
  const int32_t G = a.n_heads / g.n_kv_heads;
  const int32_t bs = batch.block_size;
  const BatchSeq& seq = batch.seqs.data()[task.seq];
  const int32_t* table = batch.block_tables.data() + seq.table_start;
  const int64_t q_row = static_cast<int64_t>(a.n_heads) * D;
  const int32_t n_groups = (task.f_end - task.f_begin + kLanes - 1) / kLanes;
  const size_t group_floats = static_cast<size_t>(D) * kLanes;

  float* const qt_all = scratch;
  float* const acc_all = qt_all + kGroups * group_floats;
  float* const kc_scratch = acc_all + kGroups * group_floats;
  float* const vc_scratch = kc_scratch + static_cast<size_t>(kChunk) * D;
  float* const p = vc_scratch + static_cast<size_t>(kChunk) * D;

  LaneState st[kGroups];
  int32_t min_qpos[kGroups], max_qpos[kGroups];
  for (int32_t gi = 0; gi < n_groups; ++gi) {
    float* qt = qt_all + gi * group_floats;
    std::memset(qt, 0, sizeof(float) * group_floats);
    std::memset(acc_all + gi * group_floats, 0, sizeof(float) * group_floats);
    alignas(64) float pos[kLanes];
    min_qpos[gi] = INT32_MAX;
    max_qpos[gi] = 0;
    for (int lane = 0; lane < kLanes; ++lane) {
      const int32_t f = task.f_begin + gi * kLanes + lane;
      if (f >= task.f_end) {
        pos[lane] = INFINITY;  // padding lane: sees every key, output discarded
        continue;
      }
      const int32_t i = f / G;
      const int32_t h = task.kv_head * G + f % G;
      const int32_t pq = seq.pos0 + i;
      pos[lane] = static_cast<float>(pq);  // exact: positions are far below 2^24
      min_qpos[gi] = std::min(min_qpos[gi], pq);
      max_qpos[gi] = std::max(max_qpos[gi], pq);
      const float* qv = a.q + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
      for (int32_t d = 0; d < D; ++d) qt[d * kLanes + lane] = qv[d];
    }
    st[gi].qpos = Vec::load(pos);
    st[gi].m = Vec::set1(-INFINITY);
    st[gi].l = Vec::zero();
  }

  const size_t elem = dtype_bytes(g.dtype);
  const auto* k_base = static_cast<const uint8_t*>(kv.k[a.layer]);
  const auto* v_base = static_cast<const uint8_t*>(kv.v[a.layer]);
  const size_t slot_bytes = static_cast<size_t>(g.n_kv_heads) * D * elem;  // one position's K (or V) row
  // fn(j, byte offset, run) for each run of keys [key, key + n) that sit in
  // one pool block (consecutive slots): this head's row of key `key + j` is
  // at the offset, the next run - 1 rows follow at slot_bytes apart.
  auto for_each_run = [&](int32_t key, int32_t n, auto&& fn) {
    for (int32_t j = 0; j < n;) {
      const int32_t pk = key + j, in_block = pk % bs;
      const int32_t run = std::min(bs - in_block, n - j);
      const int64_t slot = static_cast<int64_t>(table[pk / bs]) * bs + in_block;
      fn(j, static_cast<size_t>(slot) * slot_bytes + static_cast<size_t>(task.kv_head) * D * elem, run);
      j += run;
    }
  };
  // kc, vc = this head's K, V rows of keys [key0, key0 + kChunk), f32; keys
  // past the end are zeros (finite, and masked as future).
  auto convert_chunk = [&](int32_t key0) {
    const int32_t n_keys = std::min(kChunk, task.kv_len - key0);
    for_each_run(key0, n_keys, [&](int32_t j, size_t off, int32_t run) {
      for (int32_t t = 0; t < run; ++t) {
        load_row(g.dtype, k_base + off + t * slot_bytes, kc_scratch + (j + t) * D, D);
        load_row(g.dtype, v_base + off + t * slot_bytes, vc_scratch + (j + t) * D, D);
      }
    });
    // The next chunk's rows are fetched while this one computes: the blocks
    // are scattered over the pool, so the hardware prefetcher cannot follow
    // them, and each row would otherwise miss on its first touch.
    if (key0 + kChunk < task.kv_len) {
      for_each_run(key0 + kChunk, std::min(kChunk, task.kv_len - key0 - kChunk), [&](int32_t, size_t off, int32_t run) {
        for (int32_t t = 0; t < run; ++t) {
          for (size_t b = 0; b < D * elem; b += 64) {
            __builtin_prefetch(k_base + off + t * slot_bytes + b);
            __builtin_prefetch(v_base + off + t * slot_bytes + b);
          }
        }
      });
    }
    if (n_keys < kChunk) {
      std::memset(kc_scratch + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
      std::memset(vc_scratch + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
    }
  };
  const int64_t f32_offset = a.f32_offset != nullptr ? a.f32_offset[task.seq * g.n_kv_heads + task.kv_head] : -1;
  for (int32_t key0 = 0; key0 < task.kv_len; key0 += kChunk) {
    const float* kc = kc_scratch;
    const float* vc = vc_scratch;
    if (f32_offset >= 0) {  // converted once for every task of this KV head
      kc = a.f32_k + f32_offset + static_cast<int64_t>(key0) * D;
      vc = a.f32_v + f32_offset + static_cast<int64_t>(key0) * D;
    } else {
      convert_chunk(key0);
    }
    const float fkey0 = static_cast<float>(key0);
    for (int32_t g0 = 0; g0 < n_groups; g0 += kGroupTile) {
      const int n_tile = static_cast<int>(std::min<int32_t>(kGroupTile, n_groups - g0));
      int32_t tile_min = INT32_MAX, tile_max = 0;
      for (int t = 0; t < n_tile; ++t) {
        tile_min = std::min(tile_min, min_qpos[g0 + t]);
        tile_max = std::max(tile_max, max_qpos[g0 + t]);
      }
      if (key0 > tile_max) continue;  // every key of the chunk is in these rows' future
      const bool need_mask = key0 + kChunk - 1 > tile_min;
      const float* qt = qt_all + g0 * group_floats;
      float* acc = acc_all + g0 * group_floats;
      with_count<kGroupTile>(n_tile, [&]<int NG>() {
        switch (D) {
          case 64:
            chunk_step<NG, 64>(qt, acc, kc, vc, p, D, a.scale, fkey0, need_mask, st + g0);
            break;
          case 128:
            chunk_step<NG, 128>(qt, acc, kc, vc, p, D, a.scale, fkey0, need_mask, st + g0);
            break;
          default:
            chunk_step<NG, 0>(qt, acc, kc, vc, p, D, a.scale, fkey0, need_mask, st + g0);
        }
      });
    }
  }

  for (int32_t gi = 0; gi < n_groups; ++gi) {
    alignas(64) float inv_l[kLanes];
    Vec::store(inv_l, Vec::div(Vec::set1(1.0f), st[gi].l));
    const float* acc = acc_all + gi * group_floats;
    for (int lane = 0; lane < kLanes; ++lane) {
      const int32_t f = task.f_begin + gi * kLanes + lane;
      if (f >= task.f_end) break;
      const int32_t i = f / G;
      const int32_t h = task.kv_head * G + f % G;
      float* ov = a.out + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
      for (int32_t d = 0; d < D; ++d) ov[d] = acc[d * kLanes + lane] * inv_l[lane];
    }
  }
}

}  // namespace attn

}  // namespace prefixd::cpu::PREFIXD_ISA_NS
