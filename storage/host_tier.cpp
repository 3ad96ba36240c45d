// HostTier: byte-bounded LRU of shared record buffers under one mutex.
// Evicted entries are moved out under the lock and handed to the callback
// after it is released (the callback may enqueue disk writes, take other locks).
#include "storage/host_tier.h"

namespace prefixd {

HostTier::HostTier(const HostTierOptions& options) : capacity_bytes_(options.capacity_bytes) {
  stats_.capacity_bytes = capacity_bytes_;
}

void HostTier::set_evict_callback(EvictCallback callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_evict_ = std::move(callback);
}

HostInsert HostTier::insert(const BlockKey& key, RecordPtr record) {
  PREFIXD_CHECK(record != nullptr, "HostTier::insert of a null record");
  const uint64_t n_bytes = record->size();
  std::vector<Entry> evicted;
  EvictCallback on_evict;
  HostInsert outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return HostInsert::kAlreadyPresent;
    }
    if (n_bytes > capacity_bytes_) {
      ++stats_.declined;
      return HostInsert::kDeclined;
    }
    while (stats_.used_bytes + n_bytes > capacity_bytes_) {
      PREFIXD_CHECK(!lru_.empty(), "host tier accounting: bytes used with no entries");
      Entry& victim = lru_.back();
      stats_.used_bytes -= victim.record->size();
      --stats_.blocks;
      ++stats_.evictions;
      map_.erase(victim.key);
      evicted.push_back(std::move(victim));
      lru_.pop_back();
    }
    lru_.push_front(Entry{key, std::move(record)});
    map_.emplace(key, lru_.begin());
    stats_.used_bytes += n_bytes;
    ++stats_.blocks;
    ++stats_.inserts;
    on_evict = on_evict_;
    outcome = HostInsert::kInserted;
  }
  if (on_evict) {
    for (Entry& e : evicted) on_evict(e.key, std::move(e.record));
  }
  return outcome;
}

RecordPtr HostTier::lookup(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->record;
}

RecordPtr HostTier::peek(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second->record;
}

bool HostTier::contains(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

bool HostTier::erase(const BlockKey& key) {
  RecordPtr doomed;  // freed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  doomed = std::move(it->second->record);
  stats_.used_bytes -= doomed->size();
  --stats_.blocks;
  lru_.erase(it->second);
  map_.erase(it);
  return true;
}

void HostTier::clear() {
  LruList doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    doomed.swap(lru_);
    map_.clear();
    stats_.used_bytes = 0;
    stats_.blocks = 0;
  }
}

HostTierStats HostTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<BlockKey> HostTier::keys_lru_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<BlockKey> keys;
  keys.reserve(lru_.size());
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) keys.push_back(it->key);
  return keys;
}

}  // namespace prefixd
