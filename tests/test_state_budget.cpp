// Tests for daemon/state_budget.h: the running sequences and state snapshots
// a recurrent model gets from the pool when --max-concurrent or
// --state-snapshots is not given.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "daemon/state_budget.h"

using namespace prefixd;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kQwen35_08b = 20201472;  // qwen35-0.8b's slot (BF16 preset)
constexpr size_t kRandQwen35 = 58368;     // rand-qwen35-bf16's
}  // namespace

TEST_CASE("state budget: a large slot in the default pool gets few running sequences and snapshots") {
  // 128 MiB (half of 256) / 20201472 = 6 slots: 2 running, 4 snapshots.
  const StateBudget b = choose_state_budget(256 * kMiB, kQwen35_08b, -1, -1);
  CHECK(b.max_running == 2);
  CHECK(b.state_snapshots == 4);
  CHECK(b.note.find("--max-concurrent 2 and --state-snapshots 4") != std::string::npos);
  CHECK(b.note.find("6 slots fit half of the 256 MiB KV pool") != std::string::npos);
  // 2 GiB: 53 fit, 17 running, 16 snapshots (the usual cap).
  const StateBudget big = choose_state_budget(2048 * kMiB, kQwen35_08b, -1, -1);
  CHECK(big.max_running == 17);
  CHECK(big.state_snapshots == 16);
}

TEST_CASE("state budget: a small slot keeps the usual defaults") {
  const StateBudget b = choose_state_budget(256 * kMiB, kRandQwen35, -1, -1);
  CHECK(b.max_running == 64);
  CHECK(b.state_snapshots == 16);
}

TEST_CASE("state budget: a given count is kept; only the other is chosen") {
  const StateBudget given_both = choose_state_budget(256 * kMiB, kQwen35_08b, 8, 40);
  CHECK(given_both.max_running == 8);
  CHECK(given_both.state_snapshots == 40);
  CHECK(given_both.note.empty());
  // Running given: the snapshots take what is left of the 6 (none here).
  const StateBudget running = choose_state_budget(256 * kMiB, kQwen35_08b, 8, -1);
  CHECK(running.max_running == 8);
  CHECK(running.state_snapshots == 0);
  CHECK(running.note.find("--state-snapshots 0") != std::string::npos);
  CHECK(running.note.find("--max-concurrent") == std::string::npos);
  CHECK(running.note.find("prefix reuse is off") != std::string::npos);
  const StateBudget snaps = choose_state_budget(256 * kMiB, kQwen35_08b, -1, 0);
  CHECK(snaps.max_running == 2);
  CHECK(snaps.state_snapshots == 0);
}

TEST_CASE("state budget: a pool too small for one slot still runs one sequence (the engine then refuses the pool)") {
  const StateBudget b = choose_state_budget(16 * kMiB, kQwen35_08b, -1, -1);
  CHECK(b.max_running == 1);
  CHECK(b.state_snapshots == 0);
}
