// Paged causal attention (flash-attention style, online softmax) for one task,
// written once over a set's vector layer `Vec` (N lanes). Lanes run over N
// (query row, head) pairs of one KV-head group, so scores, max, exp and the
// softmax sums are all vertical operations: per chunk of C keys,
// S_j (N lanes) = sum_d K[j][d] * Qᵀ[d], then accᵀ[d] += V[j][d] * P_j.
// K/V rows are converted to f32 once per chunk and shared by up to kGroups
// lane groups. Included by kernels/cpu/<isa>/kernels.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"

namespace prefixd::cpu::PREFIXD_ISA_NS {

namespace attn {

using V = typename Vec::T;
constexpr int kLanes = Vec::N;
constexpr int kChunk = Vec::kAttnChunk;
constexpr int kPvRows = Vec::kPvRows;
constexpr int kGroups = 64 / kLanes;  // a task covers 64 (row, head) pairs

// Scratch: qt, acc [kGroups][head_dim][kLanes]; kc, vc [kChunk][head_dim].
inline size_t scratch_floats(int32_t head_dim) {
  return 2 * static_cast<size_t>(kGroups) * head_dim * kLanes + 2 * static_cast<size_t>(kChunk) * head_dim;
}

// dst (n) f32 = src (n) in `dtype`.
inline void load_row(DType dtype, const void* src, float* dst, int32_t n) {
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

// One chunk of kChunk keys starting at position `key0` for one lane group:
// scores, causal mask, online softmax update and P·V.
// qt, acc: (head_dim, kLanes) f32. kc, vc: (kChunk, head_dim) f32. m, l: one
// vector each. kHeadDim > 0 fixes head_dim at compile time (row offsets become
// constants, which frees the registers the loops need); 0 reads `dynamic_head_dim`.
template <int kHeadDim>
inline void chunk_step(const float* qt, float* acc, const float* kc, const float* vc,
                       int32_t dynamic_head_dim, float scale, float key0, V qpos, bool need_mask,
                       V& m, V& l) {
  const int32_t head_dim = kHeadDim > 0 ? kHeadDim : dynamic_head_dim;
  V s[kChunk];
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) s[j] = Vec::zero();
  for (int32_t d = 0; d < head_dim; ++d) {
    const V qd = Vec::load(qt + d * kLanes);
#pragma GCC unroll 16
    for (int j = 0; j < kChunk; ++j) s[j] = Vec::fmadd(Vec::set1(kc[j * head_dim + d]), qd, s[j]);
  }
  const V vscale = Vec::set1(scale);
  const V neg_inf = Vec::set1(-INFINITY);
  V mx = m;
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) {
    s[j] = Vec::mul(s[j], vscale);
    if (need_mask) s[j] = Vec::select_gt(Vec::set1(key0 + static_cast<float>(j)), qpos, neg_inf, s[j]);
    mx = Vec::max(mx, s[j]);
  }
  const V alpha = Vec::exp(Vec::sub(m, mx));  // 0 while m == -inf
  V sum = Vec::zero();
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) {
    s[j] = Vec::exp(Vec::sub(s[j], mx));
    sum = Vec::add(sum, s[j]);
  }
  l = Vec::fmadd(l, alpha, sum);
  m = mx;
  // accᵀ[d] = accᵀ[d] * alpha + sum_j V[j][d] * P_j. kPvRows rows d at a time:
  // each row's sum over j is one dependent FMA chain, so interleaving several
  // keeps the FMA ports busy (same order per row: the result is unchanged).
  int32_t d = 0;
  for (; d + kPvRows <= head_dim; d += kPvRows) {
    V a[kPvRows];
#pragma GCC unroll 8
    for (int r = 0; r < kPvRows; ++r) a[r] = Vec::mul(Vec::load(acc + (d + r) * kLanes), alpha);
#pragma GCC unroll 16
    for (int j = 0; j < kChunk; ++j) {
      const float* vj = vc + j * head_dim + d;
#pragma GCC unroll 8
      for (int r = 0; r < kPvRows; ++r) a[r] = Vec::fmadd(Vec::set1(vj[r]), s[j], a[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kPvRows; ++r) Vec::store(acc + (d + r) * kLanes, a[r]);
  }
  if constexpr (kHeadDim == 0 || kHeadDim % kPvRows != 0) {  // rows left over by the groups
    for (; d < head_dim; ++d) {
      V a = Vec::mul(Vec::load(acc + d * kLanes), alpha);
#pragma GCC unroll 16
      for (int j = 0; j < kChunk; ++j) a = Vec::fmadd(Vec::set1(vc[j * head_dim + d]), s[j], a);
      Vec::store(acc + d * kLanes, a);
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

  float* const qt_all = scratch;
  float* const acc_all = qt_all + static_cast<size_t>(kGroups) * D * kLanes;
  float* const kc = acc_all + static_cast<size_t>(kGroups) * D * kLanes;
  float* const vc = kc + static_cast<size_t>(kChunk) * D;

  V m[kGroups], l[kGroups], qpos[kGroups];
  int32_t min_qpos[kGroups], max_qpos[kGroups];
  for (int32_t gi = 0; gi < n_groups; ++gi) {
    float* qt = qt_all + static_cast<size_t>(gi) * D * kLanes;
    std::memset(qt, 0, sizeof(float) * D * kLanes);
    std::memset(acc_all + static_cast<size_t>(gi) * D * kLanes, 0, sizeof(float) * D * kLanes);
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
      const int32_t p = seq.pos0 + i;
      pos[lane] = static_cast<float>(p);  // exact: positions are far below 2^24
      min_qpos[gi] = std::min(min_qpos[gi], p);
      max_qpos[gi] = std::max(max_qpos[gi], p);
      const float* qv = a.q + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
      for (int32_t d = 0; d < D; ++d) qt[d * kLanes + lane] = qv[d];
    }
    qpos[gi] = Vec::load(pos);
    m[gi] = Vec::set1(-INFINITY);
    l[gi] = Vec::zero();
  }

  const size_t elem = dtype_bytes(g.dtype);
  const auto* k_base = static_cast<const uint8_t*>(kv.k[a.layer]);
  const auto* v_base = static_cast<const uint8_t*>(kv.v[a.layer]);
  for (int32_t key0 = 0; key0 < task.kv_len; key0 += kChunk) {
    const int32_t n_keys = std::min(kChunk, task.kv_len - key0);
    for (int32_t j = 0; j < n_keys; ++j) {
      const int32_t p = key0 + j;
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      const size_t off = (static_cast<size_t>(slot) * g.n_kv_heads + task.kv_head) * D * elem;
      load_row(g.dtype, k_base + off, kc + j * D, D);
      load_row(g.dtype, v_base + off, vc + j * D, D);
    }
    // The next chunk's rows are fetched while this one computes: the blocks
    // are scattered over the pool, so the hardware prefetcher cannot follow
    // them, and each row would otherwise miss on its first touch.
    const int32_t next_end = std::min(task.kv_len, key0 + 2 * kChunk);
    for (int32_t p = key0 + kChunk; p < next_end; ++p) {
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      const size_t off = (static_cast<size_t>(slot) * g.n_kv_heads + task.kv_head) * D * elem;
      for (size_t b = 0; b < D * elem; b += 64) {
        __builtin_prefetch(k_base + off + b);
        __builtin_prefetch(v_base + off + b);
      }
    }
    if (n_keys < kChunk) {  // keys past the end: finite zeros, masked as future
      std::memset(kc + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
      std::memset(vc + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
    }
    const float fkey0 = static_cast<float>(key0);
    for (int32_t gi = 0; gi < n_groups; ++gi) {
      if (key0 > max_qpos[gi]) continue;
      const bool need_mask = key0 + kChunk - 1 > min_qpos[gi];
      float* qt = qt_all + static_cast<size_t>(gi) * D * kLanes;
      float* acc = acc_all + static_cast<size_t>(gi) * D * kLanes;
      switch (D) {
        case 64:
          chunk_step<64>(qt, acc, kc, vc, D, a.scale, fkey0, qpos[gi], need_mask, m[gi], l[gi]);
          break;
        case 128:
          chunk_step<128>(qt, acc, kc, vc, D, a.scale, fkey0, qpos[gi], need_mask, m[gi], l[gi]);
          break;
        default:
          chunk_step<0>(qt, acc, kc, vc, D, a.scale, fkey0, qpos[gi], need_mask, m[gi], l[gi]);
      }
    }
  }

  for (int32_t gi = 0; gi < n_groups; ++gi) {
    alignas(64) float inv_l[kLanes];
    Vec::store(inv_l, Vec::div(Vec::set1(1.0f), l[gi]));
    const float* acc = acc_all + static_cast<size_t>(gi) * D * kLanes;
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
