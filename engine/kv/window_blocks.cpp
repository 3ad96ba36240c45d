// WindowBlocks: window parts of logical blocks, their references, pins, LRU
// and free list. See window_blocks.h for the contract.
#include "engine/kv/window_blocks.h"

#include <algorithm>
#include <string>

namespace prefixd {

WindowBlocks::WindowBlocks(int32_t n_window_blocks, int32_t window_tokens, const BlockManager& blocks,
                           EvictFn on_evict)
    : blocks_(blocks),
      on_evict_(std::move(on_evict)),
      window_tokens_(window_tokens),
      block_size_(blocks.block_size()),
      parts_(static_cast<size_t>(n_window_blocks)),
      part_of_(static_cast<size_t>(blocks.n_blocks()), -1) {
  PREFIXD_CHECK(n_window_blocks >= 2, "window space needs at least 2 blocks (block 0 is reserved)");
  PREFIXD_CHECK(window_tokens > 0, "window tokens must be > 0");
  // Block 0 is reserved; the others are taken lowest first.
  for (int32_t b = n_window_blocks - 1; b >= 1; --b) free_.push_back(b);
}

void WindowBlocks::attach(int32_t logical) {
  int32_t p = of(logical);
  if (p >= 0) {
    // A part left from the id's previous use: unreferenced, reused as it is.
    Part& old = parts_[static_cast<size_t>(p)];
    PREFIXD_CHECK(old.ref == 0 && old.pinned == 0, "attach: the logical block's window part is in use");
    if (old.in_lru) lru_remove(p);
    old.ref = 1;
    return;
  }
  if (free_.empty()) {
    PREFIXD_CHECK(lru_tail_ >= 0, "attach: no free or cached window block (check can_allocate first)");
    const int32_t victim = lru_tail_;
    const int32_t owner = parts_[static_cast<size_t>(victim)].logical;
    if (on_evict_) on_evict_(owner);
    lru_remove(victim);
    free_part(victim);
    ++evictions_;
  }
  p = free_.back();
  free_.pop_back();
  Part& part = parts_[static_cast<size_t>(p)];
  part.logical = logical;
  part.ref = 1;
  part_of_[static_cast<size_t>(logical)] = p;
}

void WindowBlocks::hold(int32_t logical) {
  const int32_t p = of(logical);
  PREFIXD_CHECK(p >= 0, "hold: the logical block has no window part");
  Part& part = parts_[static_cast<size_t>(p)];
  if (part.in_lru) lru_remove(p);
  part.ref++;
}

void WindowBlocks::release(int32_t logical, bool passed) {
  const int32_t p = of(logical);
  PREFIXD_CHECK(p >= 0, "release: the logical block has no window part");
  Part& part = parts_[static_cast<size_t>(p)];
  PREFIXD_CHECK(part.ref > 0, "release: the window part is not referenced");
  if (--part.ref == 0 && part.pinned == 0) settle(p, passed);
}

void WindowBlocks::pin(int32_t logical) {
  const int32_t p = of(logical);
  PREFIXD_CHECK(p >= 0, "pin: the logical block has no window part");
  Part& part = parts_[static_cast<size_t>(p)];
  if (part.in_lru) lru_remove(p);
  part.pinned++;
}

void WindowBlocks::unpin(int32_t logical) {
  const int32_t p = of(logical);
  PREFIXD_CHECK(p >= 0, "unpin: the logical block has no window part");
  Part& part = parts_[static_cast<size_t>(p)];
  PREFIXD_CHECK(part.pinned > 0, "unpin: the window part is not pinned");
  if (--part.pinned == 0 && part.ref == 0) settle(p);
}

void WindowBlocks::forget(int32_t logical) {
  const int32_t p = of(logical);
  if (p < 0) return;
  Part& part = parts_[static_cast<size_t>(p)];
  PREFIXD_CHECK(part.ref == 0 && part.pinned == 0, "forget: the window part is in use");
  if (part.in_lru) lru_remove(p);
  free_part(p);
}

void WindowBlocks::move(int32_t from, int32_t to) {
  const int32_t p = of(from);
  PREFIXD_CHECK(p >= 0, "move: the source block has no window part");
  PREFIXD_CHECK(of(to) < 0, "move: the destination block already has a window part");
  part_of_[static_cast<size_t>(from)] = -1;
  part_of_[static_cast<size_t>(to)] = p;
  parts_[static_cast<size_t>(p)].logical = to;
}

int32_t WindowBlocks::clear() {
  int32_t n = 0;
  while (lru_tail_ >= 0) {
    const int32_t p = lru_tail_;
    lru_remove(p);
    free_part(p);
    ++n;
  }
  return n;
}

// ---- hits -------------------------------------------------------------------------

int32_t WindowBlocks::first_block(int32_t pos) const {
  return std::max(0, pos - window_tokens_ + 1) / block_size_;
}

int32_t WindowBlocks::resume_position(int32_t k, int32_t n_tokens) const {
  return k * block_size_ >= n_tokens ? std::max(0, k - 1) * block_size_ : k * block_size_;
}

int32_t WindowBlocks::usable_prefix(std::span<const int32_t> chain, int32_t n_tokens) const {
  for (int32_t k = static_cast<int32_t>(chain.size()); k > 0; --k) {
    const int32_t first = first_block(resume_position(k, n_tokens));
    bool whole = true;
    for (int32_t j = k - 1; j >= first && whole; --j) whole = of(chain[static_cast<size_t>(j)]) >= 0;
    if (whole) return k;
  }
  return 0;
}

// ---- internals --------------------------------------------------------------------

void WindowBlocks::settle(int32_t p, bool old_end) {
  Part& part = parts_[static_cast<size_t>(p)];
  if (blocks_.is_indexed(part.logical)) {
    if (old_end) {
      lru_push_back(p);
    } else {
      lru_push_front(p);
    }
  } else {
    free_part(p);
  }
}

void WindowBlocks::free_part(int32_t p) {
  Part& part = parts_[static_cast<size_t>(p)];
  if (part.logical >= 0 && part_of_[static_cast<size_t>(part.logical)] == p)
    part_of_[static_cast<size_t>(part.logical)] = -1;
  part = Part{};
  free_.push_back(p);
}

void WindowBlocks::lru_push_front(int32_t p) {
  Part& part = parts_[static_cast<size_t>(p)];
  part.in_lru = true;
  part.lru_prev = -1;
  part.lru_next = lru_head_;
  if (lru_head_ >= 0) parts_[static_cast<size_t>(lru_head_)].lru_prev = p;
  lru_head_ = p;
  if (lru_tail_ < 0) lru_tail_ = p;
  lru_size_++;
}

void WindowBlocks::lru_push_back(int32_t p) {
  Part& part = parts_[static_cast<size_t>(p)];
  part.in_lru = true;
  part.lru_next = -1;
  part.lru_prev = lru_tail_;
  if (lru_tail_ >= 0) parts_[static_cast<size_t>(lru_tail_)].lru_next = p;
  lru_tail_ = p;
  if (lru_head_ < 0) lru_head_ = p;
  lru_size_++;
}

void WindowBlocks::lru_remove(int32_t p) {
  Part& part = parts_[static_cast<size_t>(p)];
  if (part.lru_prev >= 0) {
    parts_[static_cast<size_t>(part.lru_prev)].lru_next = part.lru_next;
  } else {
    lru_head_ = part.lru_next;
  }
  if (part.lru_next >= 0) {
    parts_[static_cast<size_t>(part.lru_next)].lru_prev = part.lru_prev;
  } else {
    lru_tail_ = part.lru_prev;
  }
  part.in_lru = false;
  part.lru_prev = part.lru_next = -1;
  lru_size_--;
}

// ---- introspection ----------------------------------------------------------------

WindowBlocksStats WindowBlocks::stats() const {
  WindowBlocksStats s;
  s.blocks_total = static_cast<int32_t>(parts_.size());
  s.blocks_cached = lru_size_;
  s.blocks_free = static_cast<int32_t>(free_.size());
  s.blocks_referenced_or_pinned = s.blocks_total - 1 - s.blocks_cached - s.blocks_free;
  s.evictions = evictions_;
  return s;
}

Status WindowBlocks::check_invariants(const std::vector<int32_t>* expected_refs) const {
  std::vector<uint8_t> on_free(parts_.size(), 0);
  for (int32_t p : free_) {
    if (p <= 0 || p >= static_cast<int32_t>(parts_.size()) || on_free[static_cast<size_t>(p)])
      return Status::error("window free list holds block " + std::to_string(p) + " wrongly");
    on_free[static_cast<size_t>(p)] = 1;
  }
  int32_t n_lru = 0;
  for (int32_t p = lru_head_; p >= 0; p = parts_[static_cast<size_t>(p)].lru_next) {
    const Part& part = parts_[static_cast<size_t>(p)];
    if (!part.in_lru || part.ref != 0 || part.pinned != 0)
      return Status::error("window block " + std::to_string(p) + " is in the LRU while in use");
    if (++n_lru > static_cast<int32_t>(parts_.size())) return Status::error("window LRU has a cycle");
  }
  if (n_lru != lru_size_) return Status::error("window LRU size differs from its list");
  for (size_t p = 1; p < parts_.size(); ++p) {
    const Part& part = parts_[p];
    if (on_free[p] != (part.logical < 0))
      return Status::error("window block " + std::to_string(p) + " is free and mapped, or neither");
    if (part.logical >= 0 && part_of_[static_cast<size_t>(part.logical)] != static_cast<int32_t>(p))
      return Status::error("window block " + std::to_string(p) + " and its logical block disagree");
    if (part.logical >= 0 && part.ref == 0 && part.pinned == 0 && !part.in_lru)
      return Status::error("window block " + std::to_string(p) + " is unreferenced and not cached");
  }
  if (expected_refs != nullptr) {
    for (size_t l = 0; l < part_of_.size(); ++l) {
      const int32_t p = part_of_[l];
      const int32_t ref = p >= 0 ? parts_[static_cast<size_t>(p)].ref : 0;
      if (ref != (*expected_refs)[l]) {
        return Status::error("logical block " + std::to_string(l) + "'s window part has " + std::to_string(ref) +
                             " references; sequences hold " + std::to_string((*expected_refs)[l]));
      }
    }
  }
  return Status();
}

}  // namespace prefixd
