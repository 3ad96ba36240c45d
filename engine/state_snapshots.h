// Device state snapshots of a model with recurrent layers (qwen35): copies of
// a sequence's state slot (KvPool::state) taken when its computed tokens end
// exactly at a block boundary, keyed by (namespace seed, chain hash of the
// last block the state covers). A cached prefix of k blocks can be resumed
// only from a snapshot keyed by its block k-1: the recurrent state is not a
// sum of per-block pieces.
//
// The snapshots live in the pool's state slots after the running sequences'
// ones: slots [first_slot, first_slot + n_slots). This class only keeps the
// key -> slot map and the LRU order; the engine copies the state in and out
// (Backend::copy_state_slot). A slot is reused for a new snapshot when none
// is free (the least recently used one is evicted), and a snapshot is
// dropped when its block leaves the prefix index (drop()). With tiers the
// engine also hands each snapshot to them (TierManager::offload_snapshot:
// when taken under write-through, else when its slot is evicted) and
// restores one from them when the device has none at a matched prefix.
//
// Thread: the engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "common/hash128.h"
#include "common/result.h"

namespace prefixd {

struct SnapshotKey {
  uint64_t namespace_seed = 0;
  Hash128 hash;  // chain hash of the last block the state covers
  friend bool operator==(const SnapshotKey&, const SnapshotKey&) = default;
};

struct SnapshotKeyHasher {
  size_t operator()(const SnapshotKey& k) const {
    return Hash128Hasher{}(k.hash) ^ (static_cast<size_t>(k.namespace_seed) * 0x9E3779B97F4A7C15ull);
  }
};

struct SnapshotCounters {
  int64_t hits = 0;       // admissions resumed from a snapshot
  int64_t misses = 0;     // admissions with matched blocks but no snapshot at any of their boundaries
  int64_t taken = 0;      // snapshots stored
  int64_t evictions = 0;  // snapshots whose slot went to a newer one (LRU)
  int64_t dropped = 0;    // snapshots dropped with their block (it left the index)
  int64_t bytes_taken = 0;
  int64_t bytes_restored = 0;
  int64_t tier_hits = 0;      // of the hits, restored from the tiers below the device
  int64_t tier_rejected = 0;  // tiers' snapshots found but refused by read_snapshot (a miss)
  int64_t offloaded = 0;      // snapshots handed to the tiers
};

class StateSnapshots {
 public:
  StateSnapshots(int32_t first_slot, int32_t n_slots) {
    PREFIXD_CHECK(n_slots >= 0 && first_slot >= 0, "bad snapshot slot range");
    for (int32_t i = n_slots - 1; i >= 0; --i) free_.push_back(first_slot + i);
  }

  // The slot holding `key`'s snapshot, or -1; a hit becomes the most recently used.
  int32_t find(const SnapshotKey& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return -1;
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    return it->second.slot;
  }
  bool contains(const SnapshotKey& key) const { return map_.find(key) != map_.end(); }

  // A slot to store `key`'s snapshot in: -1 when it is already stored (then
  // it becomes the most recently used), else a free slot or the least
  // recently used one's (evicted). -1 too when there are no slots at all.
  // `evicted`, when given, is set to the evicted snapshot's key (its slot
  // still holds it until the caller overwrites it) and to a zero key else.
  int32_t store(const SnapshotKey& key, SnapshotKey* evicted = nullptr) {
    if (evicted) *evicted = SnapshotKey{};
    if (find(key) >= 0) return -1;
    int32_t slot = -1;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else if (!lru_.empty()) {
      auto victim = map_.find(lru_.front());
      slot = victim->second.slot;
      if (evicted) *evicted = victim->first;
      map_.erase(victim);
      lru_.pop_front();
      counters.evictions++;
    } else {
      return -1;
    }
    lru_.push_back(key);
    map_.emplace(key, Entry{slot, std::prev(lru_.end())});
    counters.taken++;
    return slot;
  }

  // Forgets `key`'s snapshot (its block left the index); its slot is free again.
  void drop(const SnapshotKey& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    free_.push_back(it->second.slot);
    lru_.erase(it->second.lru_pos);
    map_.erase(it);
    counters.dropped++;
  }

  int32_t n_stored() const { return static_cast<int32_t>(map_.size()); }
  // Keys, least recently used first (tests).
  std::vector<SnapshotKey> lru_order() const { return {lru_.begin(), lru_.end()}; }

  SnapshotCounters counters;

 private:
  struct Entry {
    int32_t slot;
    std::list<SnapshotKey>::iterator lru_pos;
  };
  std::unordered_map<SnapshotKey, Entry, SnapshotKeyHasher> map_;
  std::list<SnapshotKey> lru_;  // least recently used first
  std::vector<int32_t> free_;
};

}  // namespace prefixd
