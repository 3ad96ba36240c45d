// How many running sequences and state snapshots a model with recurrent
// layers (qwen35) gets when --max-concurrent or --state-snapshots is not
// given. Each running sequence and each snapshot takes one state slot out of
// the KV pool (EngineOptions::pool_geometry), and a Qwen3.5-0.8B slot is
// 20 MB: the usual defaults (64 running, 16 snapshots) would need 1.6 GB
// and leave a 256 MiB pool no blocks. So the counts not given are chosen to
// fit half of the pool: a third of the slots that fit there run sequences
// (1..64), the rest hold snapshots (0..16). A count given on the command line
// is kept as it is (EngineOptions::validate refuses a pool it leaves without
// blocks, naming the flags).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace prefixd {

struct StateBudget {
  int32_t max_running = 0;
  int32_t state_snapshots = 0;
  std::string note;  // what was chosen and why, for the log; empty when nothing was
};

// `slot_bytes`: one state slot (ModelConfig::state_floats() × 4), > 0.
// `max_running`: the given --max-concurrent, or -1 when not given.
// `state_snapshots`: the given --state-snapshots, or -1 when not given.
StateBudget choose_state_budget(size_t pool_bytes, size_t slot_bytes, int32_t max_running, int32_t state_snapshots);

}  // namespace prefixd
