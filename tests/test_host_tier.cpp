// Tests for HostTier: LRU order, byte bound, declines, eviction callback, stats.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <random>
#include <thread>
#include <vector>

#include "storage/host_tier.h"

using namespace prefixd;

namespace {
BlockKey key(uint64_t i, uint64_t ns = 7) { return BlockKey{ns, Hash128{i, i * 3 + 1}}; }
RecordPtr buffer(size_t n_bytes, uint8_t fill = 0) {
  auto b = RecordBuffer::allocate(n_bytes, default_host_allocator());
  for (size_t i = 0; i < n_bytes; ++i) b->mutable_data()[i] = fill;
  return b;
}
}  // namespace

TEST_CASE("host_tier_evicts_least_recently_used_first") {
  HostTier tier(HostTierOptions{300});
  std::vector<BlockKey> evicted;
  tier.set_evict_callback([&](const BlockKey& k, RecordPtr r) {
    CHECK(r->size() == 100);
    evicted.push_back(k);
  });
  CHECK(tier.insert(key(1), buffer(100)) == HostInsert::kInserted);
  CHECK(tier.insert(key(2), buffer(100)) == HostInsert::kInserted);
  CHECK(tier.insert(key(3), buffer(100)) == HostInsert::kInserted);
  REQUIRE(tier.lookup(key(1)) != nullptr);  // 1 becomes most recently used
  CHECK(tier.insert(key(4), buffer(100)) == HostInsert::kInserted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0] == key(2));
  CHECK(tier.keys_lru_order() == std::vector<BlockKey>{key(3), key(1), key(4)});
  // peek and contains do not change the order.
  CHECK(tier.peek(key(3)) != nullptr);
  CHECK(tier.contains(key(3)));
  CHECK(tier.keys_lru_order() == std::vector<BlockKey>{key(3), key(1), key(4)});
  // Re-inserting a held key keeps the old record and refreshes it.
  CHECK(tier.insert(key(3), buffer(100, 9)) == HostInsert::kAlreadyPresent);
  CHECK(tier.peek(key(3))->data()[0] == 0);
  CHECK(tier.keys_lru_order() == std::vector<BlockKey>{key(1), key(4), key(3)});
  const HostTierStats s = tier.stats();
  CHECK(s.capacity_bytes == 300);
  CHECK(s.used_bytes == 300);
  CHECK(s.blocks == 3);
  CHECK(s.evictions == 1);
  CHECK(s.hits == 1);
  CHECK(s.misses == 0);
  CHECK(s.inserts == 4);
}

TEST_CASE("host_tier_one_insert_can_evict_several_records") {
  HostTier tier(HostTierOptions{300});
  std::vector<BlockKey> evicted;
  tier.set_evict_callback([&](const BlockKey& k, RecordPtr) { evicted.push_back(k); });
  tier.insert(key(1), buffer(100));
  tier.insert(key(2), buffer(100));
  tier.insert(key(3), buffer(100));
  CHECK(tier.insert(key(4), buffer(250)) == HostInsert::kInserted);
  CHECK(evicted == std::vector<BlockKey>{key(1), key(2), key(3)});
  CHECK(tier.stats().used_bytes == 250);
  CHECK(tier.stats().blocks == 1);
}

TEST_CASE("host_tier_declines_a_record_larger_than_capacity_without_evicting") {
  HostTier tier(HostTierOptions{300});
  int n_evicted = 0;
  tier.set_evict_callback([&](const BlockKey&, RecordPtr) { ++n_evicted; });
  tier.insert(key(1), buffer(200));
  CHECK(tier.insert(key(2), buffer(301)) == HostInsert::kDeclined);
  CHECK(n_evicted == 0);
  CHECK_FALSE(tier.contains(key(2)));
  CHECK(tier.contains(key(1)));
  CHECK(tier.stats().declined == 1);
  CHECK(tier.stats().used_bytes == 200);
  HostTier disabled(HostTierOptions{0});
  CHECK(disabled.insert(key(1), buffer(1)) == HostInsert::kDeclined);
  CHECK(disabled.stats().blocks == 0);
}

TEST_CASE("host_tier_never_exceeds_capacity_under_random_sizes") {
  const uint64_t capacity = 10000;
  HostTier tier(HostTierOptions{capacity});
  uint64_t evicted_bytes = 0;
  tier.set_evict_callback([&](const BlockKey&, RecordPtr r) { evicted_bytes += r->size(); });
  std::mt19937 rng(42);
  uint64_t inserted_bytes = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const size_t n = 1 + rng() % 3000;
    if (tier.insert(key(i), buffer(n)) == HostInsert::kInserted) inserted_bytes += n;
    const HostTierStats s = tier.stats();
    REQUIRE(s.used_bytes <= capacity);
    REQUIRE(s.used_bytes == inserted_bytes - evicted_bytes);
  }
  uint64_t held = 0;
  for (const BlockKey& k : tier.keys_lru_order()) held += tier.peek(k)->size();
  CHECK(held == tier.stats().used_bytes);
}

TEST_CASE("host_tier_counts_hits_and_misses_and_namespaces_are_separate") {
  HostTier tier(HostTierOptions{1000});
  tier.insert(key(1, 7), buffer(10));
  CHECK(tier.lookup(key(1, 7)) != nullptr);
  CHECK(tier.lookup(key(1, 8)) == nullptr);
  CHECK(tier.lookup(key(2, 7)) == nullptr);
  CHECK(tier.stats().hits == 1);
  CHECK(tier.stats().misses == 2);
}

TEST_CASE("host_tier_erase_and_clear_free_bytes_without_callbacks") {
  HostTier tier(HostTierOptions{1000});
  int n_evicted = 0;
  tier.set_evict_callback([&](const BlockKey&, RecordPtr) { ++n_evicted; });
  tier.insert(key(1), buffer(10));
  tier.insert(key(2), buffer(20));
  tier.insert(key(3), buffer(30));
  CHECK(tier.erase(key(2)));
  CHECK_FALSE(tier.erase(key(2)));
  CHECK(tier.stats().used_bytes == 40);
  tier.clear();
  CHECK(tier.stats().used_bytes == 0);
  CHECK(tier.stats().blocks == 0);
  CHECK(tier.keys_lru_order().empty());
  CHECK(n_evicted == 0);
  CHECK(tier.stats().evictions == 0);
}

TEST_CASE("host_tier_records_stay_valid_for_holders_after_eviction") {
  HostTier tier(HostTierOptions{100});
  tier.insert(key(1), buffer(100, 5));
  RecordPtr held = tier.lookup(key(1));
  tier.insert(key(2), buffer(100));
  CHECK_FALSE(tier.contains(key(1)));
  CHECK(held->data()[99] == 5);
}

TEST_CASE("host_tier_concurrent_inserts_and_lookups_keep_accounting_exact") {
  const uint64_t capacity = 50 * 64;
  HostTier tier(HostTierOptions{capacity});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      for (uint64_t i = 0; i < 5000; ++i) {
        tier.insert(key(i % 200, t), buffer(64));
        tier.lookup(key((i * 7) % 200, (t + 1) % 4));
      }
    });
  }
  for (auto& th : threads) th.join();
  const HostTierStats s = tier.stats();
  CHECK(s.used_bytes == capacity);
  CHECK(s.blocks == 50);
  CHECK(tier.keys_lru_order().size() == 50);
  CHECK(s.hits + s.misses == 4 * 5000);
}
