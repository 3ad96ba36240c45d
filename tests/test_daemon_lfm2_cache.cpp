// The prefix cache with a hybrid model (rand-lfm2-bf16: gated short
// convolutions in 4 of its 6 layers, their tails kept in every block,
// kernels/conv_tail.h) through the real daemon: a 700-token prefix served
// cold, then with new suffixes from the device pool, the whole prompt again
// (its last token recomputed in a copy of its last block), from the host tier
// after the pool evicted it, from disk after a restart, and from the pool
// again; and a prompt shorter than one block. Every answer's ids and
// logprobs identical to an uncached run of the same prompt.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "tests/daemon_cache_check.h"
#include "tests/golden.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;
using namespace prefixd::testing::cache_check;

namespace {

constexpr int32_t kPrefixTokens = 700;
constexpr int32_t kSuffixTokens = 20;
constexpr int32_t kBlockSize = 16;
// The full blocks the prefix's prompts share: 43 blocks, 688 tokens.
constexpr int32_t kSharedTokens = kPrefixTokens / kBlockSize * kBlockSize;

std::string model_path() { return shared_path("models/rand-lfm2-bf16.gguf"); }

// The daemon's arguments: no tiers without `disk_dir` (see cache_check::daemon_args).
std::vector<std::string> daemon_args(const std::string& disk_dir) {
  return cache_check::daemon_args(model_path(), "8", disk_dir);
}

}  // namespace

TEST_CASE("a hybrid model's cached prefix gives the uncached answer from the pool, host and disk") {
  const std::vector<int32_t> prefix = tokens(1, kPrefixTokens, true);
  std::vector<std::vector<int32_t>> prompts;  // the prefix + suffix i, i < 5
  for (int i = 0; i < 5; ++i) prompts.push_back(concat(prefix, tokens(100 + i, kSuffixTokens, false)));
  // Two unrelated prompts as long, to push the prefix out of the 85-block pool
  // (F32 K/V of 6 layers: 96 KiB a block).
  const std::vector<int32_t> filler[2] = {tokens(2, kPrefixTokens + kSuffixTokens, true),
                                          tokens(3, kPrefixTokens + kSuffixTokens, true)};

  // Uncached references: a daemon without tiers, its pool cleared before each.
  std::vector<Answer> uncached;
  const std::vector<int32_t> short_prompt = tokens(4, kBlockSize - 5, true);
  Answer short_uncached;
  {
    auto d = start_or_fail(daemon_args(""));
    auto c = d->client();
    for (const auto& p : prompts) {
      REQUIRE(c->Delete("/v1/cache")->status == 200);
      uncached.push_back(ask(*c, p));
      REQUIRE(uncached.back().prefix_cache["cached_tokens"] == 0);
    }
    REQUIRE(c->Delete("/v1/cache")->status == 200);
    short_uncached = ask(*c, short_prompt);
    CHECK(d->stop() == 0);
  }

  TempDir dir;
  {
    auto d = start_or_fail(daemon_args(dir.path));
    auto c = d->client();
    // Cold.
    Answer cold = ask(*c, prompts[0]);
    CHECK(cold.prefix_cache["cached_tokens"] == 0);
    check_identical(cold, uncached[0]);
    // A new suffix: the prefix's blocks from the pool.
    Answer device = ask(*c, prompts[1]);
    CHECK(device.prefix_cache["device_tokens"] == kSharedTokens);
    CHECK(device.prefix_cache["prefill_tokens"] == kPrefixTokens + kSuffixTokens - kSharedTokens);
    check_identical(device, uncached[1]);
    // The same prompt again: all 45 of its blocks are cached, so its last
    // token is recomputed in a private copy of the last block, whose ring
    // still holds that token's predecessors.
    Answer whole = ask(*c, prompts[1]);
    CHECK(whole.prefix_cache["device_tokens"] == kPrefixTokens + kSuffixTokens - 1);
    check_identical(whole, uncached[1]);
    // The pool evicts the prefix for two other prompts; the host tier has it.
    for (const auto& f : filler) CHECK(ask(*c, f).prefix_cache["cached_tokens"] == 0);
    Answer host = ask(*c, prompts[2]);
    CHECK(host.prefix_cache["host_tokens"] == kSharedTokens);
    CHECK(host.prefix_cache["device_tokens"] == 0);
    CHECK(host.prefix_cache["restore_path"] == "restore");
    check_identical(host, uncached[2]);
    CHECK(wait_disk_blocks(*c, kSharedTokens / kBlockSize));
    CHECK(d->stop() == 0);
  }
  // After a restart only the disk tier has it; then the pool again.
  auto d = start_or_fail(daemon_args(dir.path));
  auto c = d->client();
  Answer disk = ask(*c, prompts[3]);
  CHECK(disk.prefix_cache["disk_tokens"] == kSharedTokens);
  CHECK(disk.prefix_cache["host_tokens"] == 0);
  CHECK(disk.prefix_cache["device_tokens"] == 0);
  check_identical(disk, uncached[3]);
  Answer again = ask(*c, prompts[4]);
  CHECK(again.prefix_cache["device_tokens"] == kSharedTokens);
  check_identical(again, uncached[4]);
  // A prompt shorter than one block: nothing to share, it still runs, twice alike.
  for (int i = 0; i < 2; ++i) {
    Answer s = ask(*c, short_prompt);
    CHECK(s.prefix_cache["cached_tokens"] == 0);
    check_identical(s, short_uncached);
  }
  CHECK(d->stop() == 0);
}
