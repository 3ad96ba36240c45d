// Paged causal attention (flash-attention style, online softmax) on AVX-512.
// Vector lanes run over 16 (query row, head) pairs of one KV-head group, so
// scores, max, exp and the softmax sums are all vertical operations: per chunk
// of 16 keys, S_j (16 lanes) = sum_d K[j][d] * Qᵀ[d], then accᵀ[d] += V[j][d] * P_j.
// K/V rows are converted to f32 once per chunk and shared by up to
// kMaxGroups lane groups.
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace prefixd::cpu {

namespace {

constexpr int kLanes = 16;     // (row, head) pairs per vector
constexpr int kChunk = 16;     // keys per inner step
constexpr int kMaxGroups = 4;  // lane groups sharing one K/V chunk conversion

// One unit of parallel work: up to kMaxGroups*kLanes consecutive flattened
// (row i, head g) indices f = i*G + g of one sequence and one KV head.
struct Task {
  int32_t seq;
  int32_t kv_head;
  int32_t f_begin;
  int32_t f_end;
  int32_t kv_len;  // keys this task needs: pos0 + last row + 1
};

// Per-thread scratch, grown on demand.
struct Scratch {
  std::vector<float> qt;   // [kMaxGroups][head_dim][16] Qᵀ per group
  std::vector<float> acc;  // [kMaxGroups][head_dim][16] accumulator ᵀ
  std::vector<float> kc;   // [16][head_dim] K chunk in f32
  std::vector<float> vc;   // [16][head_dim] V chunk in f32
};

// dst (n) f32 = src (n) in `dtype`.
inline void load_row(DType dtype, const void* src, float* dst, int32_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = simd::tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, simd::maskz_load_f16(m, s + i));
      }
      break;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = simd::tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, simd::maskz_load_bf16(m, s + i));
      }
      break;
    }
  }
}

// Processes one chunk of 16 keys starting at position `key0` for one lane
// group: scores, causal mask, online softmax update and P·V.
// qt, acc: (head_dim, 16) f32. kc, vc: (16, head_dim) f32. m, l: 16 lanes each.
// kHeadDim > 0 fixes head_dim at compile time (row offsets become constants,
// which frees the registers the loops need); 0 reads it from `dynamic_head_dim`.
template <int kHeadDim>
inline void chunk_step(const float* qt, float* acc, const float* kc, const float* vc,
                       int32_t dynamic_head_dim, float scale, int32_t key0, __m512i qpos,
                       bool need_mask, __m512& m, __m512& l) {
  const int32_t head_dim = kHeadDim > 0 ? kHeadDim : dynamic_head_dim;
  __m512 s[kChunk];
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) s[j] = _mm512_setzero_ps();
  for (int32_t d = 0; d < head_dim; ++d) {
    const __m512 qd = _mm512_loadu_ps(qt + d * kLanes);
#pragma GCC unroll 16
    for (int j = 0; j < kChunk; ++j)
      s[j] = _mm512_fmadd_ps(_mm512_set1_ps(kc[j * head_dim + d]), qd, s[j]);
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = m;
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) {
    s[j] = _mm512_mul_ps(s[j], vscale);
    if (need_mask) {
      const __mmask16 future = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(key0 + j), qpos);
      s[j] = _mm512_mask_mov_ps(s[j], future, neg_inf);
    }
    mx = _mm512_max_ps(mx, s[j]);
  }
  const __m512 alpha = simd::exp(_mm512_sub_ps(m, mx));  // 0 while m == -inf
  __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < kChunk; ++j) {
    s[j] = simd::exp(_mm512_sub_ps(s[j], mx));
    sum = _mm512_add_ps(sum, s[j]);
  }
  l = _mm512_fmadd_ps(l, alpha, sum);
  m = mx;
  // accᵀ[d] = accᵀ[d] * alpha + sum_j V[j][d] * P_j. Eight rows d at a time:
  // each row's sum over j is one dependent FMA chain, so interleaving eight
  // keeps both FMA ports busy (same order per row: the result is unchanged).
  int32_t d = 0;
  for (; d + 8 <= head_dim; d += 8) {
    __m512 a[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) a[r] = _mm512_mul_ps(_mm512_loadu_ps(acc + (d + r) * kLanes), alpha);
#pragma GCC unroll 16
    for (int j = 0; j < kChunk; ++j) {
      const float* vj = vc + j * head_dim + d;
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(vj[r]), s[j], a[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) _mm512_storeu_ps(acc + (d + r) * kLanes, a[r]);
  }
  if constexpr (kHeadDim == 0 || kHeadDim % 8 != 0) {  // rows left over by the groups of eight
    for (; d < head_dim; ++d) {
      __m512 a = _mm512_mul_ps(_mm512_loadu_ps(acc + d * kLanes), alpha);
#pragma GCC unroll 16
      for (int j = 0; j < kChunk; ++j)
        a = _mm512_fmadd_ps(_mm512_set1_ps(vc[j * head_dim + d]), s[j], a);
      _mm512_storeu_ps(acc + d * kLanes, a);
    }
  }
}

void run_task(const Task& task, const CpuBatch& batch, const KvPool& kv, int32_t layer,
              const float* q, float* out, int32_t n_heads, float scale, Scratch& sc) {
  const KvGeometry& g = kv.geom;
  const int32_t D = g.head_dim;
  const int32_t G = n_heads / g.n_kv_heads;
  const int32_t bs = batch.block_size;
  const BatchSeq& seq = batch.seqs[task.seq];
  const int32_t* table = batch.block_tables.data() + seq.table_start;
  const int64_t q_row = static_cast<int64_t>(n_heads) * D;
  const int32_t n_groups = (task.f_end - task.f_begin + kLanes - 1) / kLanes;

  sc.qt.resize(static_cast<size_t>(kMaxGroups) * D * kLanes);
  sc.acc.resize(static_cast<size_t>(kMaxGroups) * D * kLanes);
  sc.kc.resize(static_cast<size_t>(kChunk) * D);
  sc.vc.resize(static_cast<size_t>(kChunk) * D);

  __m512 m[kMaxGroups], l[kMaxGroups];
  __m512i qpos[kMaxGroups];
  int32_t min_qpos[kMaxGroups], max_qpos[kMaxGroups];
  for (int32_t gi = 0; gi < n_groups; ++gi) {
    float* qt = sc.qt.data() + static_cast<size_t>(gi) * D * kLanes;
    std::memset(qt, 0, sizeof(float) * D * kLanes);
    std::memset(sc.acc.data() + static_cast<size_t>(gi) * D * kLanes, 0, sizeof(float) * D * kLanes);
    alignas(64) int32_t pos[kLanes];
    min_qpos[gi] = INT_MAX;
    max_qpos[gi] = 0;
    for (int lane = 0; lane < kLanes; ++lane) {
      const int32_t f = task.f_begin + gi * kLanes + lane;
      if (f >= task.f_end) {
        pos[lane] = INT_MAX;  // padding lane: sees every key, output discarded
        continue;
      }
      const int32_t i = f / G;
      const int32_t h = task.kv_head * G + f % G;
      pos[lane] = seq.pos0 + i;
      min_qpos[gi] = std::min(min_qpos[gi], pos[lane]);
      max_qpos[gi] = std::max(max_qpos[gi], pos[lane]);
      const float* qv = q + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
      for (int32_t d = 0; d < D; ++d) qt[d * kLanes + lane] = qv[d];
    }
    qpos[gi] = _mm512_load_si512(pos);
    m[gi] = _mm512_set1_ps(-INFINITY);
    l[gi] = _mm512_setzero_ps();
  }

  const size_t elem = dtype_bytes(g.dtype);
  const auto* k_base = static_cast<const uint8_t*>(kv.k[layer]);
  const auto* v_base = static_cast<const uint8_t*>(kv.v[layer]);
  for (int32_t key0 = 0; key0 < task.kv_len; key0 += kChunk) {
    const int32_t n_keys = std::min(kChunk, task.kv_len - key0);
    for (int32_t j = 0; j < n_keys; ++j) {
      const int32_t p = key0 + j;
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      const size_t off = (static_cast<size_t>(slot) * g.n_kv_heads + task.kv_head) * D * elem;
      load_row(g.dtype, k_base + off, sc.kc.data() + j * D, D);
      load_row(g.dtype, v_base + off, sc.vc.data() + j * D, D);
    }
    if (n_keys < kChunk) {  // keys past the end: finite zeros, masked as future
      std::memset(sc.kc.data() + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
      std::memset(sc.vc.data() + n_keys * D, 0, sizeof(float) * (kChunk - n_keys) * D);
    }
    for (int32_t gi = 0; gi < n_groups; ++gi) {
      if (key0 > max_qpos[gi]) continue;
      const bool need_mask = key0 + kChunk - 1 > min_qpos[gi];
      float* qt = sc.qt.data() + static_cast<size_t>(gi) * D * kLanes;
      float* acc = sc.acc.data() + static_cast<size_t>(gi) * D * kLanes;
      switch (D) {
        case 64:
          chunk_step<64>(qt, acc, sc.kc.data(), sc.vc.data(), D, scale, key0, qpos[gi], need_mask, m[gi], l[gi]);
          break;
        case 128:
          chunk_step<128>(qt, acc, sc.kc.data(), sc.vc.data(), D, scale, key0, qpos[gi], need_mask, m[gi], l[gi]);
          break;
        default:
          chunk_step<0>(qt, acc, sc.kc.data(), sc.vc.data(), D, scale, key0, qpos[gi], need_mask, m[gi], l[gi]);
      }
    }
  }

  for (int32_t gi = 0; gi < n_groups; ++gi) {
    alignas(64) float inv_l[kLanes];
    _mm512_store_ps(inv_l, _mm512_div_ps(_mm512_set1_ps(1.0f), l[gi]));
    const float* acc = sc.acc.data() + static_cast<size_t>(gi) * D * kLanes;
    for (int lane = 0; lane < kLanes; ++lane) {
      const int32_t f = task.f_begin + gi * kLanes + lane;
      if (f >= task.f_end) break;
      const int32_t i = f / G;
      const int32_t h = task.kv_head * G + f % G;
      float* ov = out + (seq.q_start + i) * q_row + static_cast<int64_t>(h) * D;
      for (int32_t d = 0; d < D; ++d) ov[d] = acc[d * kLanes + lane] * inv_l[lane];
    }
  }
}

}  // namespace

void attention(ThreadPool& pool, const CpuBatch& batch, const KvPool& kv, int32_t layer,
               const float* q, float* out, int32_t n_heads, float scale) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  PREFIXD_CHECK(n_heads % g.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  PREFIXD_CHECK(batch.block_size == g.block_size, "batch block size differs from the pool's");
  const int32_t G = n_heads / g.n_kv_heads;
  constexpr int32_t kTaskLanes = kMaxGroups * kLanes;

  std::vector<Task> tasks;
  for (int32_t s = 0; s < static_cast<int32_t>(batch.seqs.size()); ++s) {
    const BatchSeq& seq = batch.seqs[s];
    PREFIXD_CHECK(seq.n_table * batch.block_size >= seq.pos0 + seq.n_q, "block table too short");
    const int32_t n_f = seq.n_q * G;
    for (int32_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
      for (int32_t f0 = 0; f0 < n_f; f0 += kTaskLanes) {
        const int32_t f1 = std::min(n_f, f0 + kTaskLanes);
        tasks.push_back(Task{s, kvh, f0, f1, seq.pos0 + (f1 - 1) / G + 1});
      }
    }
  }
  // Longest first, so the dynamic schedule ends balanced.
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& a, const Task& b) { return a.kv_len > b.kv_len; });
  static thread_local Scratch scratch;
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    run_task(tasks[t], batch, kv, layer, q, out, n_heads, scale, scratch);
  });
}

}  // namespace prefixd::cpu
