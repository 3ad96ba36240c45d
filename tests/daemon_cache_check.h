// Test support for the daemon prefix-cache scenarios (a long prefix cold,
// then with new suffixes from the pool, the host tier, disk after a restart):
// synthetic prompts, the daemon's arguments, and answers compared with the
// uncached run's, ids and every logprob bit. Used by
// tests/test_daemon_window_cache.cpp and tests/test_daemon_lfm2_cache.cpp.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"

namespace prefixd::testing::cache_check {

// Token ids in [3, 1003) (the models' vocabularies are 1024), BOS first when `bos`.
inline std::vector<int32_t> tokens(int seed, int32_t n, bool bos) {
  std::vector<int32_t> t;
  if (bos) t.push_back(1);
  for (int32_t i = static_cast<int32_t>(t.size()); i < n; ++i)
    t.push_back(3 + (seed * 7919 + i * 613 + (i * i) % 11) % 1000);
  return t;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Greedy, 16 tokens, the top 5 logprobs of each.
inline nlohmann::json completion(const std::vector<int32_t>& prompt) {
  return nlohmann::json{{"prompt", prompt},  {"max_tokens", 16},
                        {"temperature", 0},  {"ignore_eos", true},
                        {"logprobs", 5},     {"return_tokens_as_token_ids", true}};
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

// One answer: its ids, logprobs object and prefix_cache report.
struct Answer {
  nlohmann::json ids;
  nlohmann::json logprobs;
  nlohmann::json prefix_cache;
};

inline Answer ask(httplib::Client& c, const std::vector<int32_t>& prompt) {
  REQUIRE(wait_pool_unreferenced(c));
  HttpAnswer a = post_json(c, "/v1/completions", completion(prompt));
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  return Answer{a.body["choices"][0]["token_ids"], a.body["choices"][0]["logprobs"],
                a.body["prefix_cache"]};
}

// The answer equals the uncached one exactly: ids, and every logprob bit
// (JSON numbers written with round-trip precision).
inline void check_identical(const Answer& got, const Answer& uncached) {
  CHECK(got.ids == uncached.ids);
  CHECK(got.logprobs == uncached.logprobs);
}

}  // namespace prefixd::testing::cache_check
