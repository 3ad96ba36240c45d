// The prefix cache with a hybrid model (rand-lfm2-bf16: gated short
// convolutions in 4 of its 6 layers, their tails kept in every block,
// kernels/conv_tail.h) through the real daemon: cache_check::check_tier_walk
// (a 700-token prefix cold, then from the pool, the whole prompt again — its
// last token recomputed in a copy of its last block, whose ring still holds
// that token's predecessors — from host, from disk after a restart, and a
// prompt shorter than a block), every answer identical to the uncached run.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "tests/daemon_cache_check.h"
#include "tests/golden.h"

TEST_CASE("a hybrid model's cached prefix gives the uncached answer from the pool, host and disk") {
  // 8 MiB: 85 blocks of F32 K/V over 6 layers (96 KiB a block).
  prefixd::testing::cache_check::check_tier_walk(prefixd::testing::shared_path("models/rand-lfm2-bf16.gguf"), "8");
}
