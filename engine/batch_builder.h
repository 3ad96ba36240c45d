// Builds the varlen Batch of one forward pass from per-sequence pieces: the
// tokens to compute, their first position and the sequence's block table.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/backend.h"

namespace prefixd {

enum class LogitsWanted : uint8_t { kNone, kLast, kAll };

class BatchBuilder {
 public:
  explicit BatchBuilder(int32_t block_size) : block_size_(block_size) {}

  void clear() { batch_ = Batch(); }
  // Appends tokens at positions [pos0, pos0 + tokens.size()). `block_table`
  // maps logical blocks to pool blocks and must cover every position up to the
  // last one. `window_table` (window group pools; else empty, and empty for
  // every sequence of the batch) maps them to window blocks, as long as
  // block_table. Returns the index of the sequence's first row.
  int32_t add(std::span<const int32_t> tokens, int32_t pos0, std::span<const int32_t> block_table,
              LogitsWanted logits, std::span<const int32_t> window_table = {});
  // The recurrent state slot of the sequence added last (BatchSeq::state_slot).
  void set_last_state_slot(int32_t slot) { batch_.seqs.back().state_slot = slot; }
  const Batch& batch() const { return batch_; }
  int32_t n_tokens() const { return batch_.n_tokens(); }

 private:
  int32_t block_size_;
  Batch batch_;
};

}  // namespace prefixd
