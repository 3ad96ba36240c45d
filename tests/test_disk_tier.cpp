// Tests for DiskTier on a real RocksDB directory: round trip, restart,
// corruption through RocksDB, capacity with LRU, secret persistence, MAC
// refusals as the tier counts them (RecordMac itself: test_signed_record).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "storage/disk_tier.h"
#include "tests/temp_dir.h"
#include "tests/test_blocks.h"

using namespace prefixd;
using namespace prefixd::testing;  // TempDir, TestBlock, make_block

namespace {

std::unique_ptr<DiskTier> open_tier(const std::string& path, uint64_t capacity_bytes) {
  DiskTierOptions o;
  o.path = path;
  o.capacity_bytes = capacity_bytes;
  auto t = DiskTier::open(o);
  REQUIRE_MESSAGE(t.ok(), t.message());
  return std::move(t).value();
}

bool same_bytes(const RecordPtr& a, const RecordPtr& b) {
  return a && b && a->size() == b->size() && std::memcmp(a->data(), b->data(), a->size()) == 0;
}

const uint64_t kRecordBytes = 640;
// What the tier stores and counts per record: the record and its MAC trailer.
const uint64_t kStoredBytes = kRecordBytes + RecordMac::kTrailerBytes;

}  // namespace

TEST_CASE("disk_tier_put_then_get_returns_the_same_bytes") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock b = make_block(1);
  REQUIRE(b.record->size() == kRecordBytes);
  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  CHECK(tier->contains(b.key));
  const RecordExpectations e = b.expect();
  CHECK(same_bytes(tier->get(b.key, &e), b.record));
  CHECK(same_bytes(tier->get(b.key, nullptr), b.record));
  CHECK(tier->get(make_block(2).key, nullptr) == nullptr);
  const DiskTierStats s = tier->stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.blocks == 1);
  CHECK(s.used_bytes == kStoredBytes);
  CHECK(s.inserts == 1);
  CHECK(s.corrupt_records == 0);
}

TEST_CASE("disk_tier_records_and_secret_survive_reopen") {
  TempDir dir;
  std::array<uint8_t, 16> secret;
  {
    auto tier = open_tier(dir.path, 1 << 20);
    secret = tier->deployment_secret();
    CHECK(secret != std::array<uint8_t, 16>{});
    for (uint64_t i = 0; i < 20; ++i) REQUIRE(tier->put(make_block(i).key, make_block(i).record->bytes()).ok());
  }
  auto tier = open_tier(dir.path, 1 << 20);
  CHECK(tier->deployment_secret() == secret);
  CHECK(tier->stats().blocks == 20);
  CHECK(tier->stats().used_bytes == 20 * kStoredBytes);
  for (uint64_t i = 0; i < 20; ++i) {
    const TestBlock b = make_block(i);
    const RecordExpectations e = b.expect();
    CHECK(same_bytes(tier->get(b.key, &e), b.record));
  }
  TempDir other;
  CHECK(open_tier(other.path, 1 << 20)->deployment_secret() != secret);
}

TEST_CASE("disk_tier_corrupt_values_are_deleted_counted_and_missed") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock flipped = make_block(1);
  const TestBlock truncated = make_block(2);
  const TestBlock empty = make_block(3);
  for (const TestBlock* b : {&flipped, &truncated, &empty}) {
    REQUIRE(tier->put(b->key, b->record->bytes()).ok());
  }
  std::vector<uint8_t> bytes(flipped.record->data(), flipped.record->data() + kRecordBytes);
  bytes[400] ^= 0x10;  // a payload byte
  REQUIRE(tier->debug_overwrite_value(flipped.key, bytes).ok());
  REQUIRE(tier->debug_overwrite_value(truncated.key,
                                      truncated.record->bytes().first(kRecordBytes - 1))
              .ok());
  REQUIRE(tier->debug_overwrite_value(empty.key, {}).ok());
  const RecordExpectations e1 = flipped.expect();
  CHECK(tier->get(flipped.key, &e1) == nullptr);
  CHECK(tier->get(truncated.key, nullptr) == nullptr);
  CHECK(tier->get(empty.key, nullptr) == nullptr);
  DiskTierStats s = tier->stats();
  CHECK(s.corrupt_records == 3);
  CHECK(s.misses == 3);
  CHECK(s.blocks == 0);
  CHECK(s.used_bytes == 0);
  CHECK_FALSE(tier->contains(flipped.key));
  // Deleted: a second read is a plain miss, not another corrupt record.
  CHECK(tier->get(flipped.key, &e1) == nullptr);
  CHECK(tier->stats().corrupt_records == 3);
}

TEST_CASE("disk_tier_corruption_is_caught_after_reopen") {
  TempDir dir;
  const TestBlock b = make_block(5);
  {
    auto tier = open_tier(dir.path, 1 << 20);
    REQUIRE(tier->put(b.key, b.record->bytes()).ok());
    std::vector<uint8_t> bytes(b.record->data(), b.record->data() + kRecordBytes);
    bytes[120] ^= 0xFF;  // a token byte: header checksum
    REQUIRE(tier->debug_overwrite_value(b.key, bytes).ok());
  }
  auto tier = open_tier(dir.path, 1 << 20);
  CHECK(tier->contains(b.key));
  CHECK(tier->get(b.key, nullptr) == nullptr);
  CHECK(tier->stats().corrupt_records == 1);
  CHECK_FALSE(tier->contains(b.key));
}

TEST_CASE("disk_tier_record_stored_under_another_key_is_rejected") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock a = make_block(1);
  const TestBlock b = make_block(2);
  REQUIRE(tier->put(b.key, a.record->bytes()).ok());  // a's bytes under b's key
  CHECK(tier->get(b.key, nullptr) == nullptr);
  CHECK(tier->stats().corrupt_records == 1);
}

TEST_CASE("disk_tier_wrong_fingerprint_or_namespace_is_a_miss") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock b = make_block(1, /*ns=*/99);
  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  // Another namespace (another model or salt): another key, so a plain miss.
  const TestBlock other_ns = make_block(1, /*ns=*/100);
  const RecordExpectations e_ns = other_ns.expect();
  CHECK(tier->get(other_ns.key, &e_ns) == nullptr);
  CHECK(tier->stats().corrupt_records == 0);
  CHECK(tier->contains(b.key));
  // Same key but another model fingerprint expected: fails its check, deleted.
  RecordExpectations e_fp = b.expect();
  e_fp.info.model_fingerprint.lo ^= 1;
  CHECK(tier->get(b.key, &e_fp) == nullptr);
  CHECK(tier->stats().corrupt_records == 1);
  CHECK_FALSE(tier->contains(b.key));
}

TEST_CASE("disk_tier_capacity_bound_keeps_the_hot_key") {
  TempDir dir;
  const uint64_t capacity = 10 * kStoredBytes;
  auto tier = open_tier(dir.path, capacity);
  const TestBlock hot = make_block(1000);
  REQUIRE(tier->put(hot.key, hot.record->bytes()).ok());
  const RecordExpectations e_hot = hot.expect();
  for (uint64_t i = 0; i < 49; ++i) {
    const TestBlock b = make_block(i);
    REQUIRE(tier->put(b.key, b.record->bytes()).ok());
    REQUIRE(tier->stats().used_bytes <= capacity);
    REQUIRE(same_bytes(tier->get(hot.key, &e_hot), hot.record));  // touch
  }
  const DiskTierStats s = tier->stats();
  CHECK(s.used_bytes == capacity);
  CHECK(s.blocks == 10);
  CHECK(s.evictions == 40);
  CHECK(tier->contains(hot.key));
  for (uint64_t i = 0; i < 40; ++i) CHECK_FALSE(tier->contains(make_block(i).key));
  for (uint64_t i = 40; i < 49; ++i) CHECK(tier->contains(make_block(i).key));
}

TEST_CASE("disk_tier_lru_order_survives_reopen") {
  TempDir dir;
  const TestBlock a = make_block(1), b = make_block(2), c = make_block(3), d = make_block(4);
  {
    auto tier = open_tier(dir.path, 3 * kStoredBytes);
    for (const TestBlock* x : {&a, &b, &c}) REQUIRE(tier->put(x->key, x->record->bytes()).ok());
    REQUIRE(tier->get(a.key, nullptr) != nullptr);  // a is now the most recent
  }
  auto tier = open_tier(dir.path, 3 * kStoredBytes);
  REQUIRE(tier->put(d.key, d.record->bytes()).ok());
  CHECK(tier->contains(a.key));
  CHECK_FALSE(tier->contains(b.key));
  CHECK(tier->contains(c.key));
  CHECK(tier->contains(d.key));
  CHECK(tier->get(b.key, nullptr) == nullptr);
}

TEST_CASE("disk_tier_reopen_with_smaller_capacity_evicts_oldest") {
  TempDir dir;
  {
    auto tier = open_tier(dir.path, 10 * kStoredBytes);
    for (uint64_t i = 0; i < 10; ++i) REQUIRE(tier->put(make_block(i).key, make_block(i).record->bytes()).ok());
  }
  auto tier = open_tier(dir.path, 4 * kStoredBytes);
  CHECK(tier->stats().blocks == 4);
  CHECK(tier->stats().used_bytes == 4 * kStoredBytes);
  for (uint64_t i = 0; i < 6; ++i) CHECK_FALSE(tier->contains(make_block(i).key));
  for (uint64_t i = 6; i < 10; ++i) CHECK(tier->get(make_block(i).key, nullptr) != nullptr);
}

TEST_CASE("disk_tier_declines_oversized_and_replaces_existing_keys") {
  TempDir dir;
  auto tier = open_tier(dir.path, kStoredBytes);
  std::vector<uint8_t> big(kRecordBytes + 1, 0);
  const TestBlock a = make_block(1);
  CHECK(tier->put(a.key, big).ok());
  CHECK_FALSE(tier->contains(a.key));
  CHECK(tier->stats().declined == 1);
  REQUIRE(tier->put(a.key, a.record->bytes()).ok());
  REQUIRE(tier->put(a.key, a.record->bytes()).ok());  // overwrite: bytes counted once
  CHECK(tier->stats().used_bytes == kStoredBytes);
  CHECK(tier->stats().blocks == 1);
  CHECK(tier->stats().evictions == 0);
}

TEST_CASE("disk_tier_clear_removes_records_and_keeps_the_secret") {
  TempDir dir;
  std::array<uint8_t, 16> secret;
  {
    auto tier = open_tier(dir.path, 1 << 20);
    secret = tier->deployment_secret();
    for (uint64_t i = 0; i < 5; ++i) REQUIRE(tier->put(make_block(i).key, make_block(i).record->bytes()).ok());
    REQUIRE(tier->clear().ok());
    CHECK(tier->stats().blocks == 0);
    CHECK(tier->stats().used_bytes == 0);
    CHECK(tier->get(make_block(0).key, nullptr) == nullptr);
  }
  auto tier = open_tier(dir.path, 1 << 20);
  CHECK(tier->stats().blocks == 0);
  CHECK(tier->deployment_secret() == secret);
  CHECK(tier->get(make_block(3).key, nullptr) == nullptr);
  CHECK(tier->erase(make_block(3).key) == false);
}

TEST_CASE("disk_tier_open_fails_cleanly_on_a_bad_path") {
  DiskTierOptions o;
  o.path = "/proc/prefixd_cannot_create_here";
  CHECK_FALSE(DiskTier::open(o).ok());
  o.path = "";
  CHECK_FALSE(DiskTier::open(o).ok());
}

TEST_CASE("disk_tier_forged_record_with_valid_checksums_but_no_mac_is_rejected") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock b = make_block(7);
  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  // Someone who can write the database but lacks the deployment secret: a
  // well-formed record (its XXH3 checksums all valid) with another payload,
  // under a made-up trailer, and bare without one.
  std::vector<int32_t> tokens = b.tokens;
  std::vector<uint8_t> payload(kGeom.payload_bytes(), 0x5A);
  const BlockRecordInfo info{kFingerprint, b.key.namespace_seed, kGeom, b.key.block_hash, b.parent};
  RecordPtr forged = encode_block_record(info, tokens, payload);
  REQUIRE(forged != nullptr);
  REQUIRE(check_block_record_integrity(forged->data(), forged->size(), nullptr) == RecordCheck::kOk);
  std::vector<uint8_t> with_trailer(forged->data(), forged->data() + forged->size());
  with_trailer.resize(with_trailer.size() + RecordMac::kTrailerBytes, 0x11);
  REQUIRE(tier->debug_overwrite_value(b.key, with_trailer).ok());
  const RecordExpectations e = b.expect();
  CHECK(tier->get(b.key, &e) == nullptr);
  DiskTierStats s = tier->stats();
  CHECK(s.corrupt_records == 1);
  CHECK(s.unauthenticated_records == 1);
  CHECK(s.misses == 1);
  CHECK_FALSE(tier->contains(b.key));

  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  REQUIRE(tier->debug_overwrite_value(b.key, forged->bytes()).ok());  // no trailer at all
  CHECK(tier->get(b.key, &e) == nullptr);
  s = tier->stats();
  CHECK(s.corrupt_records == 2);
  CHECK(s.unauthenticated_records == 2);
  // The genuine record still round-trips after all that.
  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  CHECK(same_bytes(tier->get(b.key, &e), b.record));
}

TEST_CASE("disk_tier_record_signed_by_another_deployment_is_rejected") {
  TempDir dir_a, dir_b;
  const TestBlock b = make_block(8);
  auto tier_a = open_tier(dir_a.path, 1 << 20);
  auto tier_b = open_tier(dir_b.path, 1 << 20);
  REQUIRE(tier_a->deployment_secret() != tier_b->deployment_secret());
  REQUIRE(tier_b->put(b.key, b.record->bytes()).ok());
  // Tier b's stored value (record + b's trailer) copied into tier a.
  RecordMac mac_b(tier_b->deployment_secret());
  const RecordMac::Trailer trailer = mac_b.sign(b.record->bytes());
  REQUIRE(mac_b.verify(b.record->bytes(), trailer));
  std::vector<uint8_t> value(b.record->data(), b.record->data() + b.record->size());
  value.insert(value.end(), trailer.begin(), trailer.end());
  REQUIRE(tier_a->put(b.key, b.record->bytes()).ok());
  REQUIRE(tier_a->debug_overwrite_value(b.key, value).ok());
  CHECK(tier_a->get(b.key, nullptr) == nullptr);
  CHECK(tier_a->stats().unauthenticated_records == 1);
}

TEST_CASE("disk_tier_signed_but_damaged_record_fails_its_checksum_not_its_mac") {
  TempDir dir;
  auto tier = open_tier(dir.path, 1 << 20);
  const TestBlock b = make_block(9);
  REQUIRE(tier->put(b.key, b.record->bytes()).ok());
  std::vector<uint8_t> bytes(b.record->data(), b.record->data() + kRecordBytes);
  bytes[400] ^= 0x01;  // a payload byte, then signed: only the XXH3 checksum can tell
  REQUIRE(tier->debug_overwrite_signed(b.key, bytes).ok());
  CHECK(tier->get(b.key, nullptr) == nullptr);
  CHECK(tier->stats().corrupt_records == 1);
  CHECK(tier->stats().unauthenticated_records == 0);
}

TEST_CASE("disk_tier_written_before_macs_is_emptied_at_open_and_keeps_its_secret") {
  TempDir dir;
  std::array<uint8_t, 16> secret;
  {
    auto tier = open_tier(dir.path, 1 << 20);
    secret = tier->deployment_secret();
    for (uint64_t i = 0; i < 3; ++i) REQUIRE(tier->put(make_block(i).key, make_block(i).record->bytes()).ok());
  }
  {  // Mark the directory as the layout without MACs, as an older prefixd wrote it.
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"access", {}}, {"meta", {}}, {"pins", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::DBOptions(), dir.path, families, &handles, &db).ok());
    REQUIRE(db->Put(rocksdb::WriteOptions(), handles[2], "layout_version", "prefixd-disk-tier-1").ok());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  auto tier = open_tier(dir.path, 1 << 20);
  CHECK(tier->deployment_secret() == secret);
  CHECK(tier->stats().blocks == 0);
  CHECK(tier->get(make_block(1).key, nullptr) == nullptr);
  REQUIRE(tier->put(make_block(1).key, make_block(1).record->bytes()).ok());
  CHECK(same_bytes(tier->get(make_block(1).key, nullptr), make_block(1).record));
}
