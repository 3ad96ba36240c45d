// Running sequences and state snapshots of a recurrent model from the pool
// when the flags are not given (state_budget.h).
#include "daemon/state_budget.h"

#include <algorithm>

namespace prefixd {

namespace {
constexpr int32_t kMaxRunningDefault = 64;    // --max-concurrent's default
constexpr int32_t kMaxSnapshotsDefault = 16;  // EngineOptions::kDefaultStateSnapshots
}  // namespace

StateBudget choose_state_budget(size_t pool_bytes, size_t slot_bytes, int32_t max_running, int32_t state_snapshots) {
  StateBudget b;
  b.max_running = max_running;
  b.state_snapshots = state_snapshots;
  if (max_running >= 0 && state_snapshots >= 0) return b;
  const int64_t n_fit = static_cast<int64_t>(pool_bytes / 2 / slot_bytes);
  if (max_running < 0) {
    b.max_running = static_cast<int32_t>(std::clamp<int64_t>(n_fit / 3, 1, kMaxRunningDefault));
  }
  if (state_snapshots < 0) {
    b.state_snapshots = static_cast<int32_t>(std::clamp<int64_t>(n_fit - b.max_running, 0, kMaxSnapshotsDefault));
  }
  std::string chosen;
  if (max_running < 0) chosen = "--max-concurrent " + std::to_string(b.max_running);
  if (state_snapshots < 0)
    chosen += (chosen.empty() ? "" : " and ") + std::string("--state-snapshots ") + std::to_string(b.state_snapshots);
  b.note = "recurrent state of " + std::to_string(slot_bytes) + " bytes a slot: " + chosen + " (" +
           std::to_string(n_fit) + " slots fit half of the " + std::to_string(pool_bytes >> 20) +
           " MiB KV pool; give them, or a larger --kv-pool-mib, to choose)";
  if (state_snapshots < 0 && b.state_snapshots == 0) b.note += "; no snapshot slots: prefix reuse is off";
  return b;
}

}  // namespace prefixd
