// Tests for TierManager: write policies, chain lookup, asynchronous onboarding
// with checked records, corruption as a miss, clear, restart; with a remote
// tier on real memcached servers (another replica's blocks onboarded into host
// and disk, another secret rejected; skipped when memcached is not installed).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "storage/tier_manager.h"
#include "tests/memcached_server.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using prefixd::testing::TempDir;

namespace {

const Hash128 kFingerprint{42, 43};
const BlockGeometry kGeom{4, 2, 2, 8, kKvDtypeF16};  // 640-byte records
constexpr uint64_t kRecordBytes = 640;
constexpr uint64_t kNs = 0x5EED;

// A prompt of n_blocks full blocks with a fake (but chained) hash per block.
struct Chain {
  ChainQuery query;
  std::vector<RecordPtr> records;  // [n_blocks]
};

Chain make_chain(const TierManager& tm, int n_blocks, int32_t first_token = 100) {
  Chain c;
  c.query.namespace_seed = kNs;
  Hash128 parent{};
  for (int i = 0; i < n_blocks; ++i) {
    const Hash128 h{parent.lo * 31 + 1000 + static_cast<uint64_t>(first_token + i),
                    static_cast<uint64_t>(i)};
    std::vector<int32_t> tokens;
    for (int t = 0; t < kGeom.block_size; ++t) tokens.push_back(first_token + i * 4 + t);
    auto rec = tm.start_record(kNs, h, parent, tokens);
    REQUIRE(rec != nullptr);
    uint8_t* payload = block_record_payload(*rec);  // (2 layers, K/V, 4, 2, 8) f16 bytes
    for (uint64_t j = 0; j < kGeom.payload_bytes(); ++j) payload[j] = static_cast<uint8_t>(i + j);
    seal_block_record(*rec);
    c.query.hashes.push_back(h);
    c.query.token_ids.insert(c.query.token_ids.end(), tokens.begin(), tokens.end());
    c.records.push_back(rec);
    parent = h;
  }
  return c;
}

BlockKey key_of(const Chain& c, int i) { return BlockKey{kNs, c.query.hashes[i]}; }

std::unique_ptr<TierManager> make_tm(const std::string* disk_path, WritePolicy policy,
                                     uint64_t host_capacity = 1 << 20,
                                     uint64_t disk_capacity = 1 << 20, int32_t n_io_threads = 2) {
  TierManagerOptions o;
  o.n_io_threads = n_io_threads;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.host_capacity_bytes = host_capacity;
  o.write_policy = policy;
  if (disk_path != nullptr) {
    DiskTierOptions d;
    d.path = *disk_path;
    d.capacity_bytes = disk_capacity;
    o.disk = d;
  }
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  return std::move(tm).value();
}

OnboardCompletion onboard(TierManager& tm, uint64_t request_id, const ChainQuery& q) {
  tm.request_onboard(request_id, q);
  tm.wait_idle();
  auto done = tm.poll_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].request_id == request_id);
  return std::move(done[0]);
}

bool same_bytes(const RecordPtr& a, const RecordPtr& b) {
  return a && b && a->size() == b->size() && std::memcmp(a->data(), b->data(), a->size()) == 0;
}

}  // namespace

TEST_CASE("write_through_sends_published_blocks_to_host_and_disk") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  CHECK(tm->record_bytes() == kRecordBytes);
  const Chain c = make_chain(*tm, 3);
  for (int i = 0; i < 3; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  tm->wait_idle();
  const TierManagerStats s = tm->stats();
  CHECK(s.host.blocks == 3);
  CHECK(s.disk.blocks == 3);
  CHECK(s.offload_host_blocks == 3);
  CHECK(s.offload_disk_blocks == 3);
  CHECK(s.offload_disk_bytes == 3 * kRecordBytes);
  CHECK(s.pending_offload_bytes == 0);
  for (int i = 0; i < 3; ++i) CHECK(tm->disk()->contains(key_of(c, i)));
}

TEST_CASE("evict_only_ignores_published_blocks_and_keeps_evicted_ones_in_host") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kEvictOnly, /*host_capacity=*/2 * kRecordBytes);
  const Chain c = make_chain(*tm, 3);
  tm->offload(key_of(c, 0), c.records[0], OffloadReason::kPublished);
  tm->wait_idle();
  CHECK(tm->stats().host.blocks == 0);
  CHECK(tm->stats().disk.blocks == 0);
  tm->offload(key_of(c, 0), c.records[0], OffloadReason::kEvicted);
  tm->offload(key_of(c, 1), c.records[1], OffloadReason::kEvicted);
  tm->wait_idle();
  CHECK(tm->stats().host.blocks == 2);
  CHECK(tm->stats().disk.blocks == 0);
  // A third block pushes the oldest out of host and down to disk.
  tm->offload(key_of(c, 2), c.records[2], OffloadReason::kEvicted);
  tm->wait_idle();
  CHECK(tm->disk()->contains(key_of(c, 0)));
  CHECK_FALSE(tm->host().contains(key_of(c, 0)));
  CHECK(tm->stats().disk.blocks == 1);
  CHECK(tm->stats().offload_disk_blocks == 1);
}

TEST_CASE("write_through_host_eviction_does_not_write_disk_twice") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough, /*host_capacity=*/kRecordBytes);
  const Chain c = make_chain(*tm, 3);
  for (int i = 0; i < 3; ++i) {
    tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
    tm->wait_idle();
  }
  CHECK(tm->stats().disk.inserts == 3);
  CHECK(tm->stats().host.blocks == 1);
}

TEST_CASE("lookup_chain_counts_leading_blocks_by_tier") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kEvictOnly);
  const Chain c = make_chain(*tm, 4);
  tm->offload(key_of(c, 0), c.records[0], OffloadReason::kEvicted);
  tm->offload(key_of(c, 1), c.records[1], OffloadReason::kEvicted);
  REQUIRE(tm->disk()->put(key_of(c, 2), c.records[2]->bytes()).ok());
  ChainLookup found = tm->lookup_chain(c.query);
  CHECK(found.n_blocks == 3);
  CHECK(found.n_host == 2);
  CHECK(found.n_disk == 1);
  CHECK(found.tiers ==
        std::vector<StorageTier>{StorageTier::kHost, StorageTier::kHost, StorageTier::kDisk});
  // The walk stops at the first gap even when later blocks are present.
  tm->offload(key_of(c, 3), c.records[3], OffloadReason::kEvicted);
  tm->host().erase(key_of(c, 1));
  found = tm->lookup_chain(c.query);
  CHECK(found.n_blocks == 1);
  // Host records are checked against the prompt's tokens (a collision is a miss).
  ChainQuery wrong = c.query;
  wrong.token_ids[0] += 1;
  CHECK(tm->lookup_chain(wrong).n_blocks == 0);
  // A chain that starts mid-prompt carries its first parent.
  ChainQuery tail;
  tail.namespace_seed = kNs;
  tail.first_parent = c.query.hashes[1];
  tail.hashes = {c.query.hashes[2], c.query.hashes[3]};
  tail.token_ids.assign(c.query.token_ids.begin() + 8, c.query.token_ids.end());
  found = tm->lookup_chain(tail);
  CHECK(found.n_disk == 1);
  CHECK(found.n_host == 1);
}

TEST_CASE("onboarding_from_disk_returns_the_exact_records_and_fills_host") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  std::atomic<int> n_notified{0};
  tm->set_completion_notifier([&] { ++n_notified; });
  const Chain c = make_chain(*tm, 4);
  for (int i = 0; i < 4; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  tm->wait_idle();
  tm->host().clear();
  CHECK(tm->lookup_chain(c.query).n_disk == 4);
  CHECK(tm->poll_completions().empty());
  OnboardCompletion done = onboard(*tm, 7, c.query);
  CHECK(n_notified == 1);
  CHECK(done.n_requested == 4);
  REQUIRE(done.records.size() == 4);
  CHECK(done.n_from_disk == 4);
  CHECK(done.n_from_host == 0);
  CHECK(done.disk_bytes == 4 * kRecordBytes);
  for (int i = 0; i < 4; ++i) CHECK(same_bytes(done.records[i], c.records[i]));
  // Now in host as well: the next onboard is served from host.
  CHECK(tm->lookup_chain(c.query).n_host == 4);
  done = onboard(*tm, 8, c.query);
  CHECK(done.n_from_host == 4);
  CHECK(done.host_bytes == 4 * kRecordBytes);
  for (int i = 0; i < 4; ++i) CHECK(same_bytes(done.records[i], c.records[i]));
  const TierManagerStats s = tm->stats();
  CHECK(s.onboard_requests == 2);
  CHECK(s.onboard_disk_blocks == 4);
  CHECK(s.onboard_host_blocks == 4);
  CHECK(s.onboard_bytes == 8 * kRecordBytes);
}

TEST_CASE("onboarding_stops_at_a_corrupt_disk_record_and_counts_it") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  const Chain c = make_chain(*tm, 4);
  for (int i = 0; i < 4; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  tm->wait_idle();
  tm->host().clear();
  std::vector<uint8_t> bytes(c.records[2]->data(), c.records[2]->data() + kRecordBytes);
  bytes[kRecordBytes - 1] ^= 1;
  REQUIRE(tm->disk()->debug_overwrite_value(key_of(c, 2), bytes).ok());
  const OnboardCompletion done = onboard(*tm, 1, c.query);
  REQUIRE(done.records.size() == 2);
  CHECK(same_bytes(done.records[1], c.records[1]));
  CHECK(tm->stats().disk.corrupt_records == 1);
  CHECK_FALSE(tm->disk()->contains(key_of(c, 2)));
  CHECK(tm->lookup_chain(c.query).n_blocks == 2);
}

TEST_CASE("onboarding_with_other_tokens_is_a_miss_never_a_wrong_block") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  const Chain c = make_chain(*tm, 3);
  for (int i = 0; i < 3; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  tm->wait_idle();
  ChainQuery collided = c.query;
  collided.token_ids[4 + 2] = -1;  // block 1 has the same hash but other tokens
  // From host: block 1 is rejected (and dropped from host); disk holds the
  // same record under the same key, rejected and deleted too.
  const OnboardCompletion done = onboard(*tm, 2, collided);
  CHECK(done.records.size() == 1);
  CHECK(tm->stats().disk.corrupt_records == 1);
}

TEST_CASE("onboarding_without_disk_serves_host_only") {
  auto tm = make_tm(nullptr, WritePolicy::kWriteThrough);
  CHECK_FALSE(tm->has_disk());
  const Chain c = make_chain(*tm, 3);
  tm->offload(key_of(c, 0), c.records[0], OffloadReason::kPublished);
  tm->offload(key_of(c, 1), c.records[1], OffloadReason::kPublished);
  tm->wait_idle();
  const OnboardCompletion done = onboard(*tm, 3, c.query);
  CHECK(done.records.size() == 2);
  CHECK(done.n_from_host == 2);
  CHECK(tm->stats().offload_disk_blocks == 0);
}

TEST_CASE("many_onboards_each_get_exactly_one_completion") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  const Chain c = make_chain(*tm, 2);
  for (int i = 0; i < 2; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  for (uint64_t r = 0; r < 50; ++r) tm->request_onboard(r, c.query);
  tm->wait_idle();
  auto done = tm->poll_completions();
  REQUIRE(done.size() == 50);
  std::vector<int> seen(50, 0);
  for (const auto& d : done) {
    ++seen[d.request_id];
    CHECK(d.records.size() == 2);
  }
  CHECK(seen == std::vector<int>(50, 1));
  CHECK(tm->poll_completions().empty());
}

TEST_CASE("clear_empties_host_and_disk") {
  TempDir dir;
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  const Chain c = make_chain(*tm, 3);
  for (int i = 0; i < 3; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  REQUIRE(tm->clear().ok());
  tm->wait_idle();
  CHECK(tm->lookup_chain(c.query).n_blocks == 0);
  CHECK(tm->stats().host.blocks == 0);
  CHECK(tm->stats().disk.blocks == 0);
  CHECK(onboard(*tm, 1, c.query).records.empty());
}

TEST_CASE("disk_blocks_and_secret_survive_a_tier_manager_restart") {
  TempDir dir;
  std::array<uint8_t, 16> secret;
  ChainQuery query;
  std::vector<RecordPtr> records;
  {
    auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
    secret = tm->deployment_secret();
    const Chain c = make_chain(*tm, 5);
    for (int i = 0; i < 5; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
    query = c.query;
    records = c.records;
    // No wait_idle: the destructor finishes queued disk writes.
  }
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
  CHECK(tm->deployment_secret() == secret);
  const ChainLookup found = tm->lookup_chain(query);
  CHECK(found.n_disk == 5);
  CHECK(found.n_host == 0);
  const OnboardCompletion done = onboard(*tm, 9, query);
  REQUIRE(done.records.size() == 5);
  for (int i = 0; i < 5; ++i) CHECK(same_bytes(done.records[i], records[i]));
}

TEST_CASE("other_model_fingerprint_on_the_same_directory_gets_no_blocks") {
  TempDir dir;
  ChainQuery query;
  {
    auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);
    const Chain c = make_chain(*tm, 2);
    for (int i = 0; i < 2; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
    query = c.query;
  }
  TierManagerOptions o;
  o.model_fingerprint = Hash128{1, 1};
  o.geometry = kGeom;
  DiskTierOptions d;
  d.path = dir.path;
  o.disk = d;
  auto tm = std::move(TierManager::create(o)).value();
  // Same namespace id on purpose (the engine would derive another one): the
  // records still fail the fingerprint check.
  const OnboardCompletion done = onboard(*tm, 1, query);
  CHECK(done.records.empty());
  CHECK(tm->stats().disk.corrupt_records == 1);
}

TEST_CASE("write_policy_names_parse") {
  CHECK(parse_write_policy("write-through").value() == WritePolicy::kWriteThrough);
  CHECK(parse_write_policy("evict-only").value() == WritePolicy::kEvictOnly);
  CHECK_FALSE(parse_write_policy("sometimes").ok());
  CHECK(std::string(write_policy_name(WritePolicy::kEvictOnly)) == "evict-only");
}

TEST_CASE("published records are built off the engine thread (offload thread or wait_builds' caller): filled, sealed, stored, then done") {
  TempDir dir;
  const std::string path = dir.path + "/db";
  auto tm = make_tm(&path, WritePolicy::kWriteThrough);
  const Chain c = make_chain(*tm, 3);
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    const Hash128 parent = i == 0 ? Hash128{} : c.query.hashes[i - 1];
    const std::span<const int32_t> tokens(c.query.token_ids.data() + i * kGeom.block_size, kGeom.block_size);
    const RecordPtr expected = c.records[i];
    CHECK(tm->offload_published_later(
        kNs, c.query.hashes[i], parent, tokens,
        [expected](uint8_t* payload) {
          std::memcpy(payload, expected->data() + expected->size() - kGeom.payload_bytes(), kGeom.payload_bytes());
        },
        [&done] { done.fetch_add(1); }));
  }
  tm->wait_builds();
  CHECK(done.load() == 3);
  tm->wait_idle();
  // The records the thread built are byte for byte the ones built here, and on both tiers.
  const OnboardCompletion got = onboard(*tm, 7, c.query);
  REQUIRE(got.records.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(got.records[i]->size() == c.records[i]->size());
    CHECK(std::memcmp(got.records[i]->data(), c.records[i]->data(), c.records[i]->size()) == 0);
    CHECK(tm->disk()->contains(key_of(c, i)));
  }
  CHECK(tm->stats().builds_deferred == 3);
  CHECK(tm->stats().builds_refused == 0);
}

TEST_CASE("deferred builds are refused over their byte bound and under evict-only") {
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.max_pending_build_bytes = kRecordBytes;  // one record waiting at most
  auto tm = std::move(TierManager::create(o)).value();
  const Chain c = make_chain(*tm, 2);
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  auto tokens = [&](int i) {
    return std::span<const int32_t>(c.query.token_ids.data() + i * kGeom.block_size, kGeom.block_size);
  };
  // The first build blocks in its fill until released, so the second finds the bound reached.
  CHECK(tm->offload_published_later(
      kNs, c.query.hashes[0], Hash128{}, tokens(0),
      [&](uint8_t*) {
        for (int i = 0; i < 5000 && !release.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      [&] { done.fetch_add(1); }));
  CHECK_FALSE(tm->offload_published_later(kNs, c.query.hashes[1], c.query.hashes[0], tokens(1),
                                          [](uint8_t*) {}, [&] { done.fetch_add(1); }));
  CHECK(tm->stats().builds_refused == 1);
  release.store(true);
  tm->wait_builds();
  CHECK(done.load() == 1);  // a refused build never calls done: the caller builds it itself

  o.max_pending_build_bytes = 64 << 20;
  o.write_policy = WritePolicy::kEvictOnly;
  auto evict_only = std::move(TierManager::create(o)).value();
  CHECK_FALSE(evict_only->offload_published_later(kNs, c.query.hashes[0], Hash128{}, tokens(0),
                                                  [](uint8_t*) {}, [] {}));
}

namespace {

// Queues a build whose fill blocks until `release`, and waits (bounded) until
// an I/O thread runs it: that thread is then busy, and what is queued next waits.
// Callers use one I/O thread: it runs at normal priority (with two, the disk
// writer runs at idle priority, which a busy machine may not run for seconds).
void occupy_io_thread(TierManager& tm, const Chain& c, std::atomic<bool>& entered,
                      std::atomic<bool>& release, std::atomic<int>& fills, std::atomic<int>& dones) {
  const std::span<const int32_t> tokens(c.query.token_ids.data(), kGeom.block_size);
  REQUIRE(tm.offload_published_later(
      kNs, c.query.hashes[0], Hash128{}, tokens,
      [&](uint8_t*) {
        fills.fetch_add(1);
        entered.store(true);
        for (int i = 0; i < 10000 && !release.load(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      [&] { dones.fetch_add(1); }));
  for (int i = 0; i < 10000 && !entered.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(entered.load());
}

}  // namespace

TEST_CASE("shutdown drain: queued disk writes past the deadline are dropped and counted, none lost silently") {
  TempDir dir;
  const std::string path = dir.path + "/db";
  auto tm = make_tm(&path, WritePolicy::kWriteThrough, 1 << 20, 1 << 20, /*n_io_threads=*/1);
  const Chain busy = make_chain(*tm, 1, 10);
  const Chain c = make_chain(*tm, 20, 500);
  std::atomic<bool> entered{false}, release{false};
  std::atomic<int> fills{0}, dones{0};
  occupy_io_thread(*tm, busy, entered, release, fills, dones);
  for (int i = 0; i < 20; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
  tm->begin_shutdown(std::chrono::steady_clock::now() - std::chrono::seconds(1));
  release.store(true);
  tm->wait_builds();
  const ShutdownDrain d = tm->drain_for_shutdown();
  CHECK(fills.load() == 1);
  CHECK(dones.load() == 1);
  // The 20 queued writes and the busy build's own record: all dropped, none written.
  CHECK(d.dropped_records == 21);
  CHECK(d.records_written == 0);
  CHECK(d.dropped_builds == 0);
  CHECK(tm->stats().shutdown_dropped_records == 21);
  for (int i = 0; i < 20; ++i) CHECK_FALSE(tm->disk()->contains(key_of(c, i)));
  // Host RAM still took them (in memory, not part of the drain).
  CHECK(tm->host().stats().blocks == 21);
}

TEST_CASE("shutdown drain: builds past the deadline call done without fill; a far deadline drops nothing") {
  TempDir dir;
  const std::string path = dir.path + "/db";
  SUBCASE("deadline passed") {
    auto tm = make_tm(&path, WritePolicy::kWriteThrough, 1 << 20, 1 << 20, /*n_io_threads=*/1);
    const Chain busy = make_chain(*tm, 1, 10);
    const Chain c = make_chain(*tm, 5, 500);
    std::atomic<bool> entered{false}, release{false};
    std::atomic<int> fills{0}, dones{0};
    occupy_io_thread(*tm, busy, entered, release, fills, dones);
    for (int i = 0; i < 5; ++i) {
      const std::span<const int32_t> tokens(c.query.token_ids.data() + i * kGeom.block_size,
                                            kGeom.block_size);
      REQUIRE(tm->offload_published_later(
          kNs, c.query.hashes[i], i == 0 ? Hash128{} : c.query.hashes[i - 1], tokens,
          [&](uint8_t*) { fills.fetch_add(1); }, [&] { dones.fetch_add(1); }));
    }
    tm->begin_shutdown(std::chrono::steady_clock::now() - std::chrono::seconds(1));
    release.store(true);
    tm->wait_builds();
    CHECK(fills.load() == 1);  // the busy build only
    CHECK(dones.load() == 6);  // every build's done, dropped ones included
    const ShutdownDrain d = tm->drain_for_shutdown();
    CHECK(d.dropped_builds == 5);
    CHECK(d.dropped_records == 1);
  }
  SUBCASE("deadline far away") {
    auto tm = make_tm(&path, WritePolicy::kWriteThrough);
    const Chain c = make_chain(*tm, 30, 500);
    for (int i = 0; i < 30; ++i) tm->offload(key_of(c, i), c.records[i], OffloadReason::kPublished);
    tm->begin_shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(600));
    tm->wait_builds();
    const ShutdownDrain d = tm->drain_for_shutdown();
    CHECK(d.dropped_records == 0);
    CHECK(d.dropped_builds == 0);
    for (int i = 0; i < 30; ++i) CHECK(tm->disk()->contains(key_of(c, i)));
    CHECK(tm->stats().offload_disk_blocks == 30);
  }
}

// ---- with a remote tier (real memcached servers; skipped without memcached) --

namespace {

const std::array<uint8_t, 16> kSecret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const bool kNoMemcached = !prefixd::testing::memcached_installed();

// A chain of n blocks as the engine would publish them (chained hashes).
std::vector<std::pair<BlockKey, RecordPtr>> published_chain(const TierManager& tm, int n, ChainQuery* q) {
  std::vector<std::pair<BlockKey, RecordPtr>> out;
  q->namespace_seed = 77;
  Hash128 parent{};
  for (int i = 0; i < n; ++i) {
    const Hash128 h{0xABC0 + static_cast<uint64_t>(i) * 7 + parent.lo, static_cast<uint64_t>(i)};
    std::vector<int32_t> tokens;
    for (int t = 0; t < kGeom.block_size; ++t) tokens.push_back(500 + i * kGeom.block_size + t);
    auto rec = tm.start_record(q->namespace_seed, h, parent, tokens);
    REQUIRE(rec != nullptr);
    uint8_t* payload = block_record_payload(*rec);
    for (uint64_t j = 0; j < kGeom.payload_bytes(); ++j) payload[j] = static_cast<uint8_t>(3 * i + j);
    seal_block_record(*rec);
    q->hashes.push_back(h);
    q->token_ids.insert(q->token_ids.end(), tokens.begin(), tokens.end());
    out.emplace_back(BlockKey{q->namespace_seed, h}, rec);
    parent = h;
  }
  return out;
}

std::unique_ptr<TierManager> tier_manager(const std::vector<RemoteServer>& servers,
                                          const std::array<uint8_t, 16>& secret, const std::string& disk_dir) {
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.deployment_secret = secret;
  if (!disk_dir.empty()) {
    DiskTierOptions d;
    d.path = disk_dir;
    o.disk = d;
  }
  RemoteTierOptions r;
  r.servers = servers;
  r.deployment_secret = kSecret;
  r.record_bytes = block_record_bytes(kGeom);
  r.timeout = std::chrono::milliseconds(200);
  r.failure_limit = 2;
  r.retry_interval = std::chrono::milliseconds(1000);
  o.remote = r;
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  return std::move(tm).value();
}

OnboardCompletion onboard_once(TierManager& tm, uint64_t id, const ChainQuery& q) {
  tm.request_onboard(id, q);
  tm.wait_idle();
  std::vector<OnboardCompletion> done = tm.poll_completions();
  REQUIRE(done.size() == 1);
  return std::move(done[0]);
}

}  // namespace

TEST_CASE("tier_manager_onboards_another_replicas_blocks_from_the_remote_tier_into_host_and_disk" *
          doctest::skip(kNoMemcached)) {
  prefixd::testing::MemcachedServer a, b;
  const std::vector<RemoteServer> pool = {a.server(), b.server()};
  TempDir disk1, disk2;
  auto writer = tier_manager(pool, kSecret, disk1.path);
  ChainQuery q;
  const auto chain = published_chain(*writer, 6, &q);
  for (const auto& [key, rec] : chain) writer->offload(key, rec, OffloadReason::kPublished);
  writer->wait_idle();  // host, disk and the remote tier's writer
  CHECK(writer->stats().remote.writes == 6);

  // Another replica (its own host and disk) knows nothing locally: all six
  // are remote candidates, and one onboard brings them, checked, into its
  // host RAM and down to its disk.
  auto reader = tier_manager(pool, kSecret, disk2.path);
  const ChainLookup before = reader->lookup_chain(q);
  CHECK(before.n_blocks == 0);
  CHECK(before.n_remote_candidates == 6);
  // The HTTP path's lookup asks the pool (existence only, no values read):
  // all six; of a chain cut after three, three.
  std::vector<BlockKey> keys;
  for (const auto& kv : chain) keys.push_back(kv.first);
  std::string error = "unset";
  CHECK(reader->lookup_remote(keys, &error) == 6);
  CHECK(error.empty());
  std::vector<BlockKey> gap = keys;
  gap[3].block_hash.hi ^= 0xFFFF;
  CHECK(reader->lookup_remote(gap) == 3);
  CHECK(reader->stats().remote.lookup_hits == 9);
  CHECK(reader->stats().remote.lookup_misses == 3);
  CHECK(reader->stats().remote.read_bytes == 0);
  const OnboardCompletion c = onboard_once(*reader, 1, q);
  CHECK(c.n_from_remote == 6);
  CHECK(c.n_from_host + c.n_from_disk == 0);
  CHECK(c.remote_bytes == 6 * block_record_bytes(kGeom));
  CHECK(c.remote_seconds > 0);
  REQUIRE(c.records.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(same_bytes(c.records[i], chain[i].second));
  const ChainLookup after = reader->lookup_chain(q);
  CHECK(after.n_host == 6);
  CHECK(after.n_remote_candidates == 0);
  for (const auto& kv : chain) CHECK(reader->disk()->contains(kv.first));
  CHECK(reader->stats().onboard_remote_blocks == 6);

  // A chain the pool does not hold: nothing, and the round trip is reported.
  ChainQuery other = q;
  for (Hash128& h : other.hashes) h.hi ^= 0xFFFF;
  const OnboardCompletion miss = onboard_once(*reader, 2, other);
  CHECK(miss.records.empty());
  CHECK(miss.remote_miss_seconds > 0);

  // A replica under another secret: the values' MACs fail; rejected, counted, none served.
  std::array<uint8_t, 16> other_secret = kSecret;
  other_secret[0] ^= 1;
  auto stranger = tier_manager(pool, other_secret, "");
  const OnboardCompletion none = onboard_once(*stranger, 3, q);
  CHECK(none.records.empty());
  CHECK(stranger->stats().remote.unauthenticated_records == 1);  // the first; the walk stops there
}

TEST_CASE("tier_manager_refuses_a_remote_tier_without_a_deployment_secret" *
          doctest::skip(kNoMemcached)) {
  prefixd::testing::MemcachedServer a;
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  RemoteTierOptions r;
  r.servers = {a.server()};
  r.deployment_secret = kSecret;
  r.record_bytes = block_record_bytes(kGeom);
  o.remote = r;
  auto tm = TierManager::create(o);
  REQUIRE_FALSE(tm.ok());
  CHECK_MESSAGE(tm.message().find("--cache-secret-file") != std::string::npos, tm.message());
}
