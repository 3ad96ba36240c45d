// Batch assembly: positions, KV slots, block tables and output rows.
#include "engine/batch_builder.h"

#include "common/result.h"
#include "kernels/paging.h"

namespace prefixd {

int32_t BatchBuilder::add(std::span<const int32_t> tokens, int32_t pos0,
                          std::span<const int32_t> block_table, LogitsWanted logits,
                          std::span<const int32_t> window_table) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  PREFIXD_CHECK(n > 0, "empty sequence in batch");
  const int32_t n_table = (pos0 + n + block_size_ - 1) / block_size_;
  PREFIXD_CHECK(static_cast<int32_t>(block_table.size()) >= n_table, "block table too short");
  const int32_t row0 = batch_.n_tokens();
  BatchSeq seq;
  seq.q_start = row0;
  seq.n_q = n;
  seq.pos0 = pos0;
  seq.table_start = static_cast<int32_t>(batch_.block_tables.size());
  seq.n_table = n_table;
  batch_.seqs.push_back(seq);
  batch_.block_tables.insert(batch_.block_tables.end(), block_table.begin(),
                             block_table.begin() + n_table);
  const bool window = !window_table.empty();
  PREFIXD_CHECK(batch_.window_slots.size() == (window ? batch_.slots.size() : 0),
                "every sequence of a batch has a window table, or none");
  if (window) {
    PREFIXD_CHECK(window_table.size() >= static_cast<size_t>(n_table), "window table too short");
    batch_.window_block_tables.insert(batch_.window_block_tables.end(), window_table.begin(),
                                      window_table.begin() + n_table);
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = pos0 + i;
    batch_.tokens.push_back(tokens[i]);
    batch_.positions.push_back(pos);
    batch_.slots.push_back(paging::slot_of(block_table.data(), block_size_, pos));
    if (window)
      batch_.window_slots.push_back(paging::slot_of(window_table.data(), block_size_, pos));
  }
  if (logits == LogitsWanted::kLast) {
    batch_.output_rows.push_back(row0 + n - 1);
  } else if (logits == LogitsWanted::kAll) {
    for (int32_t i = 0; i < n; ++i) batch_.output_rows.push_back(row0 + i);
  }
  return row0;
}

}  // namespace prefixd
