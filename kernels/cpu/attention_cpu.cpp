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
// attention() reads top to bottom: plan the tasks (plan_tasks), convert the
// shared K/V rows (share_operand_rows), run the tasks (run_tasks).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace prefixd::cpu {

namespace {

// Most bytes (K and V together) the shared operand rows of one call may
// take; sequences beyond it convert in their tasks.
constexpr size_t kMaxSharedBytes = size_t{64} << 20;

// --- plan the tasks ----------------------------------------------------------

// How a batch's (query row, head) pairs become tasks: pair f of a sequence's
// KV head is its row f / G, head kv_head * G + f % G.
struct TaskShape {
  const CpuBatch& batch;
  int32_t G;  // query heads per KV head
  int32_t n_kv_heads;
  int32_t window_tokens;  // > 0: sliding window (see attention())
  int32_t chunk;          // keys per online-softmax step (attn_chunk_keys)

  // The first key a row at position `pos` reads, rounded down to a whole
  // chunk: 0 without a window.
  int32_t first_key(int32_t pos) const {
    return window_tokens > 0 ? std::max(0, pos - window_tokens + 1) / chunk * chunk : 0;
  }
  // The task of pairs [f0, f1) of sequence s's KV head kvh: it needs the keys
  // up to its last row, from its first row's window on.
  AttnTask task(int32_t s, int32_t kvh, int32_t f0, int32_t f1) const {
    const int32_t pos0 = batch.seqs[s].pos0;
    return AttnTask{s, kvh, f0, f1, pos0 + (f1 - 1) / G + 1, first_key(pos0 + f0 / G)};
  }
  // Tasks of `lanes` pairs each the batch makes.
  int64_t count_tasks(int32_t lanes) const {
    int64_t n = 0;
    for (const BatchSeq& seq : batch.seqs) n += n_kv_heads * ((seq.n_q * G + lanes - 1) / lanes);
    return n;
  }
};

// (row, head) pairs per task: attn_task_lanes, or fewer when the batch makes
// few tasks (a prompt's uncached suffix: 15 tasks of near-equal length on 2
// threads leave one idle for most of a task), down to one register tile,
// until there are 8 per thread.
int32_t pick_task_lanes(const CpuKernels& k, const TaskShape& shape, int n_threads) {
  int32_t task_lanes = k.attn_task_lanes;
  while (task_lanes / 2 >= k.attn_tile_lanes && shape.count_tasks(task_lanes) < 8 * n_threads)
    task_lanes /= 2;
  return task_lanes;
}

// Every sequence's KV heads cut into tasks of task_lanes pairs (the last of
// each shorter), in sequence, head, pair order.
std::vector<AttnTask> cut_tasks(const TaskShape& shape, int32_t task_lanes) {
  const CpuBatch& batch = shape.batch;
  std::vector<AttnTask> tasks;
  for (int32_t s = 0; s < static_cast<int32_t>(batch.seqs.size()); ++s) {
    const BatchSeq& seq = batch.seqs[s];
    PREFIXD_CHECK(seq.n_table * batch.block_size >= seq.pos0 + seq.n_q, "block table too short");
    const int32_t n_f = seq.n_q * shape.G;
    for (int32_t kvh = 0; kvh < shape.n_kv_heads; ++kvh) {
      for (int32_t f0 = 0; f0 < n_f; f0 += task_lanes) {
        const int32_t f1 = std::min(n_f, f0 + task_lanes);
        tasks.push_back(shape.task(s, kvh, f0, f1));
      }
    }
  }
  return tasks;
}

// Most work first, so the dynamic schedule ends balanced; equal work keeps
// its order.
void sort_most_work_first(std::vector<AttnTask>::iterator first,
                          std::vector<AttnTask>::iterator last) {
  auto work = [](const AttnTask& t) {
    return static_cast<int64_t>(t.f_end - t.f_begin) * (t.kv_len - t.key_first);
  };
  std::stable_sort(first, last,
                   [&](const AttnTask& a, const AttnTask& b) { return work(a) > work(b); });
}

// The last task of each thread split into single lane groups: the threads
// then end within one group's work of each other. (15 tasks of a suffix's
// 100 rows left one thread idle for about half a task per layer.)
void split_tail(const CpuKernels& k, const TaskShape& shape, int n_threads,
                std::vector<AttnTask>& tasks) {
  if (tasks.size() <= 1) return;
  const size_t tail = std::min(tasks.size(), static_cast<size_t>(n_threads));
  const int32_t piece = k.attn_group_lanes;
  const size_t first = tasks.size() - tail;
  for (size_t i = first, n = tasks.size(); i < n; ++i) {
    const AttnTask t = tasks[i];
    tasks[i] = shape.task(t.seq, t.kv_head, t.f_begin, std::min(t.f_end, t.f_begin + piece));
    for (int32_t f0 = t.f_begin + piece; f0 < t.f_end; f0 += piece)
      tasks.push_back(shape.task(t.seq, t.kv_head, f0, std::min(t.f_end, f0 + piece)));
  }
  sort_most_work_first(tasks.begin() + static_cast<std::ptrdiff_t>(first), tasks.end());
}

std::vector<AttnTask> plan_tasks(const CpuKernels& k, const TaskShape& shape, int n_threads) {
  std::vector<AttnTask> tasks = cut_tasks(shape, pick_task_lanes(k, shape, n_threads));
  sort_most_work_first(tasks.begin(), tasks.end());
  split_tail(k, shape, n_threads, tasks);
  return tasks;
}

// --- convert the shared K/V rows ---------------------------------------------

// Runs of consecutive table blocks of one sequence, a task each: a thread
// streams its run in order (the pool is read from memory: a long context's
// rows of every layer do not fit the caches).
struct Run {
  int32_t seq, first, end;  // the sequence's table blocks [first, end)
};

// Per sequence: whether one of its KV heads has more than one task.
std::vector<uint8_t> seqs_with_several_tasks(const std::vector<AttnTask>& tasks, size_t n_seqs,
                                             int32_t n_kv_heads) {
  std::vector<uint8_t> several_tasks(n_seqs, 0);
  std::vector<int32_t> count(n_seqs * n_kv_heads, 0);
  for (const AttnTask& t : tasks) {
    if (++count[static_cast<size_t>(t.seq) * n_kv_heads + t.kv_head] > 1) several_tasks[t.seq] = 1;
  }
  return several_tasks;
}

// The shared operand rows' layout: (seq, kv head) regions of
// round_up(kv_len, chunk) keys of key_bytes each, K regions first, then the
// V regions at the same offsets from rows_v = rows_k + k_bytes.
struct SharedLayout {
  std::vector<Run> runs;  // the blocks to convert, sequences in order
  size_t k_bytes = 0;     // all K regions together (the V regions the same)
  int64_t n_blocks = 0;   // blocks in the runs
};
// Lays out the sequences with several tasks on a KV head (several_tasks, per
// sequence), in order, while K and V together stay within kMaxSharedBytes;
// sets their offsets (n_seqs * n_kv_heads, -1 left where not shared).
SharedLayout lay_out_shared_rows(const TaskShape& shape, size_t key_bytes,
                                 const std::vector<uint8_t>& several_tasks, int64_t* offsets) {
  const CpuBatch& batch = shape.batch;
  const int32_t chunk = shape.chunk;
  SharedLayout layout;
  for (int32_t s = 0; s < static_cast<int32_t>(batch.seqs.size()); ++s) {
    const BatchSeq& seq = batch.seqs[s];
    if (!several_tasks[s]) continue;  // one task per KV head: nothing to share
    const int32_t kv_len = seq.pos0 + seq.n_q;
    const size_t region = static_cast<size_t>((kv_len + chunk - 1) / chunk * chunk) * key_bytes;
    if (2 * (layout.k_bytes + region * shape.n_kv_heads) > kMaxSharedBytes) continue;
    for (int32_t h = 0; h < shape.n_kv_heads; ++h)
      offsets[static_cast<size_t>(s) * shape.n_kv_heads + h] =
          static_cast<int64_t>(layout.k_bytes + h * region);
    layout.k_bytes += region * shape.n_kv_heads;
    // Keys before the first row's window are never read: not put.
    layout.runs.push_back(Run{s, shape.first_key(seq.pos0) / batch.block_size,
                              (kv_len + batch.block_size - 1) / batch.block_size});
    layout.n_blocks += layout.runs.back().end - layout.runs.back().first;
  }
  return layout;
}

// The runs cut into pieces of about n_blocks / (4 * n_threads) blocks: about
// 4 runs per thread in all.
std::vector<Run> split_runs(const std::vector<Run>& runs, int64_t n_blocks, int n_threads) {
  const int32_t per = static_cast<int32_t>(std::max<int64_t>(1, n_blocks / (4 * n_threads)));
  std::vector<Run> split;
  for (const Run& r : runs) {
    for (int32_t b = r.first; b < r.end; b += per)
      split.push_back(Run{r.seq, b, std::min(r.end, b + per)});
  }
  return split;
}

// Puts the runs' keys of every KV head of `layer` into their regions of
// rows_k and rows_v (region_of: lay_out_shared_rows' offsets), zeroing each
// region's keys past the end; one run per pool task.
void put_shared_rows(const CpuKernels& k, ThreadPool& pool, const CpuBatch& batch, const KvPool& kv,
                     int32_t layer, int32_t chunk, const std::vector<Run>& runs,
                     const int64_t* region_of, uint8_t* rows_k, uint8_t* rows_v) {
  const KvGeometry& g = kv.geom;
  const int32_t D = g.head_dim;
  const size_t elem = dtype_bytes(g.dtype);
  const size_t slot_bytes = static_cast<size_t>(g.n_kv_heads) * D * elem;
  const auto* k_base = static_cast<const uint8_t*>(kv.k[layer]);
  const auto* v_base = static_cast<const uint8_t*>(kv.v[layer]);
  const int32_t bs = batch.block_size;
  const size_t block_bytes = static_cast<size_t>(bs) * slot_bytes;
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
}

// Converts the K and V rows of every (seq, KV head) with several tasks,
// within kMaxSharedBytes, once into buffers their tasks share, and points
// args.rows_k, rows_v and rows_offset at them (left null when none is
// shared). The buffers are the calling thread's and stay valid until its
// next call.
void share_operand_rows(const CpuKernels& k, ThreadPool& pool, const TaskShape& shape,
                        const KvPool& kv, int32_t layer, const std::vector<AttnTask>& tasks,
                        AttnArgs& args) {
  const KvGeometry& g = kv.geom;
  const size_t n_seqs = shape.batch.seqs.size();
  static thread_local std::vector<int64_t> offsets;  // (seq, kv head) -> first byte, or -1
  // K regions, then V regions (floats for alignment)
  static thread_local std::vector<float> shared;
  offsets.assign(n_seqs * g.n_kv_heads, -1);
  const SharedLayout layout =
      lay_out_shared_rows(shape, k.attn_key_bytes(g.dtype, g.head_dim),
                          seqs_with_several_tasks(tasks, n_seqs, g.n_kv_heads), offsets.data());
  if (layout.runs.empty()) return;
  const std::vector<Run> runs = split_runs(layout.runs, layout.n_blocks, pool.n_threads());
  const size_t floats = (2 * layout.k_bytes + sizeof(float) - 1) / sizeof(float);
  if (shared.size() < floats) shared.resize(floats);
  auto* const rows_k = reinterpret_cast<uint8_t*>(shared.data());
  uint8_t* const rows_v = rows_k + layout.k_bytes;
  // thread_locals are the caller's: the pool's threads get them by pointer.
  put_shared_rows(k, pool, shape.batch, kv, layer, shape.chunk, runs, offsets.data(), rows_k,
                  rows_v);
  args.rows_k = rows_k;
  args.rows_v = rows_v;
  args.rows_offset = offsets.data();
}

// --- run ---------------------------------------------------------------------

// Every task on the pool, each thread with the set's scratch of its own.
void run_tasks(const CpuKernels& k, ThreadPool& pool, const AttnArgs& args,
               const std::vector<AttnTask>& tasks) {
  const size_t scratch_floats = k.attn_scratch_floats(args.kv->geom.head_dim);
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t, int) {
    static thread_local std::vector<float> scratch;  // the set's per-thread scratch
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    k.attention_task(args, tasks[t], scratch.data());
  });
}

}  // namespace

void attention(const CpuKernels& k, ThreadPool& pool, const CpuBatch& batch, const KvPool& kv,
               int32_t layer, const float* q, float* out, int32_t n_heads, float scale,
               int32_t window_tokens) {
  const KvGeometry& g = kv.geom;
  PREFIXD_CHECK(layer >= 0 && layer < g.n_layers, "layer out of range");
  PREFIXD_CHECK(window_tokens >= 0, "attention window must be >= 0");
  PREFIXD_CHECK(n_heads % g.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  PREFIXD_CHECK(batch.block_size == g.block_size, "batch block size differs from the pool's");
  const TaskShape shape{batch, n_heads / g.n_kv_heads, g.n_kv_heads, window_tokens,
                        k.attn_chunk_keys};
  const std::vector<AttnTask> tasks = plan_tasks(k, shape, pool.n_threads());
  AttnArgs args{&batch, &kv, layer, q, out, n_heads, scale, window_tokens};
  share_operand_rows(k, pool, shape, kv, layer, tasks, args);
  run_tasks(k, pool, args, tasks);
}

}  // namespace prefixd::cpu
