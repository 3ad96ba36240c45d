// Test support for the daemon prefix-cache scenario (a long prefix cold, then
// with new suffixes from the pool, the whole prompt again, from the host tier,
// from disk after a restart, and a prompt shorter than a block): synthetic
// prompts, the daemon's arguments, answers compared with the uncached run's
// (ids and every logprob bit), and the scenario itself, check_tier_walk().
// Used by tests/test_daemon_window_cache.cpp, tests/test_daemon_lfm2_cache.cpp
// and (its helpers) tests/test_daemon_qwen35_tiers.cpp.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/greedy_answers.h"
#include "tests/temp_dir.h"

namespace prefixd::testing::cache_check {

// Token ids in [3, 1003) (the models' vocabularies are 1024), BOS first when `bos`.
inline std::vector<int32_t> tokens(int seed, int32_t n, bool bos) { return testing::tokens(seed, n, bos, 1000); }

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// F32 KV (bit-stable outputs), one thread, blocks of 16, a pool of
// `pool_mib`, onboards forced (recompute would often win on so small a
// model); without `disk_dir` no tiers, else blocks written through to host
// and disk.
inline std::vector<std::string> daemon_args(const std::string& model_path, const std::string& pool_mib,
                                            const std::string& disk_dir) {
  std::vector<std::string> a = {"--model",       model_path, "--threads",       "1",
                                "--kv-dtype",    "f32",      "--block-size",    "16",
                                "--kv-pool-mib", pool_mib,   "--restore-policy", "always"};
  if (disk_dir.empty()) {
    a.insert(a.end(), {"--host-cache-gb", "0"});
  } else {
    a.insert(a.end(), {"--host-cache-gb", "1", "--disk-cache-dir", disk_dir, "--write-policy",
                       "write-through"});
  }
  return a;
}

// Waits (30 s at most) until no pool block is referenced: write-through
// copies hold a published block until the tiers' offload thread has read it,
// and a request that finds most of a small pool so held is refused as too
// big rather than queued (the engine's rule for a lone request).
inline bool wait_pool_unreferenced(httplib::Client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (stats(c)["tiers"]["device"]["blocks_referenced"].get<int64_t>() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A greedy 16-token answer (testing::ask), once no pool block is referenced.
inline Answer ask(httplib::Client& c, const std::vector<int32_t>& prompt) {
  REQUIRE(wait_pool_unreferenced(c));
  return testing::ask(c, prompt, 16);
}

// The answer equals the uncached one exactly: ids, and every logprob bit
// (JSON numbers written with round-trip precision).
inline void check_identical(const Answer& got, const Answer& uncached) {
  CHECK(got.ids == uncached.ids);
  CHECK(got.logprobs == uncached.logprobs);
}

// The scenario, on `model_path` with a pool of `pool_mib` (small enough that
// two unrelated 720-token prompts evict the prefix): a 700-token prefix with
// 20-token suffixes, blocks of 16, so 43 shared blocks (688 tokens).
//  - uncached references from a daemon without tiers, its cache cleared
//    before each prompt;
//  - cold; a new suffix from the pool; the same prompt again (all its blocks
//    cached: its last token recomputed in a copy of its last block); the
//    prefix evicted from the pool and read back from host; after a restart
//    from disk, then from the pool again; a prompt shorter than one block
//    (nothing shared), twice alike.
// Every answer identical to the uncached one.
inline void check_tier_walk(const std::string& model_path, const std::string& pool_mib) {
  constexpr int32_t kPrefixTokens = 700, kSuffixTokens = 20, kBlockSize = 16;
  constexpr int32_t kSharedTokens = kPrefixTokens / kBlockSize * kBlockSize;
  const std::vector<int32_t> prefix = tokens(1, kPrefixTokens, true);
  std::vector<std::vector<int32_t>> prompts;  // the prefix + suffix i, i < 5
  for (int i = 0; i < 5; ++i) prompts.push_back(concat(prefix, tokens(100 + i, kSuffixTokens, false)));
  const std::vector<int32_t> filler[2] = {tokens(2, kPrefixTokens + kSuffixTokens, true),
                                          tokens(3, kPrefixTokens + kSuffixTokens, true)};
  const std::vector<int32_t> short_prompt = tokens(4, kBlockSize - 5, true);

  std::vector<Answer> uncached;
  Answer short_uncached;
  {
    auto d = start_or_fail(daemon_args(model_path, pool_mib, ""));
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
    auto d = start_or_fail(daemon_args(model_path, pool_mib, dir.path));
    auto c = d->client();
    Answer cold = ask(*c, prompts[0]);
    CHECK(cold.prefix_cache["cached_tokens"] == 0);
    check_identical(cold, uncached[0]);
    Answer device = ask(*c, prompts[1]);
    CHECK(device.prefix_cache["device_tokens"] == kSharedTokens);
    CHECK(device.prefix_cache["prefill_tokens"] == kPrefixTokens + kSuffixTokens - kSharedTokens);
    check_identical(device, uncached[1]);
    Answer whole = ask(*c, prompts[1]);
    CHECK(whole.prefix_cache["device_tokens"] == kPrefixTokens + kSuffixTokens - 1);
    check_identical(whole, uncached[1]);
    for (const auto& f : filler) CHECK(ask(*c, f).prefix_cache["cached_tokens"] == 0);
    Answer host = ask(*c, prompts[2]);
    CHECK(host.prefix_cache["host_tokens"] == kSharedTokens);
    CHECK(host.prefix_cache["device_tokens"] == 0);
    CHECK(host.prefix_cache["restore_path"] == "restore");
    check_identical(host, uncached[2]);
    CHECK(wait_disk_blocks(*c, kSharedTokens / kBlockSize));
    CHECK(d->stop() == 0);
  }
  auto d = start_or_fail(daemon_args(model_path, pool_mib, dir.path));
  auto c = d->client();
  Answer disk = ask(*c, prompts[3]);
  CHECK(disk.prefix_cache["disk_tokens"] == kSharedTokens);
  CHECK(disk.prefix_cache["host_tokens"] == 0);
  CHECK(disk.prefix_cache["device_tokens"] == 0);
  check_identical(disk, uncached[3]);
  Answer again = ask(*c, prompts[4]);
  CHECK(again.prefix_cache["device_tokens"] == kSharedTokens);
  check_identical(again, uncached[4]);
  for (int i = 0; i < 2; ++i) {
    Answer s = ask(*c, short_prompt);
    CHECK(s.prefix_cache["cached_tokens"] == 0);
    check_identical(s, short_uncached);
  }
  CHECK(d->stop() == 0);
}

}  // namespace prefixd::testing::cache_check
