// Host-side plan of the CUDA backend's decode graphs: which forward steps are
// recorded once as a CUDA graph and replayed, the batch-size bucket and
// block-table capacity that key a graph, and the padded batch such a step
// computes. Pure C++ (no CUDA headers), header-only, so
// tests/test_decode_graph_plan.cpp checks it on machines without nvcc or a GPU.
//
// A graph replays the launches of one recorded step: the same kernels, grids
// and device addresses. So a step is recorded only when every launch of it is
// fixed by its key: one row per sequence, every row an output row, the rows
// padded to a bucket (1, 2, 4, ... 64) with inert sequences, each block table
// padded to a power-of-two capacity, and the packed batch uploaded to one
// device buffer per graph before each replay. Everything that varies (tokens,
// positions, slots, tables, lengths) is then data the kernels read from that
// buffer; the host-side layout (section offsets, counts, the decode split's
// key length) is a function of the key, which same_graph_layout() checks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/launch_config.h"

namespace prefixd::cuda {

enum class DecodeGraphMode : uint8_t {
  kOff = 0,          // every step runs eagerly as given (no padding, no graph)
  kOn = 1,           // pure decode steps padded to a bucket and replayed from a graph
  kPaddedEager = 2,  // those padded steps run eagerly (no graph): what kOn equals bit for bit
};

// Batch-size buckets of a graph step, ascending; a step of n rows runs as the
// smallest bucket >= n. Larger decode steps run eagerly.
inline constexpr int32_t kDecodeGraphBuckets[] = {1, 2, 4, 8, 16, 32, 64};
inline constexpr int32_t kMaxDecodeGraphRows = 64;
// A graph step uploads bucket * table capacity block-table words: above this
// many (a 64-sequence batch at 16K blocks of context) the step runs eagerly.
inline constexpr int64_t kMaxDecodeGraphTableWords = int64_t(1) << 20;

// Blocks past the engine's pool (ids n_blocks, n_blocks + 1, ...) that every
// layer of a CUDA KV pool holds for the inert rows of a padded step: one slot
// per padding row, so no two rows write one slot.
inline int32_t decode_scratch_blocks(int32_t block_size) {
  return static_cast<int32_t>(ceil_div(kMaxDecodeGraphRows, std::max(block_size, 1)));
}

// The smallest bucket holding n rows, or 0 when n < 1 or none within max_rows.
inline int32_t decode_graph_bucket(int32_t n, int32_t max_rows) {
  if (n < 1) return 0;
  for (int32_t b : kDecodeGraphBuckets)
    if (b >= n) return b <= max_rows ? b : 0;
  return 0;
}

// Block-table entries each sequence of a graph step gets: the smallest power
// of two >= the longest table (at least 1).
inline int32_t decode_table_capacity(int32_t max_n_table) {
  int32_t cap = 1;
  while (cap < max_n_table && cap < (int32_t(1) << 30)) cap *= 2;
  return cap;
}

// What a step is, for the graph path (in the order of step_kind_name's names).
enum class StepKind : uint8_t {
  kGraph,           // one row per sequence, all of them output rows, within a bucket
  kEmpty,           // no rows
  kNotDecode,       // a sequence with more than one row (prefill, a chunk, a suffix)
  kPartialOutputs,  // a row whose logits are not wanted (output rows are not every row)
  kTooManyRows,     // no bucket within kMaxDecodeGraphRows and the caller's row limit
  kWindowTables,    // window block tables (a window-group pool)
  kTableTooLarge,   // bucket * table capacity above kMaxDecodeGraphTableWords
};

inline const char* step_kind_name(StepKind k) {
  static constexpr const char* kNames[] = {"graph",           "empty",         "not decode",
                                           "partial outputs", "too many rows", "window tables",
                                           "table too large"};
  const auto i = static_cast<size_t>(k);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

struct DecodeStepPlan {
  StepKind kind = StepKind::kEmpty;
  int32_t n_rows = 0;          // rows (= sequences) of the step as given
  int32_t bucket = 0;          // rows it runs as (kGraph only)
  int32_t table_capacity = 0;  // table entries per sequence (kGraph only)
  int32_t max_block_id = -1;   // largest block id of the step as given (tables and slots)
  int32_t max_token = -1;      // largest token id of the step as given
};

// Classifies a batch that validate_batch() accepts; max_rows is the caller's
// row limit (StepInfo::max_rows).
inline DecodeStepPlan plan_decode_step(const Batch& b, int32_t max_rows, int32_t block_size) {
  DecodeStepPlan p;
  p.n_rows = b.n_tokens();
  if (p.n_rows == 0 || b.seqs.empty()) return p;
  int32_t max_n_table = 0;
  for (const BatchSeq& s : b.seqs) {
    if (s.n_q != 1) {
      p.kind = StepKind::kNotDecode;
      return p;
    }
    max_n_table = std::max(max_n_table, s.n_table);
    for (int32_t t = 0; t < s.n_table; ++t)
      p.max_block_id = std::max(p.max_block_id, b.block_tables[s.table_start + t]);
  }
  for (int32_t slot : b.slots) p.max_block_id = std::max(p.max_block_id, slot / block_size);
  for (int32_t t : b.tokens) p.max_token = std::max(p.max_token, t);
  if (static_cast<int32_t>(b.output_rows.size()) != p.n_rows) {
    p.kind = StepKind::kPartialOutputs;  // ascending and in range: all rows iff as many as rows
    return p;
  }
  if (!b.window_block_tables.empty() || !b.window_slots.empty()) {
    p.kind = StepKind::kWindowTables;
    return p;
  }
  p.bucket = decode_graph_bucket(p.n_rows, std::min(max_rows, kMaxDecodeGraphRows));
  if (p.bucket == 0) {
    p.kind = StepKind::kTooManyRows;
    return p;
  }
  p.table_capacity = decode_table_capacity(max_n_table);
  if (int64_t(p.bucket) * p.table_capacity > kMaxDecodeGraphTableWords) {
    p.kind = StepKind::kTableTooLarge;
    return p;
  }
  p.kind = StepKind::kGraph;
  return p;
}

// The batch a kGraph step runs as. Rows 0 .. n_rows-1 are the step's own, in
// order, sequence i's table at [i * capacity, i * capacity + n_table) and
// its other entries `first_scratch_block` (never read: kernels read a table
// only below the sequence's length). Rows n_rows .. bucket-1 are inert:
// padding row k (k = row - n_rows) is token 0 at position k % block_size in
// scratch block first_scratch_block + k / block_size, a one-block table, so
// each writes its own scratch slot and attends to the scratch keys before it
// (written by the padding rows before it in the same layer). Every row is an
// output row. first_scratch_block is the pool's n_blocks (the CUDA pool holds
// decode_scratch_blocks() more).
inline Batch pad_decode_batch(const Batch& b, const DecodeStepPlan& p, int32_t block_size,
                              int32_t first_scratch_block) {
  Batch out;
  const int32_t cap = p.table_capacity;
  out.block_tables.assign(static_cast<size_t>(p.bucket) * cap, first_scratch_block);
  for (int32_t i = 0; i < p.bucket; ++i) {
    BatchSeq s;
    s.q_start = i;
    s.n_q = 1;
    s.table_start = i * cap;
    if (i < p.n_rows) {
      const BatchSeq& src = b.seqs[static_cast<size_t>(i)];
      s.pos0 = src.pos0;
      s.n_table = src.n_table;
      std::copy(b.block_tables.begin() + src.table_start,
                b.block_tables.begin() + src.table_start + src.n_table,
                out.block_tables.begin() + s.table_start);
      out.tokens.push_back(b.tokens[static_cast<size_t>(src.q_start)]);
      out.positions.push_back(b.positions[static_cast<size_t>(src.q_start)]);
      out.slots.push_back(b.slots[static_cast<size_t>(src.q_start)]);
    } else {
      const int32_t k = i - p.n_rows;
      const int32_t block = first_scratch_block + k / block_size;
      s.pos0 = k % block_size;
      s.n_table = 1;
      out.block_tables[static_cast<size_t>(s.table_start)] = block;
      out.tokens.push_back(0);
      out.positions.push_back(s.pos0);
      out.slots.push_back(block * block_size + s.pos0);
    }
    out.seqs.push_back(s);
    out.output_rows.push_back(i);
  }
  return out;
}

// pack_batch() of a padded step, with the two host-side fields that would
// vary set from the key or the step as given: max_decode_kv_len (what the
// decode split is computed from) = capacity * block_size, the longest any
// sequence of the key can be, so the split's grid is the key's; and
// max_block_id / max_token (checked on the host against the pool and the
// vocabulary) those of the step as given, not the scratch blocks'.
inline PackedBatch pack_decode_step(const Batch& padded, const DecodeStepPlan& p,
                                    int32_t block_size) {
  PackedBatch packed = pack_batch(padded, block_size);
  packed.max_decode_kv_len = p.table_capacity * block_size;
  packed.max_block_id = p.max_block_id;
  packed.max_token = p.max_token;
  return packed;
}

// Whether two packed steps launch the same kernels with the same grids and
// arguments: equal in every host-side field a launch reads (all but
// max_block_id and max_token, which only host checks read, and the words,
// whose length the offsets and counts fix).
static_assert(sizeof(PackedBatch) == sizeof(std::vector<int32_t>) + 16 * sizeof(int32_t),
              "PackedBatch gained a field: decide whether same_graph_layout compares it");
inline bool same_graph_layout(const PackedBatch& a, const PackedBatch& b) {
  return a.tokens_off == b.tokens_off && a.positions_off == b.positions_off &&
         a.slots_off == b.slots_off && a.seqs_off == b.seqs_off && a.tables_off == b.tables_off &&
         a.output_rows_off == b.output_rows_off && a.prefill_tiles_off == b.prefill_tiles_off &&
         a.decode_seqs_off == b.decode_seqs_off && a.n_tokens == b.n_tokens &&
         a.n_seqs == b.n_seqs && a.n_output_rows == b.n_output_rows &&
         a.n_prefill_tiles == b.n_prefill_tiles && a.n_decode_seqs == b.n_decode_seqs &&
         a.max_decode_kv_len == b.max_decode_kv_len;
}

// What keys a recorded step: its caller (StepInfo::owner), the pool (its
// first K buffer), the block size, the bucket and the table capacity.
struct DecodeGraphKey {
  const void* owner = nullptr;
  const void* pool = nullptr;
  int32_t block_size = 0;
  int32_t bucket = 0;
  int32_t table_capacity = 0;
  bool operator==(const DecodeGraphKey& o) const {
    return owner == o.owner && pool == o.pool && block_size == o.block_size && bucket == o.bucket &&
           table_capacity == o.table_capacity;
  }
};

// Counters of the graph path, for tests, logs and health reports.
struct DecodeGraphStats {
  DecodeGraphMode mode = DecodeGraphMode::kOff;
  int64_t captures = 0;            // graphs recorded (each checked against its eager run)
  int64_t replays = 0;             // steps run from a graph
  int64_t checked_replays = 0;     // replays also run eagerly and compared, bit for bit
  int64_t padded_eager_steps = 0;  // padded steps run eagerly (kPaddedEager, or while recording)
  int64_t eager_steps = 0;         // steps run as given (not a graph step, or graphs off)
  int64_t layout_misses = 0;       // a key's step packed differently from its graph (re-recorded)
  int32_t live_graphs = 0;
  bool disabled = false;  // switched off for the process (a check failed)
  std::string disabled_reason;
};

}  // namespace prefixd::cuda
