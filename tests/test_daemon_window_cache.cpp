// The prefix cache with a sliding-window model (rand-gemma3-bf16: window 64 on
// 6 of its 7 layers) through the real daemon: cache_check::check_tier_walk
// (a 700-token prefix cold, then from the pool, the whole prompt again, from
// host, from disk after a restart, and a prompt shorter than a block), every
// answer identical to the uncached run.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "tests/daemon_cache_check.h"
#include "tests/golden.h"

TEST_CASE("a sliding-window model's cached prefix gives the uncached answer from the pool, host and disk") {
  // 4 MiB: 73 blocks (two unrelated prompts evict the prefix).
  prefixd::testing::cache_check::check_tier_walk(prefixd::testing::shared_path("models/rand-gemma3-bf16.gguf"), "4");
}
