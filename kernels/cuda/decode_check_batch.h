// The batch the flash-decode self-check (decode_self_check.h) runs: three
// one-row (decode) sequences over a pool of shuffled block ids, chosen to
// reach every branch of a decode kernel: one at position 0 (a single key),
// one whose keys end in a partial block, and one long enough that its keys
// split over several thread blocks (kDecodeSplitChunkKeys each) and cross a
// sliding window. Plain C++, tested on the CPU
// (tests/test_fast_path_self_check.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/launch_config.h"

namespace prefixd::cuda {

struct DecodeCheckBatch {
  Batch batch;           // n_q == 1 for every sequence
  int32_t n_blocks = 0;  // pool blocks the tables name, ids in [0, n_blocks)
  int32_t max_kv_len = 0;
};

// Keys of the check's three sequences (the decode row at position len - 1).
inline std::vector<int32_t> decode_check_lengths(int32_t block_size) {
  return {1, 2 * block_size + std::max(1, block_size / 2),
          3 * kDecodeSplitChunkKeys + block_size + std::max(1, block_size - 1)};
}

inline DecodeCheckBatch decode_check_batch(int32_t block_size) {
  DecodeCheckBatch c;
  const std::vector<int32_t> lengths = decode_check_lengths(block_size);
  for (int32_t len : lengths) c.n_blocks += static_cast<int32_t>(ceil_div(len, block_size));
  c.n_blocks += 2;  // blocks no table names: ids are not dense
  std::vector<int32_t> ids(c.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(4321);
  std::shuffle(ids.begin(), ids.end(), rng);
  int32_t next_id = 0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    const int32_t len = lengths[k];
    BatchSeq s;
    s.q_start = static_cast<int32_t>(k);
    s.n_q = 1;
    s.pos0 = len - 1;
    s.table_start = static_cast<int32_t>(c.batch.block_tables.size());
    s.n_table = static_cast<int32_t>(ceil_div(len, block_size));
    for (int32_t j = 0; j < s.n_table; ++j) c.batch.block_tables.push_back(ids[next_id++]);
    c.batch.tokens.push_back(0);
    c.batch.positions.push_back(s.pos0);
    c.batch.slots.push_back(paging::slot_of(c.batch.block_tables.data() + s.table_start, block_size, s.pos0));
    c.batch.output_rows.push_back(static_cast<int32_t>(k));
    c.batch.seqs.push_back(s);
    c.max_kv_len = std::max(c.max_kv_len, len);
  }
  return c;
}

}  // namespace prefixd::cuda
