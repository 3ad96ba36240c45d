// The engine with the host and disk tiers below its pool: blocks offloaded on
// publish (write-through) and on eviction (evict-only) come back from host RAM
// and from disk with outputs equal to a cold run; corrupt disk records are a
// counted miss, never a wrong answer; onboard-vs-recompute is reported.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "engine/kv/block_hash.h"
#include "storage/tier_manager.h"
#include "tests/cpu_isa_under_test.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

const Hash128 kFingerprint{0x1234, 0x5678};

EngineOptions engine_options(const TierManager& tm, size_t pool_bytes = 64ull << 20) {
  EngineOptions o = f32_engine_options(pool_bytes);
  o.model_fingerprint = tm.model_fingerprint();
  o.deployment_secret = tm.deployment_secret();
  o.onboard_mode = EngineOptions::OnboardMode::kAlways;
  return o;
}

std::unique_ptr<TierManager> make_tiers(const std::string& model_file, const std::string* disk_dir,
                                        WritePolicy policy, uint64_t host_bytes = 256ull << 20,
                                        Hash128 fingerprint = kFingerprint, int32_t n_io_threads = 2) {
  TierManagerOptions o;
  o.n_io_threads = n_io_threads;
  o.model_fingerprint = fingerprint;
  o.geometry = f32_engine_options().record_geometry(model_config_of(model_file));
  o.host_capacity_bytes = host_bytes;
  o.write_policy = policy;
  if (disk_dir != nullptr) {
    DiskTierOptions d;
    d.path = *disk_dir;
    d.capacity_bytes = 1ull << 30;
    o.disk = d;
  }
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  return std::move(tm).value();
}

}  // namespace

TEST_CASE("write-through blocks come back from host, then from disk, with the cold outputs") {
  for (const auto& [name, tol] : engine_golden_models()) {
    CAPTURE(name);
    GoldenModel g = load_golden(name, tol);
    const GoldenCase& c = longest_case(g);
    const int32_t n = static_cast<int32_t>(c.ids.size());
    const int32_t n_full_tokens = (n / 16) * 16;
    TempDir dir;
    auto tiers = make_tiers(g.model_file, &dir.path, WritePolicy::kWriteThrough);
    Request req = greedy_request(c.ids, 12);
    req.return_logits = true;

    Collected cold;
    {
      EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
      cold = e.run(req);
      CHECK(cold.usage.cached_tokens == 0);
    }
    tiers->wait_idle();
    TierManagerStats ts = tiers->stats();
    CHECK(ts.offload_host_blocks >= uint64_t(n / 16));
    CHECK(ts.offload_disk_blocks >= uint64_t(n / 16));

    // A new engine has an empty pool: the chain comes from host RAM.
    {
      EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
      Collected warm = e.run(req);
      const int32_t expect = std::min(n_full_tokens, n - 1);
      CHECK(warm.usage.cached_tokens == expect);
      CHECK(warm.usage.host_tokens == expect);
      CHECK(warm.usage.disk_tokens == 0);
      CHECK(warm.usage.device_tokens == 0);
      CHECK(warm.usage.prefill_tokens == n - expect);
      CHECK(warm.usage.onboard_path == "restore");
      const AnswerDiff d = compare_answers(warm, cold, g.n_vocab, tol);
      CAPTURE(d.compared_steps);
      CHECK(d.ids_agree);
      CHECK(d.worst_logit <= tol);
      if (batch_invariant_weights(*e.model)) CHECK(warm.logits == cold.logits);  // bit for bit
    }
    // Host emptied: the chain comes from disk.
    tiers->host().clear();
    {
      EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
      Collected warm = e.run(req);
      const int32_t expect = std::min(n_full_tokens, n - 1);
      CHECK(warm.usage.cached_tokens == expect);
      CHECK(warm.usage.disk_tokens == expect);
      CHECK(warm.usage.host_tokens == 0);
      const AnswerDiff d = compare_answers(warm, cold, g.n_vocab, tol);
      CAPTURE(d.compared_steps);
      CHECK(d.ids_agree);
      CHECK(d.worst_logit <= tol);
      if (batch_invariant_weights(*e.model)) CHECK(warm.logits == cold.logits);  // bit for bit
      // The disk read also refilled the host tier.
      CHECK(tiers->stats().host.blocks >= uint64_t(n / 16));
    }
  }
}

TEST_CASE("a pool too small for the working set evicts to host and onboards from there") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);
  auto tiers = make_tiers(g.model_file, nullptr, WritePolicy::kEvictOnly);
  const size_t block_bytes = f32_block_bytes(g.model_file);
  // 20 blocks: each 160-token prompt needs 11, so the second evicts the first.
  EngineUnderTest e(g.model_file, engine_options(*tiers, block_bytes * 20), tiers.get());
  std::vector<int32_t> a(c.ids.begin(), c.ids.begin() + 160);
  std::vector<int32_t> b(c.ids.begin() + 200, c.ids.begin() + 360);
  Collected a1 = e.run(greedy_request(a, 8));
  CHECK(tiers->stats().offload_host_blocks == 0);  // evict-only: nothing offloaded on publish
  Collected b1 = e.run(greedy_request(b, 8));
  CHECK(e.engine->stats().device_evictions > 0);
  CHECK(tiers->stats().offload_host_blocks > 0);
  Collected a2 = e.run(greedy_request(a, 8));
  CHECK(a2.usage.host_tokens > 0);
  CHECK(a2.usage.cached_tokens == a2.usage.device_tokens + a2.usage.host_tokens);
  CHECK(a2.usage.prefill_tokens == 160 - a2.usage.cached_tokens);
  CHECK(a2.ids == a1.ids);
  Collected b2 = e.run(greedy_request(b, 8));
  CHECK(b2.ids == b1.ids);
}

TEST_CASE("corrupt disk records are counted misses and the answer stays correct") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  const GoldenCase& c = longest_case(g);
  const int32_t n = static_cast<int32_t>(c.ids.size());
  TempDir dir;
  auto tiers = make_tiers(g.model_file, &dir.path, WritePolicy::kWriteThrough);
  Request req = greedy_request(c.ids, 12);
  Collected cold;
  {
    EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
    cold = e.run(req);
  }
  tiers->wait_idle();
  tiers->host().clear();
  // Corrupt the third block's record: a flipped byte in its payload.
  const EngineOptions o = engine_options(*tiers);
  const uint64_t seed = namespace_seed(kFingerprint, static_cast<uint8_t>(o.kv_dtype), 16, o.deployment_secret, "");
  std::vector<BlockHash> hashes = hash_blocks(c.ids, 16, seed);
  REQUIRE(hashes.size() >= 4);
  REQUIRE(tiers->disk()->contains(BlockKey{seed, hashes[2]}));
  const uint64_t rec_bytes = tiers->record_bytes();
  std::vector<uint8_t> garbage(rec_bytes, 0xAB);
  REQUIRE(tiers->disk()->debug_overwrite_value(BlockKey{seed, hashes[2]}, garbage).ok());
  // And truncate the fifth block's record.
  if (hashes.size() > 4) {
    std::vector<uint8_t> half(rec_bytes / 2, 0);
    REQUIRE(tiers->disk()->debug_overwrite_value(BlockKey{seed, hashes[4]}, half).ok());
  }
  EngineUnderTest e(g.model_file, o, tiers.get());
  Collected warm = e.run(req);
  CHECK(warm.usage.disk_tokens == 32);  // the walk stops at the corrupt block
  CHECK(warm.usage.prefill_tokens == n - 32);
  CHECK(warm.ids == cold.ids);
  // The blocks after the first are read at once (several readers), so the
  // truncated block 4 was read and counted as well.
  const uint64_t n_corrupt = hashes.size() > 4 ? 2 : 1;
  CHECK(tiers->stats().disk.corrupt_records == n_corrupt);
  // The walk stopped at block 2, so this request recomputed every later
  // block: the tier dropped their disk copies and write-through stored the
  // recomputed ones. The next engine onboards the whole chain.
  tiers->wait_idle();
  tiers->host().clear();
  EngineUnderTest e2(g.model_file, o, tiers.get());
  Collected again = e2.run(req);
  CHECK(again.usage.disk_tokens == std::min((n / 16) * 16, n - 1));
  CHECK(again.ids == cold.ids);
  CHECK(tiers->stats().disk.corrupt_records == n_corrupt);
}

TEST_CASE("onboard_mode never recomputes and says so; another fingerprint finds nothing") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  const GoldenCase& c = longest_case(g);
  const int32_t n = static_cast<int32_t>(c.ids.size());
  TempDir dir;
  std::unique_ptr<TierManager> tiers = make_tiers(g.model_file, &dir.path, WritePolicy::kWriteThrough);
  Request req = greedy_request(c.ids, 6);
  Collected cold;
  {
    EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
    cold = e.run(req);
  }
  tiers->wait_idle();
  {
    EngineOptions o = engine_options(*tiers);
    o.onboard_mode = EngineOptions::OnboardMode::kNever;
    EngineUnderTest e(g.model_file, o, tiers.get());
    Collected r = e.run(req);
    CHECK(r.usage.cached_tokens == 0);
    CHECK(r.usage.prefill_tokens == n);
    CHECK(r.usage.onboard_path == "recompute");
    CHECK(r.ids == cold.ids);
  }
  {
    // A different model file over the same disk directory: its tiers carry
    // its fingerprint, and the engine takes the same one (create() refuses
    // a mismatch, below).
    tiers->wait_idle();
    tiers.reset();  // closes the database
    auto other = make_tiers(g.model_file, &dir.path, WritePolicy::kWriteThrough, 256ull << 20,
                            Hash128{kFingerprint.lo ^ 1, kFingerprint.hi});
    REQUIRE(other->stats().disk.blocks > 0);  // the first model's records are there
    EngineUnderTest e(g.model_file, engine_options(*other), other.get());
    Collected r = e.run(req);
    CHECK(r.usage.cached_tokens == 0);
    CHECK(r.ids == cold.ids);
    CHECK(e.engine->lookup(c.ids, "").cached_tokens() > 0);  // its own blocks are now cached
  }
}

TEST_CASE("an engine refuses tiers whose model fingerprint or deployment secret differs from its own") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  auto tiers = make_tiers(g.model_file, nullptr, WritePolicy::kWriteThrough);
  auto file = GgufFile::open(g.model_file).value();
  auto backend = make_cpu_backend(1);
  auto model = Model::load(file, *backend).value();
  const EngineOptions good = engine_options(*tiers);
  REQUIRE(Engine::create(*model, nullptr, tiers.get(), good).ok());
  {
    EngineOptions o = good;
    o.model_fingerprint.lo ^= 1;  // the engine was told of another model file
    auto e = Engine::create(*model, nullptr, tiers.get(), o);
    REQUIRE_FALSE(e.ok());
    CHECK(e.message().find("model fingerprint") != std::string::npos);
    CHECK(e.message().find(kFingerprint.hex()) != std::string::npos);
    CHECK(e.message().find(o.model_fingerprint.hex()) != std::string::npos);
    o.model_fingerprint = Hash128{};  // left unset
    CHECK_FALSE(Engine::create(*model, nullptr, tiers.get(), o).ok());
  }
  {
    EngineOptions o = good;
    o.deployment_secret[7] ^= 1;
    auto e = Engine::create(*model, nullptr, tiers.get(), o);
    REQUIRE_FALSE(e.ok());
    CHECK(e.message().find("deployment secret") != std::string::npos);
    o.deployment_secret = {};  // left unset
    CHECK_FALSE(Engine::create(*model, nullptr, tiers.get(), o).ok());
  }
  // Without tiers the engine's namespace is its own business.
  EngineOptions o = good;
  o.model_fingerprint = Hash128{};
  o.deployment_secret = {};
  CHECK(Engine::create(*model, nullptr, nullptr, o).ok());
}

TEST_CASE("an engine refuses tiers whose record geometry differs from its pool") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  auto tiers = make_tiers(g.model_file, nullptr, WritePolicy::kWriteThrough);  // F32 records, 16-token blocks
  auto file = GgufFile::open(g.model_file).value();
  auto backend = make_cpu_backend(1);
  auto model = Model::load(file, *backend).value();
  EngineOptions o = engine_options(*tiers);
  o.kv_dtype = DType::F16;
  auto e = Engine::create(*model, nullptr, tiers.get(), o);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("record geometry") != std::string::npos);
  o.kv_dtype = DType::F32;
  o.block_size = 32;
  CHECK_FALSE(Engine::create(*model, nullptr, tiers.get(), o).ok());
  o.block_size = 16;
  CHECK(Engine::create(*model, nullptr, tiers.get(), o).ok());
}

TEST_CASE("clearing the cache while write-through records are still being built leaves nothing findable") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);
  // One I/O thread: it runs at normal priority (with two, the disk writer
  // runs at idle priority and a busy machine may not run it for seconds).
  auto tiers = make_tiers(g.model_file, nullptr, WritePolicy::kWriteThrough, 256ull << 20,
                          kFingerprint, /*n_io_threads=*/1);
  EngineUnderTest e(g.model_file, engine_options(*tiers), tiers.get());
  // Occupy the tiers' offload thread with a build that waits to be released,
  // so the engine's published blocks are still queued for their builds (and
  // referenced) when the cache is cleared.
  std::atomic<bool> entered{false}, release{false};
  const std::vector<int32_t> filler(static_cast<size_t>(tiers->geometry().block_size), 1);
  REQUIRE(tiers->offload_published_later(
      0xF00D, Hash128{7, 7}, Hash128{}, filler,
      [&](uint8_t*) {
        entered.store(true);
        for (int i = 0; i < 10000 && !release.load(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      [] {}));
  for (int i = 0; i < 10000 && !entered.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(entered.load());
  std::vector<int32_t> prompt(c.ids.begin(), c.ids.begin() + 160);
  Collected first = e.run(greedy_request(prompt, 4));
  CHECK(first.usage.cached_tokens == 0);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    release.store(true);
  });
  e.engine->clear_cache();
  releaser.join();
  const LookupResult after = e.engine->lookup(prompt, "");
  CHECK(after.device_tokens == 0);
  CHECK(after.host_tokens == 0);
  Collected second = e.run(greedy_request(prompt, 4));
  CHECK(second.usage.cached_tokens == 0);
}

// PREFIXD_CPU_ISA may name a set or a mixed plan (tests/CMakeLists.txt runs both).
int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
