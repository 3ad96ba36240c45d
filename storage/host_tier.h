// HostTier: the host-RAM tier. A byte-bounded LRU of block records keyed by
// (namespace seed, block hash); evicted records go to a callback (the tier
// manager offloads them to disk).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "storage/block_record.h"

namespace prefixd {

struct HostTierOptions {
  uint64_t capacity_bytes = 1ull << 30;  // bound on the sum of record sizes held
};

struct HostTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // sum of RecordBuffer::size() of held records
  uint64_t blocks = 0;
  uint64_t hits = 0;       // lookup() found the key
  uint64_t misses = 0;     // lookup() did not
  uint64_t evictions = 0;  // records pushed out by capacity (not erase/clear)
  uint64_t inserts = 0;    // records accepted
  uint64_t declined = 0;   // records larger than the capacity
};

enum class HostInsert : uint8_t {
  kInserted,        // now held, most recently used
  kAlreadyPresent,  // key was held: kept the old record, marked most recently used
  kDeclined,        // larger than the whole capacity; not held (not an error)
};

// Thread-safety: every method may be called from any thread. One mutex guards
// the map and the LRU list; it is held only for O(1) map/list work (plus the
// unlinking of evicted entries), never while the eviction callback runs or a
// record is freed, so a lookup from the engine thread never waits on I/O.
class HostTier {
 public:
  // Receives each record evicted by capacity, after the tier's lock is
  // released, on the thread whose insert() caused the eviction.
  using EvictCallback = std::function<void(const BlockKey& key, RecordPtr record)>;

  explicit HostTier(const HostTierOptions& options);
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Set before concurrent use; may be empty (evicted records are dropped).
  void set_evict_callback(EvictCallback callback);

  // Inserts a record, evicting least recently used records until it fits.
  // Declines (and succeeds) when the record is larger than the capacity.
  HostInsert insert(const BlockKey& key, RecordPtr record);
  // Returns the record and marks it most recently used; nullptr on a miss.
  RecordPtr lookup(const BlockKey& key);
  // Returns the record without touching LRU order or hit/miss counters.
  RecordPtr peek(const BlockKey& key) const;
  bool contains(const BlockKey& key) const;
  // Removes a record (not counted as an eviction). Returns whether it was held.
  bool erase(const BlockKey& key);
  // Drops every record (not counted as evictions, no callback).
  void clear();
  HostTierStats stats() const;
  // Keys from least to most recently used (tests and debugging); records of
  // pinned chains come after every unpinned one (they are evicted last).
  std::vector<BlockKey> keys_lru_order() const;
  // Marks (pinned = true) or unmarks the blocks of a pinned chain: a count
  // per key, so overlapping pins add up; a key need not be held (a record
  // inserted later is marked from the start). Eviction takes every unmarked
  // record before a marked one.
  void set_pinned(std::span<const BlockKey> keys, bool pinned);
  uint64_t pinned_blocks() const;  // held records that are marked

 private:
  struct Entry {
    BlockKey key;
    RecordPtr record;
    bool pinned = false;  // in pinned_lru_ (else lru_)
  };
  using LruList = std::list<Entry>;  // front = most recently used
  LruList& list_of(const Entry& e) { return e.pinned ? pinned_lru_ : lru_; }

  const uint64_t capacity_bytes_;
  EvictCallback on_evict_;
  mutable std::mutex mu_;
  LruList lru_;         // records of no pinned chain
  LruList pinned_lru_;  // records of pinned chains
  std::unordered_map<BlockKey, int32_t, BlockKeyHasher> pin_counts_;  // set_pinned marks (> 0)
  std::unordered_map<BlockKey, LruList::iterator, BlockKeyHasher> map_;
  HostTierStats stats_;
};

}  // namespace prefixd
