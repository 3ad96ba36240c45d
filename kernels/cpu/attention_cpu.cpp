// Paged causal attention over a batch, sliding-window when asked: splits every
// sequence's (query row, head) pairs into tasks of one KV head each, most work
// first (the last ones split into single lane groups), and runs the instruction
// set's attention kernel (generic/attention_task.h) on them. With a window, a
// task starts at its first row's oldest key (rounded down to a chunk).
// When a sequence's KV head has several tasks (a prefill chunk, a prompt's
// uncached suffix), its K and V rows are first converted to the set's
// operand layout (f32, or BF16 key pairs) once, in parallel, into a buffer
// its tasks share: each task would otherwise read and convert the whole
// context again from the pool.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace prefixd::cpu {

namespace {

// Most bytes (K and V together) the shared operand rows of one call may
// take; sequences beyond it convert in their tasks.
constexpr size_t kMaxSharedBytes = size_t{64} << 20;

}  // namespace

void attention(const CpuKernels& k, ThreadPool& pool, const CpuBatch& batch, const KvPool& kv,
               int32_t layer, const float* q, float* out, int32_t n_heads, float scale,
               int32_t window_tokens) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  PREFIXD_CHECK(window_tokens >= 0, "attention window must be >= 0");
  PREFIXD_CHECK(n_heads % g.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  PREFIXD_CHECK(batch.block_size == g.block_size, "batch block size differs from the pool's");
  const int32_t G = n_heads / g.n_kv_heads;
  // (row, head) pairs per task: attn_task_lanes, or fewer when the batch makes
  // few tasks (a prompt's uncached suffix: 15 tasks of near-equal length on 2
  // threads leave one idle for most of a task), down to one register tile,
  // until there are 8 per thread.
  int32_t task_lanes = k.attn_task_lanes;
  auto count_tasks = [&](int32_t lanes) {
    int64_t n = 0;
    for (const BatchSeq& seq : batch.seqs) n += g.n_kv_heads * ((seq.n_q * G + lanes - 1) / lanes);
    return n;
  };
  while (task_lanes / 2 >= k.attn_tile_lanes && count_tasks(task_lanes) < 8 * pool.n_threads()) task_lanes /= 2;

  // The first key a row at position `pos` reads, rounded down to a whole
  // chunk: 0 without a window.
  const int32_t chunk = k.attn_chunk_keys;
  auto first_key = [&](int32_t pos) {
    return window_tokens > 0 ? std::max(0, pos - window_tokens + 1) / chunk * chunk : 0;
  };
  // The task of pairs [f0, f1) of sequence s's KV head kvh: it needs the keys
  // up to its last row, from its first row's window on.
  auto make_task = [&](int32_t s, int32_t kvh, int32_t f0, int32_t f1) {
    const int32_t pos0 = batch.seqs[s].pos0;
    return AttnTask{s, kvh, f0, f1, pos0 + (f1 - 1) / G + 1, first_key(pos0 + f0 / G)};
  };
  std::vector<AttnTask> tasks;
  for (int32_t s = 0; s < static_cast<int32_t>(batch.seqs.size()); ++s) {
    const BatchSeq& seq = batch.seqs[s];
    PREFIXD_CHECK(seq.n_table * batch.block_size >= seq.pos0 + seq.n_q, "block table too short");
    const int32_t n_f = seq.n_q * G;
    for (int32_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
      for (int32_t f0 = 0; f0 < n_f; f0 += task_lanes) {
        const int32_t f1 = std::min(n_f, f0 + task_lanes);
        tasks.push_back(make_task(s, kvh, f0, f1));
      }
    }
  }
  // Most work first, so the dynamic schedule ends balanced.
  auto work = [](const AttnTask& t) {
    return static_cast<int64_t>(t.f_end - t.f_begin) * (t.kv_len - t.key_first);
  };
  std::stable_sort(tasks.begin(), tasks.end(),
                   [&](const AttnTask& a, const AttnTask& b) { return work(a) > work(b); });
  // The last task of each thread split into single lane groups: the threads
  // then end within one group's work of each other. (15 tasks of a suffix's
  // 100 rows left one thread idle for about half a task per layer.)
  const size_t tail = std::min(tasks.size(), static_cast<size_t>(pool.n_threads()));
  if (tasks.size() > 1) {
    const int32_t piece = k.attn_group_lanes;
    const size_t first = tasks.size() - tail;
    for (size_t i = first, n = tasks.size(); i < n; ++i) {
      const AttnTask t = tasks[i];
      tasks[i] = make_task(t.seq, t.kv_head, t.f_begin, std::min(t.f_end, t.f_begin + piece));
      for (int32_t f0 = t.f_begin + piece; f0 < t.f_end; f0 += piece)
        tasks.push_back(make_task(t.seq, t.kv_head, f0, std::min(t.f_end, f0 + piece)));
    }
    std::stable_sort(tasks.begin() + static_cast<std::ptrdiff_t>(first), tasks.end(),
                     [&](const AttnTask& a, const AttnTask& b) { return work(a) > work(b); });
  }
  AttnArgs args{&batch, &kv, layer, q, out, n_heads, scale, window_tokens};

  // Shared operand rows: (seq, kv head) regions of round_up(kv_len, chunk) keys.
  const int32_t D = g.head_dim;
  const int32_t n_seqs = static_cast<int32_t>(batch.seqs.size());
  const size_t key_bytes = k.attn_key_bytes(g.dtype, D);
  // Per sequence: whether one of its KV heads has more than one task.
  std::vector<uint8_t> several_tasks(batch.seqs.size(), 0);
  {
    std::vector<int32_t> count(batch.seqs.size() * g.n_kv_heads, 0);
    for (const AttnTask& t : tasks) {
      if (++count[static_cast<size_t>(t.seq) * g.n_kv_heads + t.kv_head] > 1)
        several_tasks[t.seq] = 1;
    }
  }
  static thread_local std::vector<int64_t> offsets;  // (seq, kv head) -> first byte, or -1
  static thread_local std::vector<float> shared;     // K regions, then V regions (floats for alignment)
  offsets.assign(static_cast<size_t>(n_seqs) * g.n_kv_heads, -1);
  // Runs of consecutive table blocks of one sequence, a task each: a thread
  // streams its run in order (the pool is read from memory: a long context's
  // rows of every layer do not fit the caches).
  struct Run {
    int32_t seq, first, end;  // the sequence's table blocks [first, end)
  };
  std::vector<Run> runs;
  size_t k_bytes = 0;
  int64_t n_blocks = 0;
  for (int32_t s = 0; s < n_seqs; ++s) {
    const BatchSeq& seq = batch.seqs[s];
    if (!several_tasks[s]) continue;  // one task per KV head: nothing to share
    const int32_t kv_len = seq.pos0 + seq.n_q;
    const size_t region = static_cast<size_t>((kv_len + chunk - 1) / chunk * chunk) * key_bytes;
    if (2 * (k_bytes + region * g.n_kv_heads) > kMaxSharedBytes) continue;
    for (int32_t h = 0; h < g.n_kv_heads; ++h)
      offsets[static_cast<size_t>(s) * g.n_kv_heads + h] = static_cast<int64_t>(k_bytes + h * region);
    k_bytes += region * g.n_kv_heads;
    // Keys before the first row's window are never read: not put.
    runs.push_back(Run{s, first_key(seq.pos0) / batch.block_size,
                       (kv_len + batch.block_size - 1) / batch.block_size});
    n_blocks += runs.back().end - runs.back().first;
  }
  if (!runs.empty()) {
    // About 4 runs per thread in all.
    const int32_t per =
        static_cast<int32_t>(std::max<int64_t>(1, n_blocks / (4 * pool.n_threads())));
    std::vector<Run> split;
    for (const Run& r : runs) {
      for (int32_t b = r.first; b < r.end; b += per)
        split.push_back(Run{r.seq, b, std::min(r.end, b + per)});
    }
    runs.swap(split);
    const size_t floats = (2 * k_bytes + sizeof(float) - 1) / sizeof(float);
    if (shared.size() < floats) shared.resize(floats);
    auto* const rows_k = reinterpret_cast<uint8_t*>(shared.data());
    uint8_t* const rows_v = rows_k + k_bytes;
    const size_t elem = dtype_bytes(g.dtype);
    const size_t slot_bytes = static_cast<size_t>(g.n_kv_heads) * D * elem;
    const auto* k_base = static_cast<const uint8_t*>(kv.k[layer]);
    const auto* v_base = static_cast<const uint8_t*>(kv.v[layer]);
    const int32_t bs = batch.block_size;
    const size_t block_bytes = static_cast<size_t>(bs) * slot_bytes;
    const int64_t* const region_of = offsets.data();  // thread_locals are the caller's: by pointer
    pool.parallel_for(static_cast<int64_t>(runs.size()), [&](int64_t t, int) {
      const Run run = runs[static_cast<size_t>(t)];
      const BatchSeq& seq = batch.seqs[run.seq];
      const int32_t* table = batch.block_tables.data() + seq.table_start;
      const int32_t kv_len = seq.pos0 + seq.n_q;
      const int32_t rows = (kv_len + chunk - 1) / chunk * chunk;
      for (int32_t b = run.first; b < run.end; ++b) {
        // The next block's rows are fetched while this one is put: blocks
        // sit anywhere in the pool, where the hardware prefetcher cannot
        // follow.
        if (b + 1 < run.end) {
          const size_t next = static_cast<size_t>(table[b + 1]) * block_bytes;
          for (size_t off = 0; off < block_bytes; off += 64) {
            __builtin_prefetch(k_base + next + off);
            __builtin_prefetch(v_base + next + off);
          }
        }
        const int32_t key0 = b * bs;
        const int32_t n_keys = std::min(bs, kv_len - key0);
        const size_t block_off = static_cast<size_t>(table[b]) * block_bytes;
        // Every head's rows of a slot sit side by side.
        for (int32_t h = 0; h < g.n_kv_heads; ++h) {
          const int64_t region = region_of[static_cast<size_t>(run.seq) * g.n_kv_heads + h];
          const size_t off = block_off + static_cast<size_t>(h) * D * elem;
          k.attn_put_keys(g.dtype, k_base + off, v_base + off, slot_bytes, D, key0, n_keys,
                          rows_k + region, rows_v + region);
          // The last block zeroes the region's keys past the end.
          if (key0 + bs >= kv_len)
            k.attn_zero_keys(g.dtype, D, kv_len, rows, rows_k + region, rows_v + region);
        }
      }
    });
    args.rows_k = rows_k;
    args.rows_v = rows_v;
    args.rows_offset = offsets.data();
  }

  const size_t scratch_floats = k.attn_scratch_floats(g.head_dim);
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    static thread_local std::vector<float> scratch;  // the set's per-thread scratch
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    k.attention_task(args, tasks[t], scratch.data());
  });
}

}  // namespace prefixd::cpu
