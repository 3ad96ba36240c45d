// Paged causal attention over a batch: splits every sequence's (query row,
// head) pairs into tasks of one KV head each, longest first, and runs the
// instruction set's attention kernel (generic/attention_task.h) on them.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace prefixd::cpu {

void attention(const CpuKernels& k, ThreadPool& pool, const CpuBatch& batch, const KvPool& kv,
               int32_t layer, const float* q, float* out, int32_t n_heads, float scale) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  PREFIXD_CHECK(n_heads % g.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  PREFIXD_CHECK(batch.block_size == g.block_size, "batch block size differs from the pool's");
  const int32_t G = n_heads / g.n_kv_heads;
  const int32_t task_lanes = k.attn_task_lanes;

  std::vector<AttnTask> tasks;
  for (int32_t s = 0; s < static_cast<int32_t>(batch.seqs.size()); ++s) {
    const BatchSeq& seq = batch.seqs[s];
    PREFIXD_CHECK(seq.n_table * batch.block_size >= seq.pos0 + seq.n_q, "block table too short");
    const int32_t n_f = seq.n_q * G;
    for (int32_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
      for (int32_t f0 = 0; f0 < n_f; f0 += task_lanes) {
        const int32_t f1 = std::min(n_f, f0 + task_lanes);
        tasks.push_back(AttnTask{s, kvh, f0, f1, seq.pos0 + (f1 - 1) / G + 1});
      }
    }
  }
  // Longest first, so the dynamic schedule ends balanced.
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const AttnTask& a, const AttnTask& b) { return a.kv_len > b.kv_len; });
  const AttnArgs args{&batch, &kv, layer, q, out, n_heads, scale};
  const size_t scratch_floats = k.attn_scratch_floats(g.head_dim);
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    static thread_local std::vector<float> scratch;  // the set's per-thread scratch
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    k.attention_task(args, tasks[t], scratch.data());
  });
}

}  // namespace prefixd::cpu
