// Tests for recurrent-state snapshots in the tiers (storage/state_snapshot.h,
// TierManager::offload_snapshot / has_snapshot / read_snapshot): round trips
// through host, disk after host eviction, disk after a restart and the remote
// tier (real memcached; skipped when it is not installed); page counts at and
// around a page; every kind of bad page a counted miss, never data; pages and
// KV blocks never taken for each other; random page corruption.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "storage/tier_manager.h"
#include "tests/memcached_server.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using prefixd::testing::TempDir;

namespace {

const Hash128 kFingerprint{42, 43};
const BlockGeometry kGeom{4, 2, 2, 8, kKvDtypeF16};  // 640-byte records, 512-byte payload
constexpr uint64_t kRecordBytes = 640;
constexpr uint64_t kPage = 512 - kSnapshotPageHeaderBytes;  // 448 state bytes a page
constexpr uint64_t kNs = 0x5EED;
const BlockKey kKey{kNs, Hash128{0x1234, 0x5678}};

std::vector<uint8_t> state_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);  // [n] stand-in for F32 state bytes
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::unique_ptr<TierManager> make_tm(const std::string* disk_path, WritePolicy policy,
                                     uint64_t host_capacity = 1 << 20,
                                     const Hash128& fingerprint = kFingerprint) {
  TierManagerOptions o;
  o.model_fingerprint = fingerprint;
  o.geometry = kGeom;
  o.host_capacity_bytes = host_capacity;
  o.write_policy = policy;
  if (disk_path != nullptr) {
    DiskTierOptions d;
    d.path = *disk_path;
    d.capacity_bytes = 1 << 20;
    o.disk = d;
  }
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  return std::move(tm).value();
}

// A copy of a record (the tiers' are immutable) to damage.
std::shared_ptr<RecordBuffer> copy_of(const RecordPtr& r) {
  auto c = RecordBuffer::allocate(r->size(), default_host_allocator());
  std::memcpy(c->mutable_data(), r->data(), r->size());
  return c;
}

}  // namespace

TEST_CASE("page_format_counts_keys_and_kinds") {
  CHECK(snapshot_page_capacity(kGeom) == kPage);
  CHECK(snapshot_page_count(kGeom, 0) == 0);
  CHECK(snapshot_page_count(kGeom, 1) == 1);
  CHECK(snapshot_page_count(kGeom, kPage) == 1);
  CHECK(snapshot_page_count(kGeom, kPage + 1) == 2);
  CHECK(snapshot_page_count(kGeom, 3 * kPage) == 3);
  // Keys differ by index, size, namespace and snapshot; none is the key's own hash.
  CHECK(snapshot_page_hash(kKey, 0, 100) != snapshot_page_hash(kKey, 1, 100));
  CHECK(snapshot_page_hash(kKey, 0, 100) != snapshot_page_hash(kKey, 0, 101));
  CHECK(snapshot_page_hash(kKey, 0, 100) != snapshot_page_hash(BlockKey{kNs + 1, kKey.block_hash}, 0, 100));
  CHECK(snapshot_page_hash(kKey, 0, 100) != kKey.block_hash);
  const auto state = state_bytes(1000, 1);
  const auto pages = encode_snapshot_pages(kFingerprint, kGeom, kKey, state, default_host_allocator());
  REQUIRE(pages.size() == 3);
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(pages[i]->size() == kRecordBytes);  // the same slot as a KV block
    uint64_t content = 0;
    CHECK(check_snapshot_page(pages[i]->bytes(), kFingerprint, kGeom, kKey, i, 1000, &content) ==
          SnapshotCheck::kOk);
    CHECK(check_snapshot_page(pages[i]->bytes(), kFingerprint, kGeom, kKey, (i + 1) % 3, 1000, nullptr) ==
          SnapshotCheck::kDamaged);
    CHECK(check_snapshot_page(pages[i]->bytes(), Hash128{1, 1}, kGeom, kKey, i, 1000, nullptr) ==
          SnapshotCheck::kOtherModel);
  }
  std::vector<uint8_t> back;
  CHECK(assemble_snapshot(pages, 1000, &back) == SnapshotCheck::kOk);
  CHECK(back == state);
}

TEST_CASE("round_trip_through_host_below_at_and_above_a_page") {
  auto tm = make_tm(nullptr, WritePolicy::kWriteThrough);
  int n_ok = 0;
  for (size_t n : {size_t{1}, size_t{100}, size_t{kPage}, size_t{3 * kPage}, size_t{3 * kPage + 1}}) {
    const BlockKey key{kNs, Hash128{n, 9}};
    const auto state = state_bytes(n, static_cast<uint32_t>(n));
    CHECK_FALSE(tm->has_snapshot(key, n));
    tm->offload_snapshot(key, state, OffloadReason::kPublished);
    CHECK(tm->has_snapshot(key, n));
    auto got = tm->read_snapshot(key, n);
    REQUIRE_MESSAGE(got.ok(), got.message());
    CHECK(got.value() == state);
    ++n_ok;
  }
  const TierManagerStats s = tm->stats();
  CHECK(s.snapshots_offloaded == 5);
  CHECK(s.snapshot_pages_host_written == 1 + 1 + 1 + 3 + 4);
  CHECK(s.snapshot_pages_host_read == 10);
  CHECK(s.snapshot_reads_ok == static_cast<uint64_t>(n_ok));
  CHECK(s.host.blocks == 10);
  CHECK(s.host.used_bytes == 10 * kRecordBytes);  // pages count in usage like blocks
}

TEST_CASE("published_snapshot_is_dropped_under_evict_only_and_evicted_one_kept") {
  auto tm = make_tm(nullptr, WritePolicy::kEvictOnly);
  const auto state = state_bytes(500, 3);
  tm->offload_snapshot(kKey, state, OffloadReason::kPublished);
  CHECK_FALSE(tm->has_snapshot(kKey, 500));
  tm->offload_snapshot(kKey, state, OffloadReason::kEvicted);
  CHECK(tm->has_snapshot(kKey, 500));
  CHECK(tm->read_snapshot(kKey, 500).value() == state);
}

TEST_CASE("read_from_disk_after_host_eviction_and_after_a_restart") {
  TempDir dir;
  const auto state = state_bytes(5 * kPage - 7, 5);  // 5 pages
  {
    auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough, 2 * kRecordBytes);
    tm->offload_snapshot(kKey, state, OffloadReason::kPublished);
    tm->wait_idle();
    CHECK(tm->stats().host.blocks == 2);  // three pages evicted from host
    CHECK(tm->stats().snapshot_pages_disk_queued == 5);
    CHECK(tm->has_snapshot(kKey, state.size()));
    auto got = tm->read_snapshot(kKey, state.size());
    REQUIRE_MESSAGE(got.ok(), got.message());
    CHECK(got.value() == state);
    CHECK(tm->stats().snapshot_pages_disk_read >= 3);
    CHECK(tm->stats().disk.blocks == 5);
  }
  {
    auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough);  // restart: empty host
    CHECK(tm->has_snapshot(kKey, state.size()));
    auto got = tm->read_snapshot(kKey, state.size());
    REQUIRE_MESSAGE(got.ok(), got.message());
    CHECK(got.value() == state);
    CHECK(tm->stats().snapshot_pages_disk_read == 5);
    CHECK(tm->stats().host.blocks == 5);  // onboarded into host
    auto again = tm->read_snapshot(kKey, state.size());
    CHECK(tm->stats().snapshot_pages_host_read == 5);
  }
  {
    // Evict-only: pages reach disk only through host eviction.
    TempDir dir2;
    auto tm = make_tm(&dir2.path, WritePolicy::kEvictOnly, 2 * kRecordBytes);
    tm->offload_snapshot(kKey, state, OffloadReason::kEvicted);
    tm->wait_idle();
    auto got = tm->read_snapshot(kKey, state.size());
    REQUIRE_MESSAGE(got.ok(), got.message());
    CHECK(got.value() == state);
  }
}

TEST_CASE("bad_pages_on_disk_are_counted_misses") {
  TempDir dir;
  const size_t n = 3 * kPage;
  const auto state = state_bytes(n, 7);
  auto tm = make_tm(&dir.path, WritePolicy::kWriteThrough, 0);  // host off: every read from disk
  const auto pages = encode_snapshot_pages(kFingerprint, kGeom, kKey, state, default_host_allocator());
  auto store = [&] {
    tm->offload_snapshot(kKey, state, OffloadReason::kPublished);
    tm->wait_idle();
    REQUIRE(tm->read_snapshot(kKey, n).ok());
  };
  store();
  const BlockKey p1 = snapshot_page_key(kKey, 1, n);
  uint64_t damaged = 0;
  SUBCASE("a flipped byte (signed anew, so the record checksum catches it)") {
    auto bad = copy_of(pages[1]);
    bad->mutable_data()[kRecordBytes - 3] ^= 0x10;
    REQUIRE(tm->disk()->debug_overwrite_signed(p1, bad->bytes()).ok());
    damaged = 1;
  }
  SUBCASE("a flipped byte under the old MAC") {
    auto bad = copy_of(pages[1]);
    bad->mutable_data()[200] ^= 0x01;
    std::vector<uint8_t> value(bad->data(), bad->data() + bad->size());
    value.resize(value.size() + RecordMac::kTrailerBytes, 0);
    REQUIRE(tm->disk()->debug_overwrite_value(p1, value).ok());
    damaged = 1;
  }
  SUBCASE("a truncated page") {
    REQUIRE(tm->disk()->debug_overwrite_signed(p1, pages[1]->bytes().first(kRecordBytes - 40)).ok());
    damaged = 1;
  }
  SUBCASE("a page of another model") {
    const auto other = encode_snapshot_pages(Hash128{9, 9}, kGeom, kKey, state, default_host_allocator());
    REQUIRE(tm->disk()->debug_overwrite_signed(p1, other[1]->bytes()).ok());
    auto got = tm->read_snapshot(kKey, n);
    CHECK_FALSE(got.ok());
    CHECK(got.message().rfind("other_model", 0) == 0);
    CHECK(tm->stats().snapshot_reads_rejected_model == 1);
  }
  if (damaged != 0) {
    auto got = tm->read_snapshot(kKey, n);
    CHECK_FALSE(got.ok());
    CHECK(got.message().rfind("damaged", 0) == 0);
    CHECK(tm->stats().snapshot_reads_rejected_damaged == 1);
  }
  // The rejected snapshot's pages are gone; a new write is served again.
  CHECK_FALSE(tm->has_snapshot(kKey, n));
  CHECK(tm->read_snapshot(kKey, n).message().rfind("missing", 0) == 0);
  store();
  CHECK(tm->read_snapshot(kKey, n).value() == state);
}

TEST_CASE("wrong_size_mixed_writes_and_host_damage_are_counted_misses") {
  auto tm = make_tm(nullptr, WritePolicy::kWriteThrough);
  const size_t n = 3 * kPage;
  const auto a = state_bytes(n, 11);
  const auto b = state_bytes(n, 12);
  tm->offload_snapshot(kKey, a, OffloadReason::kPublished);
  // Wrong n_bytes: other page keys, a miss.
  CHECK_FALSE(tm->has_snapshot(kKey, n + 1));
  CHECK_FALSE(tm->read_snapshot(kKey, n + 1).ok());
  CHECK_FALSE(tm->read_snapshot(kKey, n - 1).ok());
  CHECK(tm->stats().snapshot_reads_missed == 2);
  CHECK(tm->read_snapshot(kKey, n).value() == a);
  // Pages of two writes under one key: page 1 replaced by b's.
  tm->host().erase(snapshot_page_key(kKey, 1, n));
  tm->offload_snapshot(kKey, b, OffloadReason::kPublished);  // only page 1 is new to host
  auto mixed = tm->read_snapshot(kKey, n);
  CHECK_FALSE(mixed.ok());
  CHECK(mixed.message().rfind("damaged", 0) == 0);
  CHECK(tm->stats().snapshot_reads_rejected_damaged == 1);
  tm->offload_snapshot(kKey, b, OffloadReason::kPublished);  // all pages were dropped: b whole
  CHECK(tm->read_snapshot(kKey, n).value() == b);
  // A page whose header says another total size (re-sealed, so only the page check sees it).
  const BlockKey p0 = snapshot_page_key(kKey, 0, n);
  auto bad = copy_of(tm->host().peek(p0));
  uint8_t* payload = block_record_payload(*bad);
  payload[32] ^= 1;  // total_bytes
  seal_block_record(*bad);
  tm->host().erase(p0);
  tm->host().insert(p0, bad);
  auto sized = tm->read_snapshot(kKey, n);
  CHECK(sized.message().rfind("wrong_size", 0) == 0);
  CHECK(tm->stats().snapshot_reads_rejected_size == 1);
}

TEST_CASE("pages_and_kv_blocks_are_never_taken_for_each_other") {
  auto tm = make_tm(nullptr, WritePolicy::kWriteThrough);
  const size_t n = 2 * kPage;
  const auto state = state_bytes(n, 21);
  tm->offload_snapshot(kKey, state, OffloadReason::kPublished);
  // A page key asked for as a block of a prompt (real tokens, a real
  // parent): no block, the page's parent and tokens differ.
  ChainQuery q;
  q.namespace_seed = kNs;
  q.hashes = {snapshot_page_hash(kKey, 0, n)};
  q.token_ids.assign(kGeom.block_size, 5);
  CHECK(tm->lookup_chain(q).n_blocks == 0);
  q.first_parent = kKey.block_hash;
  CHECK(tm->lookup_chain(q).n_blocks == 0);
  // A KV block under the snapshot's own key is not a snapshot, and a KV
  // record stored under a page key is rejected as a page.
  const BlockKey block_key{kNs, Hash128{77, 78}};
  std::vector<int32_t> tokens(kGeom.block_size, 3);
  auto rec = tm->start_record(kNs, block_key.block_hash, Hash128{}, tokens);
  std::memset(block_record_payload(*rec), 0x5A, kGeom.payload_bytes());
  seal_block_record(*rec);
  tm->offload(block_key, rec, OffloadReason::kPublished);
  CHECK_FALSE(tm->has_snapshot(block_key, kPage));
  CHECK_FALSE(tm->read_snapshot(block_key, kPage).ok());
  const BlockKey page_key = snapshot_page_key(block_key, 0, kPage);
  tm->host().insert(page_key, rec);
  CHECK(tm->has_snapshot(block_key, kPage));  // the probe sees a key...
  auto got = tm->read_snapshot(block_key, kPage);  // ...the read refuses the record
  CHECK_FALSE(got.ok());
  CHECK(got.message().rfind("damaged", 0) == 0);
  // The KV block itself is still a block.
  ChainQuery bq;
  bq.namespace_seed = kNs;
  bq.hashes = {block_key.block_hash};
  bq.token_ids = tokens;
  CHECK(tm->lookup_chain(bq).n_blocks == 1);
}

TEST_CASE("random_page_corruption_is_never_served") {
  auto tm = make_tm(nullptr, WritePolicy::kWriteThrough);
  const size_t n = 4 * kPage - 100;
  const auto state = state_bytes(n, 31);
  std::mt19937 rng(99);
  int rejected = 0;
  for (int it = 0; it < 300; ++it) {
    tm->offload_snapshot(kKey, state, OffloadReason::kPublished);
    const uint32_t page = rng() % 4;
    const BlockKey pk = snapshot_page_key(kKey, page, n);
    RecordPtr good = tm->host().peek(pk);
    REQUIRE(good != nullptr);
    auto bad = copy_of(good);
    const int n_flips = 1 + static_cast<int>(rng() % 3);
    // A quarter of the time the damage is in the payload (page header or
    // state bytes) and the checksums are made to match: the page checks and
    // the whole-content checksum must catch it. Otherwise anywhere, unsealed.
    const bool reseal = rng() % 4 == 0;
    const uint64_t first = reseal ? kRecordBytes - 512 : 0;
    for (int f = 0; f < n_flips; ++f) {
      bad->mutable_data()[first + rng() % (kRecordBytes - first)] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    if (reseal) seal_block_record(*bad);
    const bool same = std::memcmp(bad->data(), good->data(), kRecordBytes) == 0;
    tm->host().erase(pk);
    tm->host().insert(pk, bad);
    auto got = tm->read_snapshot(kKey, n);
    if (got.ok()) {
      CHECK(got.value() == state);  // only when the damage changed nothing the page holds
    } else {
      ++rejected;
      tm->host().erase(pk);  // (the read erased them; make sure before the rewrite)
    }
    if (same) CHECK(got.ok());
  }
  CHECK(rejected > 250);
  const TierManagerStats s = tm->stats();
  CHECK(s.snapshot_reads_rejected_damaged + s.snapshot_reads_rejected_size +
            s.snapshot_reads_rejected_model == static_cast<uint64_t>(rejected));
}

// ---- the remote tier (real memcached servers; skipped without memcached) ----

namespace {
const std::array<uint8_t, 16> kSecret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const bool kNoMemcached = !prefixd::testing::memcached_installed();

std::unique_ptr<TierManager> remote_tm(const std::vector<RemoteServer>& servers) {
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.deployment_secret = kSecret;
  RemoteTierOptions r;
  r.servers = servers;
  r.deployment_secret = kSecret;
  r.record_bytes = block_record_bytes(kGeom);
  r.timeout = std::chrono::milliseconds(500);
  r.failure_limit = 2;
  r.retry_interval = std::chrono::milliseconds(1000);
  o.remote = r;
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  return std::move(tm).value();
}
}  // namespace

TEST_CASE("another_replica_reads_a_snapshot_from_the_remote_tier" * doctest::skip(kNoMemcached)) {
  prefixd::testing::MemcachedServer a, b;
  const std::vector<RemoteServer> pool = {a.server(), b.server()};
  const size_t n = 3 * kPage + 5;
  const auto state = state_bytes(n, 41);
  auto writer = remote_tm(pool);
  writer->offload_snapshot(kKey, state, OffloadReason::kPublished);
  writer->wait_idle();
  CHECK(writer->stats().snapshot_pages_remote_queued == 4);
  auto reader = remote_tm(pool);
  CHECK(reader->has_snapshot(kKey, n));
  CHECK_FALSE(reader->has_snapshot(kKey, n + 1));
  auto got = reader->read_snapshot(kKey, n);
  REQUIRE_MESSAGE(got.ok(), got.message());
  CHECK(got.value() == state);
  CHECK(reader->stats().snapshot_pages_remote_read == 4);
  CHECK(reader->stats().host.blocks == 4);
  CHECK_FALSE(reader->read_snapshot(kKey, n + 1).ok());
  CHECK(reader->stats().snapshot_reads_missed == 1);
}
