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

#include <chrono>
#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

constexpr int32_t kPrefixTokens = 700;
constexpr int32_t kSuffixTokens = 20;
constexpr int32_t kBlockSize = 16;
// The full blocks the prefix's prompts share: 43 blocks, 688 tokens.
constexpr int32_t kSharedTokens = kPrefixTokens / kBlockSize * kBlockSize;

std::string model_path() { return shared_path("models/rand-lfm2-bf16.gguf"); }

// Token ids in [3, 1003) (the model's vocabulary is 1024), BOS first when `bos`.
std::vector<int32_t> tokens(int seed, int32_t n, bool bos) {
  std::vector<int32_t> t;
  if (bos) t.push_back(1);
  for (int32_t i = static_cast<int32_t>(t.size()); i < n; ++i)
    t.push_back(3 + (seed * 7919 + i * 613 + (i * i) % 11) % 1000);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Greedy, 16 tokens, the top 5 logprobs of each.
json completion(const std::vector<int32_t>& prompt) {
  return json{{"prompt", prompt},  {"max_tokens", 16},
              {"temperature", 0},  {"ignore_eos", true},
              {"logprobs", 5},     {"return_tokens_as_token_ids", true}};
}

// F32 KV (bit-stable outputs), one thread, onboards forced (recompute would
// often win on so small a model), blocks written through to host and disk.
std::vector<std::string> daemon_args(const std::string& disk_dir) {
  std::vector<std::string> a = {"--model",       model_path(), "--threads",       "1",
                                "--kv-dtype",    "f32",        "--block-size",    "16",
                                "--kv-pool-mib", "8",          "--restore-policy", "always"};
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
// and a request that finds most of this small pool so held is refused as too
// big rather than queued (the engine's rule for a lone request).
bool wait_pool_unreferenced(httplib::Client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (stats(c)["tiers"]["device"]["blocks_referenced"].get<int64_t>() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// One answer: its ids and logprobs object.
struct Answer {
  json ids;
  json logprobs;
  json prefix_cache;
};

Answer ask(httplib::Client& c, const std::vector<int32_t>& prompt) {
  REQUIRE(wait_pool_unreferenced(c));
  HttpAnswer a = post_json(c, "/v1/completions", completion(prompt));
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  return Answer{a.body["choices"][0]["token_ids"], a.body["choices"][0]["logprobs"],
                a.body["prefix_cache"]};
}

// The answer equals the uncached one exactly: ids, and every logprob bit
// (JSON numbers written with round-trip precision).
void check_identical(const Answer& got, const Answer& uncached) {
  CHECK(got.ids == uncached.ids);
  CHECK(got.logprobs == uncached.logprobs);
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
