// BlockManager: ref counts, free list, verified prefix index and LRU eviction
// over block ids. See block_manager.h for the states and invariants.
#include "engine/kv/block_manager.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

namespace prefixd {

BlockManager::BlockManager(const BlockManagerOptions& options, EvictFn on_evict)
    : options_(options), on_evict_(std::move(on_evict)) {
  PREFIXD_CHECK(options_.n_blocks > 0, "BlockManager needs at least one block");
  PREFIXD_CHECK(options_.block_size > 0, "block_size must be positive");
  PREFIXD_CHECK(options_.max_pinned_blocks >= 0, "max_pinned_blocks must be >= 0");
  blocks_.resize(static_cast<size_t>(options_.n_blocks));
  tokens_.assign(static_cast<size_t>(options_.n_blocks) * options_.block_size, 0);
  free_list_.reserve(static_cast<size_t>(options_.n_blocks));
  // Descending, so that block 0 is handed out first (easier to read in logs).
  for (int32_t id = options_.n_blocks - 1; id >= 0; --id) free_list_.push_back(id);
  index_.reserve(static_cast<size_t>(options_.n_blocks) * 2);
}

void BlockManager::check_id(int32_t block_id) const {
  PREFIXD_CHECK(block_id >= 0 && block_id < options_.n_blocks, "block id out of range");
}

std::span<const int32_t> BlockManager::tokens_of(int32_t block_id) const {
  const size_t bs = static_cast<size_t>(options_.block_size);
  return std::span<const int32_t>(tokens_.data() + static_cast<size_t>(block_id) * bs, bs);
}

// --- LRU (intrusive doubly linked list; head = newest, tail = oldest) --------

void BlockManager::lru_push_front(int32_t block_id) {
  Block& b = blocks_[block_id];
  PREFIXD_CHECK(!b.in_lru, "block already in LRU");
  b.in_lru = true;
  b.lru_prev = -1;
  b.lru_next = lru_head_;
  if (lru_head_ >= 0) blocks_[lru_head_].lru_prev = block_id;
  lru_head_ = block_id;
  if (lru_tail_ < 0) lru_tail_ = block_id;
  ++lru_size_;
}

void BlockManager::lru_remove(int32_t block_id) {
  Block& b = blocks_[block_id];
  PREFIXD_CHECK(b.in_lru, "block not in LRU");
  if (b.lru_prev >= 0) {
    blocks_[b.lru_prev].lru_next = b.lru_next;
  } else {
    lru_head_ = b.lru_next;
  }
  if (b.lru_next >= 0) {
    blocks_[b.lru_next].lru_prev = b.lru_prev;
  } else {
    lru_tail_ = b.lru_prev;
  }
  b.in_lru = false;
  b.lru_prev = b.lru_next = -1;
  --lru_size_;
}

// --- lookup --------------------------------------------------------------------

MatchResult BlockManager::match(uint64_t namespace_seed, std::span<const BlockHash> hashes,
                                std::span<const int32_t> tokens) {
  const size_t bs = static_cast<size_t>(options_.block_size);
  PREFIXD_CHECK(tokens.size() >= hashes.size() * bs, "match: fewer tokens than hashed blocks");
  MatchResult r;
  r.block_ids.reserve(hashes.size());
  int32_t prev_id = -1;
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = index_.find(hashes[i]);
    if (it == index_.end()) break;
    const int32_t id = it->second;
    const Block& b = blocks_[id];
    const BlockHash& want_parent = i == 0 ? kRootParentHash : hashes[i - 1];
    const bool verified =
        b.namespace_seed == namespace_seed && b.hash == hashes[i] && b.parent_hash == want_parent &&
        b.parent_block == prev_id &&
        std::memcmp(tokens_of(id).data(), tokens.data() + i * bs, bs * sizeof(int32_t)) == 0;
    if (!verified) {
      ++counters_.verify_failures;
      break;
    }
    r.block_ids.push_back(id);
    prev_id = id;
  }
  return r;
}

void BlockManager::count_lookup(int32_t hit_blocks, int32_t missed_blocks) {
  counters_.hits += hit_blocks;
  counters_.misses += missed_blocks;
}

// --- references ------------------------------------------------------------------

void BlockManager::acquire(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    check_id(id);
    Block& b = blocks_[id];
    PREFIXD_CHECK(b.state == State::kReady, "acquire: block is not ready");
    if (b.in_lru) lru_remove(id);
    ++b.ref;
  }
}

bool BlockManager::can_allocate(int32_t n) const { return n >= 0 && n <= n_allocatable(); }

int32_t BlockManager::n_allocatable() const {
  return static_cast<int32_t>(free_list_.size()) + lru_size_;
}

std::vector<int32_t> BlockManager::allocate(int32_t n) {
  PREFIXD_CHECK(can_allocate(n), "allocate: not enough free or evictable blocks");
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    if (free_list_.empty()) evict_one();
    const int32_t id = free_list_.back();
    free_list_.pop_back();
    Block& b = blocks_[id];
    PREFIXD_CHECK(b.state == State::kFree && b.ref == 0, "free list holds a used block");
    b.state = State::kPrivate;
    b.ref = 1;
    out.push_back(id);
  }
  return out;
}

void BlockManager::release(std::span<const int32_t> block_ids) {
  for (auto it = block_ids.rbegin(); it != block_ids.rend(); ++it) {
    const int32_t id = *it;
    check_id(id);
    Block& b = blocks_[id];
    PREFIXD_CHECK(b.ref > 0, "release: block is not referenced");
    if (--b.ref > 0) continue;
    switch (b.state) {
      case State::kPrivate:
        b.state = State::kFree;
        free_list_.push_back(id);
        break;
      case State::kReady:
        b.last_use = ++tick_;
        if (b.pinned == 0) lru_push_front(id);
        break;
      case State::kFree:
        PREFIXD_CHECK(false, "release: free block had references");
    }
  }
}

// --- index removal ------------------------------------------------------------

void BlockManager::unindex_one(int32_t block_id, bool evicting) {
  Block& b = blocks_[block_id];
  PREFIXD_CHECK(indexed(b), "unindex: block is not indexed");
  PREFIXD_CHECK(b.pinned == 0, "unindex: block is pinned (pins must be prefix-closed)");
  const bool reclaim = b.ref == 0;
  if (reclaim && evicting && on_evict_) {
    BlockMeta m = meta(block_id);
    on_evict_(block_id, m);
  }
  auto it = index_.find(b.hash);
  PREFIXD_CHECK(it != index_.end() && it->second == block_id, "index does not hold the block");
  index_.erase(it);
  if (b.parent_block >= 0) {
    std::vector<int32_t>& siblings = blocks_[b.parent_block].children;
    auto pos = std::find(siblings.begin(), siblings.end(), block_id);
    PREFIXD_CHECK(pos != siblings.end(), "parent does not list the block as a child");
    *pos = siblings.back();
    siblings.pop_back();
  }
  b.children.clear();
  b.parent_block = -1;
  b.hash = BlockHash{};
  b.parent_hash = BlockHash{};
  b.namespace_seed = 0;
  if (reclaim) {
    if (b.in_lru) lru_remove(block_id);
    if (evicting) ++counters_.evictions;
    b.state = State::kFree;
    free_list_.push_back(block_id);
  } else {
    // Still used by a sequence (only if a caller released a parent before its
    // child): keeps its content privately and frees on its last release.
    b.state = State::kPrivate;
  }
}

void BlockManager::unindex_subtree(int32_t block_id, bool evicting) {
  // Post-order (descendants first), so the tail of a chain goes before its head.
  std::vector<int32_t> order;
  std::vector<int32_t> stack{block_id};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    order.push_back(id);
    for (int32_t child : blocks_[id].children) stack.push_back(child);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) unindex_one(*it, evicting);
}

void BlockManager::evict_one() {
  PREFIXD_CHECK(lru_tail_ >= 0, "evict: LRU is empty");
  unindex_subtree(lru_tail_, /*evicting=*/true);
}

// --- publishing -------------------------------------------------------------------

PublishResult BlockManager::publish(int32_t block_id, const PublishInfo& info) {
  check_id(block_id);
  Block& b = blocks_[block_id];
  PREFIXD_CHECK(b.state == State::kPrivate && b.ref > 0,
                "publish: block must be private and referenced");
  PREFIXD_CHECK(info.tokens.size() == static_cast<size_t>(options_.block_size),
                "publish: tokens must be one full block");
  PublishResult r;

  // The parent must be the block the index holds for parent_hash, and the
  // caller must be holding it (it is in the caller's block table).
  if (info.parent_block < 0) {
    if (!(info.parent_hash == kRootParentHash)) {
      r.outcome = PublishOutcome::kParentMissing;
      return r;
    }
  } else {
    check_id(info.parent_block);
    const Block& p = blocks_[info.parent_block];
    auto pit = index_.find(info.parent_hash);
    if (!indexed(p) || p.ref == 0 || pit == index_.end() || pit->second != info.parent_block) {
      r.outcome = PublishOutcome::kParentMissing;
      return r;
    }
  }

  auto it = index_.find(info.hash);
  if (it != index_.end()) {
    const int32_t existing = it->second;
    const Block& e = blocks_[existing];
    r.existing_block = existing;
    const bool same = e.namespace_seed == info.namespace_seed && e.parent_hash == info.parent_hash &&
                      e.parent_block == info.parent_block &&
                      std::equal(info.tokens.begin(), info.tokens.end(), tokens_of(existing).begin());
    if (same) {
      r.outcome = PublishOutcome::kDuplicate;
      ++counters_.publish_duplicates;
    } else {
      r.outcome = PublishOutcome::kCollision;
      ++counters_.publish_collisions;
    }
    return r;
  }

  index_.emplace(info.hash, block_id);
  b.state = State::kReady;
  b.hash = info.hash;
  b.parent_hash = info.parent_hash;
  b.parent_block = info.parent_block;
  b.namespace_seed = info.namespace_seed;
  b.last_use = ++tick_;
  b.children.clear();
  std::copy(info.tokens.begin(), info.tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block_id) * options_.block_size);
  if (info.parent_block >= 0) blocks_[info.parent_block].children.push_back(block_id);
  return r;
}

bool BlockManager::is_indexed(int32_t block_id) const {
  check_id(block_id);
  return indexed(blocks_[block_id]);
}

// --- pinning ------------------------------------------------------------------------

Status BlockManager::pin(std::span<const int32_t> chain) {
  int32_t n_new = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    const int32_t id = chain[i];
    if (id < 0 || id >= options_.n_blocks) return Status::error("pin: block id out of range");
    const Block& b = blocks_[id];
    if (b.state != State::kReady) return Status::error("pin: block is not a ready cached block");
    const int32_t want_parent = i == 0 ? -1 : chain[i - 1];
    if (b.parent_block != want_parent) return Status::error("pin: blocks do not form a chain from the root");
    if (b.pinned == 0) ++n_new;
  }
  if (n_pinned_ + n_new > options_.max_pinned_blocks) {
    return Status::error("pin: would pin " + std::to_string(n_pinned_ + n_new) +
                         " blocks, above the cap of " +
                         std::to_string(options_.max_pinned_blocks));
  }
  for (int32_t id : chain) {
    Block& b = blocks_[id];
    if (b.pinned++ == 0) {
      ++n_pinned_;
      if (b.in_lru) lru_remove(id);
    }
  }
  return Status::ok_status();
}

Status BlockManager::unpin(std::span<const int32_t> chain) {
  for (size_t i = 0; i < chain.size(); ++i) {
    const int32_t id = chain[i];
    if (id < 0 || id >= options_.n_blocks) return Status::error("unpin: block id out of range");
    if (blocks_[id].pinned == 0) return Status::error("unpin: block is not pinned");
    const int32_t want_parent = i == 0 ? -1 : chain[i - 1];
    if (blocks_[id].parent_block != want_parent) {
      return Status::error("unpin: blocks do not form a chain from the root");
    }
    // Pins stay prefix-closed (a pinned block's parent is pinned at least as
    // often): a longer pinned chain that branches off here keeps these pins.
    const int32_t next = i + 1 < chain.size() ? chain[i + 1] : -1;
    for (int32_t child : blocks_[id].children) {
      if (child != next && blocks_[child].pinned >= blocks_[id].pinned) {
        return Status::error("unpin: a longer pinned prefix extends these blocks; unpin it first");
      }
    }
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    Block& b = blocks_[*it];
    if (--b.pinned == 0) {
      --n_pinned_;
      if (b.ref == 0) {
        b.last_use = ++tick_;
        lru_push_front(*it);
      }
    }
  }
  return Status::ok_status();
}

int32_t BlockManager::clear() {
  const size_t free_before = free_list_.size();
  // Oldest first; a block may already be gone as a descendant of an earlier one.
  std::vector<int32_t> cached;
  cached.reserve(static_cast<size_t>(lru_size_));
  for (int32_t id = lru_tail_; id >= 0; id = blocks_[id].lru_prev) cached.push_back(id);
  for (int32_t id : cached) {
    if (blocks_[id].in_lru) unindex_subtree(id, /*evicting=*/false);
  }
  return static_cast<int32_t>(free_list_.size() - free_before);
}

// --- introspection ----------------------------------------------------------------

int32_t BlockManager::ref_count(int32_t block_id) const {
  check_id(block_id);
  return blocks_[block_id].ref;
}

BlockMeta BlockManager::meta(int32_t block_id) const {
  check_id(block_id);
  const Block& b = blocks_[block_id];
  PREFIXD_CHECK(indexed(b), "meta: block is not indexed");
  BlockMeta m;
  m.hash = b.hash;
  m.parent_hash = b.parent_hash;
  m.parent_block = b.parent_block;
  m.namespace_seed = b.namespace_seed;
  m.last_use = b.last_use;
  m.pinned = b.pinned;
  m.tokens = tokens_of(block_id);
  return m;
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats s = counters_;
  s.blocks_total = options_.n_blocks;
  s.blocks_referenced = s.blocks_cached = s.blocks_pinned = 0;
  for (const Block& b : blocks_) {
    if (b.ref > 0) ++s.blocks_referenced;
    if (b.ref == 0 && indexed(b)) ++s.blocks_cached;
    if (b.pinned > 0) ++s.blocks_pinned;
  }
  s.blocks_free = static_cast<int32_t>(free_list_.size());
  return s;
}

namespace {

Status block_error(int32_t id, const std::string& what) {
  return Status::error("block " + std::to_string(id) + ": " + what);
}

}  // namespace

Status BlockManager::check_invariants(const std::vector<int32_t>* expected_refs) const {
  const int32_t n = options_.n_blocks;
  if (expected_refs != nullptr && static_cast<int32_t>(expected_refs->size()) != n) {
    return Status::error("expected_refs has the wrong size");
  }
  std::vector<uint8_t> on_free(static_cast<size_t>(n), 0);
  if (Status s = check_free_list(&on_free); !s.ok()) return s;
  std::vector<uint8_t> on_lru(static_cast<size_t>(n), 0);
  if (Status s = check_lru(&on_lru); !s.ok()) return s;
  int32_t n_pinned = 0;
  int32_t n_indexed = 0;
  for (int32_t id = 0; id < n; ++id) {
    const Block& b = blocks_[id];
    if (expected_refs != nullptr && (*expected_refs)[id] != b.ref) {
      return block_error(id, "ref count " + std::to_string(b.ref) + " but callers hold " +
                                 std::to_string((*expected_refs)[id]));
    }
    if (Status s = check_block_state(id, on_free[id] != 0, on_lru[id] != 0); !s.ok()) return s;
    if (b.pinned > 0) ++n_pinned;
    if (Status s = check_block_links(id); !s.ok()) return s;
    if (indexed(b)) ++n_indexed;
  }
  if (static_cast<int32_t>(index_.size()) != n_indexed) {
    return Status::error("index holds " + std::to_string(index_.size()) + " entries for " +
                         std::to_string(n_indexed) + " indexed blocks");
  }
  if (n_pinned != n_pinned_) return Status::error("pinned counter is wrong");
  if (n_pinned_ > options_.max_pinned_blocks) return Status::error("more pinned blocks than the cap");
  return Status::ok_status();
}

// Free list: unique, free, unreferenced.
Status BlockManager::check_free_list(std::vector<uint8_t>* on_free) const {
  const int32_t n = options_.n_blocks;
  for (int32_t id : free_list_) {
    if (id < 0 || id >= n) return Status::error("free list holds an id out of range");
    if ((*on_free)[id]) return block_error(id, "on the free list twice");
    (*on_free)[id] = 1;
  }
  return Status::ok_status();
}

// LRU: a consistent list of cached (ref 0, unpinned, ready) blocks.
Status BlockManager::check_lru(std::vector<uint8_t>* on_lru) const {
  const int32_t n = options_.n_blocks;
  int32_t lru_count = 0;
  int32_t prev = -1;
  for (int32_t id = lru_head_; id >= 0; id = blocks_[id].lru_next) {
    if (id >= n) return Status::error("LRU holds an id out of range");
    if ((*on_lru)[id]) return block_error(id, "LRU has a cycle");
    (*on_lru)[id] = 1;
    if (blocks_[id].lru_prev != prev) return block_error(id, "LRU back link broken");
    prev = id;
    if (++lru_count > n) return Status::error("LRU longer than the pool");
  }
  if (prev != lru_tail_) return Status::error("LRU tail does not end the list");
  if (lru_count != lru_size_) return Status::error("LRU size counter is wrong");
  return Status::ok_status();
}

// One block's counts and state against the free list and the LRU.
Status BlockManager::check_block_state(int32_t id, bool on_free, bool on_lru) const {
  const Block& b = blocks_[id];
  if (b.ref < 0 || b.pinned < 0) return block_error(id, "negative ref or pin count");
  if (b.in_lru != on_lru) return block_error(id, "in_lru flag disagrees with LRU");
  const bool is_free = b.state == State::kFree;
  if (is_free != on_free) return block_error(id, "free state disagrees with free list");
  switch (b.state) {
    case State::kFree:
      if (b.ref != 0 || b.pinned != 0 || b.in_lru) return block_error(id, "free but referenced, pinned or cached");
      break;
    case State::kPrivate:
      if (b.ref == 0) return block_error(id, "private without references (leaked)");
      if (b.pinned != 0 || b.in_lru) return block_error(id, "private but pinned or cached");
      break;
    case State::kReady: {
      const bool should_be_in_lru = b.ref == 0 && b.pinned == 0;
      if (b.in_lru != should_be_in_lru) {
        return block_error(id, should_be_in_lru ? "unreferenced unpinned ready block missing from LRU"
                                                : "referenced or pinned block in LRU");
      }
      break;
    }
  }
  return Status::ok_status();
}

// One block's place in the index and the prefix tree (parent, children, pins).
Status BlockManager::check_block_links(int32_t id) const {
  const int32_t n = options_.n_blocks;
  const Block& b = blocks_[id];
  if (!indexed(b)) {
    if (!b.children.empty()) return block_error(id, "unindexed block has children");
    return Status::ok_status();
  }
  auto it = index_.find(b.hash);
  if (it == index_.end() || it->second != id) return block_error(id, "indexed block missing from the index");
  if (b.parent_block < 0) {
    if (!(b.parent_hash == kRootParentHash)) return block_error(id, "first block with a non-zero parent hash");
  } else {
    const Block& p = blocks_[b.parent_block];
    if (!indexed(p)) return block_error(id, "parent block is not indexed");
    if (!(p.hash == b.parent_hash)) return block_error(id, "parent hash differs from the parent block's hash");
    if (std::count(p.children.begin(), p.children.end(), id) != 1) {
      return block_error(id, "parent does not list the block as a child exactly once");
    }
    if (b.pinned > 0 && p.pinned == 0) return block_error(id, "pinned block with an unpinned parent");
  }
  for (int32_t c : b.children) {
    if (c < 0 || c >= n || !indexed(blocks_[c]) || blocks_[c].parent_block != id) {
      return block_error(id, "child list names a block that is not its indexed child");
    }
  }
  return Status::ok_status();
}

}  // namespace prefixd
