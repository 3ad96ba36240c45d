// qwen35 (Gated DeltaNet hybrid) prefix reuse below the device, through the
// real daemon: a ~700-token prefix computed cold leaves its blocks and its
// state snapshots (every 8th block and the last block boundary before the
// prompt's end) in the host and disk tiers (write-through) and in memcached;
// the same prefix with new suffixes is then onboarded up to the longest
// snapshot that ends inside the shared part (block 40 of its 43 shared
// blocks; once one such prompt has taken a snapshot at 43, where it leaves
// the first, block 43) and resumed there:
//  - from host, once two other prompts have evicted most of it from a small
//    pool;
//  - from disk after a restart, then from the pool again;
//  - on a second replica sharing a memcached pool (remote tier);
//  - from evict-only tiers, which get blocks and snapshots as they leave the
//    pool;
// every answer identical to the uncached run (ids and every logprob bit).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fstream>

#include "tests/daemon_cache_check.h"
#include "tests/golden.h"
#include "tests/memcached_server.h"

using namespace prefixd::testing;
namespace cc = prefixd::testing::cache_check;

namespace {

constexpr int32_t kBlockSize = 16, kPrefixTokens = 700, kSuffixTokens = 20;
// The first prompt sharing the 43 blocks resumes at their longest snapshot
// (every 8th block: block 40) and takes one at 43, where it leaves the
// cached prompt: every later one resumes there.
constexpr int32_t kResumedTokens = 40 * kBlockSize;
constexpr int32_t kSharedTokens = 43 * kBlockSize;

// F32 KV, one thread, blocks of 16, snapshots every 8 blocks, onboards
// forced; a 2 MiB pool: 4 running sequences' and 4 snapshots' states
// (58 KiB each) and ~99 blocks of 16 KiB, so two other 720-token prompts
// evict a third.
std::vector<std::string> daemon_args(const std::vector<std::string>& tiers, const std::string& pool_mib = "2",
                                     const std::string& snapshots = "4") {
  std::vector<std::string> a = {"--model", shared_path("models/rand-qwen35-bf16.gguf"),
                                "--threads", "1", "--kv-dtype", "f32", "--block-size", "16",
                                "--kv-pool-mib", pool_mib, "--max-concurrent", "4", "--state-snapshots", snapshots,
                                "--snapshot-interval-blocks", "8", "--restore-policy", "always"};
  a.insert(a.end(), tiers.begin(), tiers.end());
  return a;
}

std::vector<std::string> disk_tiers(const std::string& dir) {
  return {"--host-cache-gb", "1", "--disk-cache-dir", dir, "--write-policy", "write-through"};
}

// Waits (30 s at most) until the disk tier holds every record the host tier
// does: write-through is asynchronous and runs at idle priority.
bool wait_disk_caught_up(httplib::Client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const nlohmann::json t = stats(c)["tiers"];
    if (t["disk"]["blocks"].get<int64_t>() >= t["host"]["blocks"].get<int64_t>()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits (30 s at most) until the replica's writes to the remote tier are
// sent: write-through to memcached is asynchronous.
bool wait_remote_written(httplib::Client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const nlohmann::json r = stats(c)["tiers"]["remote"];
    if (r["written_bytes"].get<int64_t>() > 0 && r["pending_write_bytes"].get<int64_t>() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct Prompts {
  std::vector<std::vector<int32_t>> with_prefix;  // the prefix + suffix i
  std::vector<std::vector<int32_t>> filler;       // two unrelated prompts
  Prompts() {
    const std::vector<int32_t> prefix = cc::tokens(1, kPrefixTokens, true);
    for (int i = 0; i < 6; ++i) with_prefix.push_back(cc::concat(prefix, cc::tokens(100 + i, kSuffixTokens, false)));
    for (int i = 0; i < 2; ++i) filler.push_back(cc::tokens(2 + i, kPrefixTokens + kSuffixTokens, true));
  }
};

// Each prompt's answer with the cache emptied before it.
std::vector<Answer> uncached_answers(const Prompts& p) {
  auto d = start_or_fail(daemon_args({"--host-cache-gb", "0"}));
  auto c = d->client();
  std::vector<Answer> out;
  for (const auto& prompt : p.with_prefix) {
    REQUIRE(c->Delete("/v1/cache")->status == 200);
    out.push_back(cc::ask(*c, prompt));
    REQUIRE(out.back().prefix_cache["cached_tokens"] == 0);
  }
  CHECK(d->stop() == 0);
  return out;
}

}  // namespace

TEST_CASE("qwen35: a prefix evicted from the pool comes back from host, then from disk after a restart") {
  const Prompts p;
  const std::vector<Answer> uncached = uncached_answers(p);
  TempDir dir;
  {
    auto d = start_or_fail(daemon_args(disk_tiers(dir.path + "/disk")));
    auto c = d->client();
    const Answer cold = cc::ask(*c, p.with_prefix[0]);
    CHECK(cold.prefix_cache["cached_tokens"] == 0);
    cc::check_identical(cold, uncached[0]);
    for (const auto& f : p.filler) CHECK(cc::ask(*c, f).prefix_cache["cached_tokens"] == 0);
    const Answer host = cc::ask(*c, p.with_prefix[1]);
    // The pool evicts a chain from its end: its first blocks may still be
    // there (with their own snapshot at block 8), the rest comes from host.
    CHECK(host.prefix_cache["cached_tokens"] == kResumedTokens);
    CHECK(host.prefix_cache["host_tokens"] >= kResumedTokens / 2);
    CHECK(host.prefix_cache["device_tokens"].get<int32_t>() + host.prefix_cache["host_tokens"].get<int32_t>() ==
          kResumedTokens);
    CHECK(host.prefix_cache["restore_path"] == "restore");
    cc::check_identical(host, uncached[1]);
    CHECK(wait_disk_caught_up(*c));
    CHECK(d->stop() == 0);
  }
  auto d = start_or_fail(daemon_args(disk_tiers(dir.path + "/disk")));
  auto c = d->client();
  // /v1/cache/lookup sees the chain on disk and the snapshot at its end.
  HttpAnswer lookup = post_json(*c, "/v1/cache/lookup", nlohmann::json{{"prompt", p.with_prefix[2]}});
  REQUIRE(lookup.status == 200);
  CHECK(lookup.body["disk_tokens"] == kSharedTokens);
  const Answer disk = cc::ask(*c, p.with_prefix[2]);
  CHECK(disk.prefix_cache["disk_tokens"] == kSharedTokens);
  CHECK(disk.prefix_cache["host_tokens"] == 0);
  CHECK(disk.prefix_cache["device_tokens"] == 0);
  cc::check_identical(disk, uncached[2]);
  // The onboarded blocks and the restored snapshot are in the pool now.
  const Answer device = cc::ask(*c, p.with_prefix[3]);
  CHECK(device.prefix_cache["device_tokens"] == kSharedTokens);
  CHECK(device.prefix_cache["cached_tokens"] == kSharedTokens);
  cc::check_identical(device, uncached[3]);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35: evict-only tiers get a snapshot when its block leaves the pool") {
  const Prompts p;
  const std::vector<Answer> uncached = uncached_answers(p);
  // 16 snapshot slots: the prompts' 18 snapshots do not push the prefix's
  // out of the device, so they go down only with their blocks (3 MiB: ~117
  // blocks after the states).
  auto d = start_or_fail(daemon_args({"--host-cache-gb", "1", "--write-policy", "evict-only"}, "3", "16"));
  auto c = d->client();
  cc::check_identical(cc::ask(*c, p.with_prefix[0]), uncached[0]);
  for (const auto& f : p.filler) CHECK(cc::ask(*c, f).prefix_cache["cached_tokens"] == 0);
  const Answer host = cc::ask(*c, p.with_prefix[1]);
  CHECK(host.prefix_cache["cached_tokens"] == kResumedTokens);
  CHECK(host.prefix_cache["host_tokens"] > 0);  // the snapshot at 40 with the blocks before it
  cc::check_identical(host, uncached[1]);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35: a second replica resumes the prefix from the remote tier") {
  if (!memcached_installed()) {
    MESSAGE("memcached not installed (Debian package memcached): skipped");
    return;
  }
  const Prompts p;
  const std::vector<Answer> uncached = uncached_answers(p);
  MemcachedServer mc;
  TempDir dir;
  const std::string secret = dir.path + "/secret";
  {
    std::ofstream f(secret);
    f << "qwen35-remote-tier-test-secret-0123456789abcdef\n";
  }
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  const std::vector<std::string> remote = {"--host-cache-gb", "0.0625", "--write-policy", "write-through",
                                           "--remote-cache", "memcached://127.0.0.1:" + std::to_string(mc.port()),
                                           "--cache-secret-file", secret};
  auto a = start_or_fail(daemon_args(remote));
  auto ca = a->client();
  const Answer cold = cc::ask(*ca, p.with_prefix[0]);
  CHECK(cold.prefix_cache["cached_tokens"] == 0);
  cc::check_identical(cold, uncached[0]);
  REQUIRE(wait_remote_written(*ca));
  auto b = start_or_fail(daemon_args(remote));
  auto cb = b->client();
  const Answer from_remote = cc::ask(*cb, p.with_prefix[1]);
  CHECK(from_remote.prefix_cache["remote_tokens"] == kResumedTokens);
  cc::check_identical(from_remote, uncached[1]);
  CHECK(from_remote.prefix_cache["device_tokens"] == 0);
  CHECK(b->stop() == 0);
  CHECK(a->stop() == 0);
}
