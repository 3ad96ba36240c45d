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
      LruList& list = list_of(*it->second);
      list.splice(list.begin(), list, it->second);
      return HostInsert::kAlreadyPresent;
    }
    if (n_bytes > capacity_bytes_) {
      ++stats_.declined;
      return HostInsert::kDeclined;
    }
    while (stats_.used_bytes + n_bytes > capacity_bytes_) {
      LruList& from = lru_.empty() ? pinned_lru_ : lru_;  // pinned chains last
      PREFIXD_CHECK(!from.empty(), "host tier accounting: bytes used with no entries");
      Entry& victim = from.back();
      stats_.used_bytes -= victim.record->size();
      --stats_.blocks;
      ++stats_.evictions;
      map_.erase(victim.key);
      evicted.push_back(std::move(victim));
      from.pop_back();
    }
    const bool pinned = pin_counts_.count(key) != 0;
    LruList& list = pinned ? pinned_lru_ : lru_;
    list.push_front(Entry{key, std::move(record), pinned});
    map_.emplace(key, list.begin());
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
  LruList& list = list_of(*it->second);
  list.splice(list.begin(), list, it->second);
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
  list_of(*it->second).erase(it->second);
  map_.erase(it);
  return true;
}

void HostTier::clear() {
  LruList doomed, doomed_pinned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    doomed.swap(lru_);
    doomed_pinned.swap(pinned_lru_);
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
  keys.reserve(lru_.size() + pinned_lru_.size());
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) keys.push_back(it->key);
  for (auto it = pinned_lru_.rbegin(); it != pinned_lru_.rend(); ++it) keys.push_back(it->key);
  return keys;
}

void HostTier::set_pinned(std::span<const BlockKey> keys, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const BlockKey& key : keys) {
    bool marked;
    if (pinned) {
      marked = ++pin_counts_[key] > 0;
    } else {
      auto c = pin_counts_.find(key);
      if (c == pin_counts_.end()) continue;
      marked = --c->second > 0;
      if (!marked) pin_counts_.erase(c);
    }
    auto it = map_.find(key);
    if (it == map_.end() || it->second->pinned == marked) continue;
    // Move the record to the other list, keeping its recency at the front.
    LruList& from = list_of(*it->second);
    it->second->pinned = marked;
    LruList& to = list_of(*it->second);
    to.splice(to.begin(), from, it->second);
  }
}

uint64_t HostTier::pinned_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_lru_.size();
}

}  // namespace prefixd
