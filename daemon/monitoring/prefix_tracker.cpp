// PrefixTracker: keys, the shrinking shared prefix, and LRU bounding.
#include "daemon/monitoring/prefix_tracker.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>
#include <cstring>

namespace prefixd {

PrefixTracker::PrefixTracker(int32_t block_size, size_t capacity, size_t max_prefix_tokens)
    : block_size_(block_size > 0 ? block_size : 1),
      capacity_(capacity > 0 ? capacity : 1),
      max_prefix_tokens_(std::max<size_t>(static_cast<size_t>(block_size_),
                                          max_prefix_tokens / static_cast<size_t>(block_size_) *
                                              static_cast<size_t>(block_size_))) {}

uint64_t PrefixTracker::prefix_id(std::span<const int32_t> first_block,
                                  const std::string& cache_salt) {
  const uint64_t seed = XXH3_64bits(cache_salt.data(), cache_salt.size());
  std::vector<uint8_t> bytes(first_block.size() * 4);
  for (size_t i = 0; i < first_block.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(first_block[i]);
    bytes[4 * i + 0] = static_cast<uint8_t>(v);
    bytes[4 * i + 1] = static_cast<uint8_t>(v >> 8);
    bytes[4 * i + 2] = static_cast<uint8_t>(v >> 16);
    bytes[4 * i + 3] = static_cast<uint8_t>(v >> 24);
  }
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

std::string PrefixTracker::id_hex(uint64_t id) {
  static const char* kHex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, id >>= 4) s[static_cast<size_t>(i)] = kHex[id & 15];
  return s;
}

std::optional<uint64_t> PrefixTracker::parse_id_hex(const std::string& hex) {
  if (hex.empty() || hex.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : hex) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

PrefixEntry* PrefixTracker::entry_for(std::span<const int32_t> prompt,
                                      const std::string& cache_salt, int64_t now_ms) {
  const size_t b = static_cast<size_t>(block_size_);
  if (prompt.size() < b) return nullptr;
  // Full blocks only, as the cache shares them; capped per entry.
  const size_t n_full = std::min(prompt.size() / b * b, max_prefix_tokens_);
  const std::span<const int32_t> full = prompt.first(n_full);
  const uint64_t id = prefix_id(full.first(b), cache_salt);

  auto it = entries_.find(id);
  // A 64-bit key collision (different first block or salt) starts the entry afresh.
  if (it != entries_.end() &&
      (it->second.cache_salt != cache_salt ||
       !std::equal(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(b),
                   it->second.tokens.begin()))) {
    entries_.erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    if (entries_.size() >= capacity_) {
      // Drop the least recently used entry, unpinned ones first.
      auto victim = entries_.end();
      for (auto e = entries_.begin(); e != entries_.end(); ++e) {
        if (victim == entries_.end()) {
          victim = e;
          continue;
        }
        const PrefixEntry& a = e->second;
        const PrefixEntry& v = victim->second;
        if (a.pinned != v.pinned
                ? !a.pinned
                : (a.last_use_ms != v.last_use_ms ? a.last_use_ms < v.last_use_ms : a.id < v.id)) {
          victim = e;
        }
      }
      entries_.erase(victim);
    }
    PrefixEntry fresh;
    fresh.id = id;
    fresh.cache_salt = cache_salt;
    fresh.tokens.assign(full.begin(), full.end());
    fresh.first_seen_ms = now_ms;
    it = entries_.emplace(id, std::move(fresh)).first;
  } else {
    // Shrink to the block-aligned common prefix with this prompt.
    std::vector<int32_t>& t = it->second.tokens;
    const size_t n = std::min(t.size(), full.size());
    size_t common = 0;
    while (common < n && t[common] == full[common]) ++common;
    common = std::max(b, common / b * b);
    if (common < t.size()) t.resize(common);
  }
  PrefixEntry& e = it->second;
  e.last_use_ms = std::max(e.last_use_ms, now_ms);
  return &e;
}

void PrefixTracker::record(std::span<const int32_t> prompt, const std::string& cache_salt,
                           const PrefixUse& use, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixEntry* e = entry_for(prompt, cache_salt, now_ms);
  if (e == nullptr) return;
  ++e->requests;
  if (use.cached_tokens > 0) {
    ++e->hits;
    e->cached_tokens += use.cached_tokens;
    // The tier that supplied most of the cached tokens.
    const std::pair<int32_t, const char*> tiers[] = {{use.device_tokens, "device"},
                                                     {use.host_tokens, "host"},
                                                     {use.disk_tokens, "disk"},
                                                     {use.remote_tokens, "remote"}};
    const auto* best = &tiers[0];
    for (const auto& t : tiers) best = t.first > best->first ? &t : best;
    e->last_hit_tier = best->second;
  }
}

void PrefixTracker::record_cache_call(std::span<const int32_t> prompt,
                                      const std::string& cache_salt, CacheCall call,
                                      int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixEntry* e = entry_for(prompt, cache_salt, now_ms);
  if (e == nullptr) return;
  switch (call) {
    case CacheCall::kPin:
      e->pinned = true;
      break;
    case CacheCall::kUnpin:
      e->pinned = false;
      break;
    case CacheCall::kPrefetch:
      ++e->prefetches;
      break;
  }
}

std::vector<PrefixEntry> PrefixTracker::hottest(size_t limit) const {
  std::vector<const PrefixEntry*> all;
  std::lock_guard<std::mutex> lock(mu_);
  all.reserve(entries_.size());
  for (const auto& [id, e] : entries_) all.push_back(&e);
  auto hotter = [](const PrefixEntry* a, const PrefixEntry* b) {
    if (a->hits != b->hits) return a->hits > b->hits;
    if (a->requests != b->requests) return a->requests > b->requests;
    if (a->last_use_ms != b->last_use_ms) return a->last_use_ms > b->last_use_ms;
    return a->id < b->id;
  };
  const size_t n = std::min(limit, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), hotter);
  std::vector<PrefixEntry> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*all[i]);
  return out;
}

std::optional<PrefixEntry> PrefixTracker::find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

bool PrefixTracker::set_pinned(uint64_t id, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  it->second.pinned = pinned;
  return true;
}

void PrefixTracker::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

size_t PrefixTracker::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace prefixd
