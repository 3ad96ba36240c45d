// Durable TTL pins in the storage tiers: the pin record's format (round trip,
// every truncation and a flipped bit refused with a reason), host and disk
// evicting a pinned chain only after every unpinned record, and pin records
// surviving a reopen of the disk tier, damaged ones named and erased.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/host_tier.h"
#include "storage/pin_record.h"
#include "storage/tier_manager.h"
#include "tests/temp_dir.h"
#include "tests/test_blocks.h"

using namespace prefixd;
using namespace prefixd::testing;  // TempDir, TestBlock, make_block, kFingerprint, kGeom

namespace {

PinRecord sample_pin() {
  PinRecord p;
  p.model_fingerprint = kFingerprint;
  p.namespace_seed = 99;
  p.cache_salt = "tenant-a\x1fsalt";
  p.tenant = "tenant-a";
  p.ttl_ms = 3600000;
  p.ttl_class = 1;
  p.expires_unix_ms = 1795000000123;
  for (int32_t i = 0; i < 8; ++i) p.tokens.push_back(100 + i);
  p.block_hashes = {Hash128{1, 2}, Hash128{3, 4}};
  return p;
}

bool same_pin(const PinRecord& a, const PinRecord& b) {
  return a.model_fingerprint == b.model_fingerprint && a.namespace_seed == b.namespace_seed &&
         a.cache_salt == b.cache_salt && a.tenant == b.tenant && a.ttl_ms == b.ttl_ms &&
         a.ttl_class == b.ttl_class && a.expires_unix_ms == b.expires_unix_ms && a.tokens == b.tokens &&
         a.block_hashes == b.block_hashes;
}

RecordPtr buffer(size_t n_bytes) { return RecordBuffer::allocate(n_bytes, default_host_allocator()); }
BlockKey key(uint64_t i) { return BlockKey{7, Hash128{i, i * 3 + 1}}; }

std::unique_ptr<DiskTier> open_disk(const std::string& path, uint64_t capacity_bytes) {
  DiskTierOptions o;
  o.path = path;
  o.capacity_bytes = capacity_bytes;
  auto t = DiskTier::open(o);
  REQUIRE_MESSAGE(t.ok(), t.message());
  return std::move(t).value();
}

}  // namespace

TEST_CASE("pin_record_round_trips_every_field") {
  const PinRecord p = sample_pin();
  const std::vector<uint8_t> bytes = encode_pin_record(p);
  Result<PinRecord> back = decode_pin_record(bytes);
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(same_pin(back.value(), p));
}

TEST_CASE("pin_record_refuses_every_truncation_and_a_flipped_bit") {
  const std::vector<uint8_t> bytes = encode_pin_record(sample_pin());
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    Result<PinRecord> r = decode_pin_record(std::span<const uint8_t>(bytes.data(), n));
    CHECK_FALSE(r.ok());
  }
  for (size_t i = 0; i < bytes.size(); i += 7) {
    CAPTURE(i);
    std::vector<uint8_t> damaged = bytes;
    damaged[i] ^= 0x10;
    Result<PinRecord> r = decode_pin_record(damaged);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("pin record") == 0);
  }
  std::vector<uint8_t> flipped = bytes;
  flipped[20] ^= 1;
  CHECK(decode_pin_record(flipped).message() == "pin record: checksum mismatch (damaged)");
}

TEST_CASE("pin_record_key_is_the_namespace_and_the_last_block_hash_big_endian") {
  const std::vector<uint8_t> k = pin_record_key(0x0102030405060708ull, Hash128{0x1112131415161718ull, 0x2122232425262728ull});
  const std::vector<uint8_t> want = {1,    2,    3,    4,    5,    6,    7,    8,    0x21, 0x22, 0x23, 0x24,
                                     0x25, 0x26, 0x27, 0x28, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
  CHECK(k == want);
}

TEST_CASE("host_tier_evicts_a_pinned_chain_only_after_every_unpinned_record") {
  HostTier tier(HostTierOptions{300});
  std::vector<BlockKey> evicted;
  tier.set_evict_callback([&](const BlockKey& k, RecordPtr) { evicted.push_back(k); });
  const std::vector<BlockKey> chain = {key(1), key(2)};
  tier.set_pinned(chain, true);  // marked before they arrive
  tier.insert(key(1), buffer(100));
  tier.insert(key(2), buffer(100));
  tier.insert(key(3), buffer(100));
  CHECK(tier.pinned_blocks() == 2);
  tier.insert(key(4), buffer(100));  // the oldest unpinned (3) goes, not 1
  REQUIRE(evicted == std::vector<BlockKey>{key(3)});
  tier.insert(key(5), buffer(100));
  REQUIRE(evicted == std::vector<BlockKey>{key(3), key(4)});
  // Overlapping pins add up: one unmark leaves the chain pinned.
  tier.set_pinned(chain, true);
  tier.set_pinned(chain, false);
  tier.insert(key(6), buffer(100));
  CHECK(evicted.back() == key(5));
  // Unpinned, the chain joins the others as just used (1 before 2), then
  // leaves by recency.
  tier.set_pinned(chain, false);
  CHECK(tier.pinned_blocks() == 0);
  CHECK(tier.keys_lru_order() == std::vector<BlockKey>{key(6), key(1), key(2)});
  tier.insert(key(7), buffer(100));
  CHECK(evicted.back() == key(6));
  tier.insert(key(8), buffer(100));
  CHECK(evicted.back() == key(1));
  // With nothing but pinned records left, a pinned one is evicted rather than refusing.
  HostTier full(HostTierOptions{200});
  full.set_pinned(chain, true);
  full.insert(key(1), buffer(100));
  full.insert(key(2), buffer(100));
  CHECK(full.insert(key(3), buffer(100)) == HostInsert::kInserted);
  CHECK_FALSE(full.contains(key(1)));
}

TEST_CASE("disk_tier_evicts_a_pinned_chain_only_after_every_unpinned_record") {
  TempDir dir;
  const uint64_t stored = 640 + RecordMac::kTrailerBytes;
  auto tier = open_disk(dir.path, 4 * stored);
  std::vector<TestBlock> b;
  for (uint64_t i = 0; i < 8; ++i) b.push_back(make_block(i));
  const std::vector<BlockKey> chain = {b[0].key, b[1].key};
  tier->set_pinned(chain, true);
  for (uint64_t i = 0; i < 6; ++i) REQUIRE(tier->put(b[i].key, b[i].record->bytes()).ok());
  CHECK(tier->contains(b[0].key));
  CHECK(tier->contains(b[1].key));
  CHECK_FALSE(tier->contains(b[2].key));
  CHECK_FALSE(tier->contains(b[3].key));
  CHECK(tier->pinned_blocks() == 2);
  tier->set_pinned(chain, false);
  REQUIRE(tier->put(b[6].key, b[6].record->bytes()).ok());
  CHECK_FALSE(tier->contains(b[0].key));  // the oldest again
}

TEST_CASE("pin_records_survive_a_reopen_and_damaged_ones_are_named_and_erased") {
  TempDir dir;
  PinRecord p = sample_pin();
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.disk = DiskTierOptions{};
  o.disk->path = dir.path;
  {
    auto tm = TierManager::create(o);
    REQUIRE_MESSAGE(tm.ok(), tm.message());
    REQUIRE(tm.value()->store_pin(p).ok());
    PinRecord q = p;
    q.block_hashes = {Hash128{5, 6}, Hash128{7, 8}};
    REQUIRE(tm.value()->store_pin(q).ok());
    // A damaged record under a third key, written beside them.
    const std::vector<uint8_t> junk = {'P', 'X', 'P', 'N', 1, 0, 9, 9, 9};
    REQUIRE(tm.value()->disk()->put_pin(pin_record_key(99, Hash128{9, 9}), junk).ok());
    REQUIRE(tm.value()->erase_pin(q.namespace_seed, q.block_hashes.back()).ok());
  }
  auto tm = TierManager::create(o);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  Result<TierManager::StoredPins> stored = tm.value()->stored_pins();
  REQUIRE_MESSAGE(stored.ok(), stored.message());
  REQUIRE(stored->pins.size() == 1);
  CHECK(same_pin(stored->pins[0], p));
  REQUIRE(stored->damaged.size() == 1);
  CHECK(stored->damaged[0].find("pin record:") != std::string::npos);
  // Erased: a second read finds only the good one.
  Result<TierManager::StoredPins> again = tm.value()->stored_pins();
  REQUIRE(again.ok());
  CHECK(again->pins.size() == 1);
  CHECK(again->damaged.empty());
}
