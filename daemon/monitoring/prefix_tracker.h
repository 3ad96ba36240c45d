// PrefixTracker: the daemon's own record of which prompt prefixes finished
// requests started with, how often they were served from the cache and when
// they were last used, and which were pinned or prefetched through the cache
// API (the dashboard's "hottest prefixes" table).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace prefixd {

// How one finished request's prompt was served (a subset of engine Usage).
struct PrefixUse {
  int32_t cached_tokens = 0;  // device + host + disk + remote
  int32_t device_tokens = 0;
  int32_t host_tokens = 0;
  int32_t disk_tokens = 0;
  int32_t remote_tokens = 0;
};

// One tracked prefix. Its key is the first full block of the prompt (and the
// cache salt); `tokens` is the longest block-aligned prefix that every request
// recorded under this key shared, so after two requests with one system
// prompt and different questions it is the system prompt (rounded down to
// whole blocks).
struct PrefixEntry {
  uint64_t id = 0;  // prefix_id() of the first block and the salt
  std::string cache_salt;
  std::vector<int32_t> tokens;  // (n_tokens) int32 token ids, a multiple of the block size
  int64_t requests = 0;         // finished requests that started with this first block
  int64_t hits = 0;             // of those, requests that reused at least one cached token
  int64_t cached_tokens = 0;    // prompt tokens they reused, summed
  std::string
      last_hit_tier;  // tier that served most of the last hit: device/host/disk; "" before any
  int64_t first_seen_ms = 0;  // unix ms
  int64_t last_use_ms = 0;    // unix ms of the latest request
  bool pinned = false;        // pinned by the dashboard or POST /v1/cache/pin, until unpinned
  int64_t prefetches = 0;     // POST /v1/cache/prefetch calls for prompts under this key
};

// A cache API call on a prompt, recorded so that the table shows it.
enum class CacheCall { kPin, kUnpin, kPrefetch };

// Thread-safety: every method may be called from any thread (one mutex; each
// call is O(capacity) at most). Time is a parameter so that tests can step it.
class PrefixTracker {
 public:
  // block_size: tokens per block (> 0); capacity: entries kept at most (> 0);
  // max_prefix_tokens: tokens kept per entry at most (rounded down to blocks).
  PrefixTracker(int32_t block_size, size_t capacity, size_t max_prefix_tokens);

  // Records one finished request. Prompts shorter than one block are ignored.
  // When a new key arrives and the tracker is full, the least recently used
  // unpinned entry is dropped (the least recently used one when all are pinned).
  void record(std::span<const int32_t> prompt, const std::string& cache_salt, const PrefixUse& use,
              int64_t now_ms);
  // Records a successful pin, unpin or prefetch of a prompt under the same
  // key and bounds as record() (a new key may evict); it counts no request.
  void record_cache_call(std::span<const int32_t> prompt, const std::string& cache_salt,
                         CacheCall call, int64_t now_ms);

  // Up to `limit` entries, hottest first: more hits, then more requests, then
  // more recent use, then smaller id.
  std::vector<PrefixEntry> hottest(size_t limit) const;
  std::optional<PrefixEntry> find(uint64_t id) const;
  // Marks an entry pinned or not; false when the id is not tracked.
  bool set_pinned(uint64_t id, bool pinned);
  void clear();
  size_t size() const;
  size_t capacity() const { return capacity_; }
  int32_t block_size() const { return block_size_; }

  // The key of a prompt: XXH3-64 of its first block (int32 little-endian)
  // seeded with a hash of the salt. first_block: (block_size) token ids.
  static uint64_t prefix_id(std::span<const int32_t> first_block, const std::string& cache_salt);
  static std::string id_hex(uint64_t id);  // 16 lowercase hex digits
  static std::optional<uint64_t> parse_id_hex(const std::string& hex);

 private:
  // The entry for a prompt (created, or shrunk to the common prefix), its
  // last use set to now_ms; nullptr for a prompt shorter than a block. mu_ held.
  PrefixEntry* entry_for(std::span<const int32_t> prompt, const std::string& cache_salt,
                         int64_t now_ms);

  const int32_t block_size_;
  const size_t capacity_;
  const size_t max_prefix_tokens_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, PrefixEntry> entries_;
};

}  // namespace prefixd
