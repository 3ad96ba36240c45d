// WindowBlocks: the window space of a sliding-window model's KV pool
// (KvGeometry's window group): which logical block (a BlockManager id) has a
// window part (the window layers' K/V of that block) in which window block,
// the parts' references and pins, the LRU of unreferenced parts of published
// blocks, and the free list. A window layer reads only the positions within
// its window, so a logical block keeps its part only while something needs
// it: a sequence whose window covers the block, a pin, or the LRU (kept for
// later cache hits until the space is short).
//
// Window block 0 is never handed out: batch tables point the entries a window
// layer does not attend to at it (it stays zero, so a kernel that reads a
// whole key chunk before the window reads finite values).
//
// Thread-safety: none; the engine thread owns it, beside the BlockManager.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/result.h"
#include "engine/kv/block_manager.h"

namespace prefixd {

struct WindowBlocksStats {
  int32_t blocks_total = 0;   // window blocks, the reserved block 0 included
  int32_t blocks_referenced_or_pinned = 0;  // parts not free and not in the LRU
  int32_t blocks_cached = 0;  // unreferenced, unpinned parts of published blocks (LRU)
  int32_t blocks_free = 0;
  int64_t evictions = 0;      // cached parts reclaimed for reuse
};

class WindowBlocks {
 public:
  // Called with a cached part about to be reclaimed (its bytes still intact),
  // by the logical block it belongs to: the engine offloads the whole block
  // first when the tiers would otherwise never get it.
  using EvictFn = std::function<void(int32_t logical_block)>;

  // n_window_blocks: the window space (>= 2; block 0 is reserved);
  // window_tokens: the model's sliding window (> 0). `blocks` (outlives
  // this; its block size is used) decides whether an unreferenced part is
  // kept: only a published (indexed) block's is.
  WindowBlocks(int32_t n_window_blocks, int32_t window_tokens, const BlockManager& blocks,
               EvictFn on_evict = nullptr);
  void set_on_evict(EvictFn on_evict) { on_evict_ = std::move(on_evict); }

  // The window block of logical block `logical`, or -1 when it has no part.
  int32_t of(int32_t logical) const { return part_of_[static_cast<size_t>(logical)]; }

  // Parts an attach() can get now: free plus cached.
  int32_t n_allocatable() const { return static_cast<int32_t>(free_.size()) + lru_size_; }
  bool can_allocate(int32_t n) const { return n <= n_allocatable(); }

  // Gives a freshly allocated logical block a part (ref 1), from the free
  // list or by evicting the LRU tail (on_evict first). A part it still has
  // from the id's previous use (unreferenced: the block was freed or cleared
  // since) is reused. Requires can_allocate(1).
  void attach(int32_t logical);
  // ref + 1 on the block's part (which must exist); a cached part leaves the LRU.
  void hold(int32_t logical);
  // ref - 1; at 0 (and no pin) the part is cached when the block is published,
  // else freed. `passed`: the releasing sequence moved on past the block (its
  // window no longer reaches it), so the part enters the LRU at its old end,
  // to be evicted before the parts of chains' ends (released when their
  // sequences finish, at the new end): a long prompt then reuses its own
  // passed parts rather than evicting the ends of earlier prefixes.
  void release(int32_t logical, bool passed = false);
  // pin + 1 / - 1: a pinned part is never evicted (a pinned prefix's end).
  void pin(int32_t logical);
  void unpin(int32_t logical);
  // The logical block was evicted from the pool: its (unreferenced) part is
  // freed, without on_evict.
  void forget(int32_t logical);
  // Gives `from`'s part, with its references and pins, to `to`, which has
  // none (a sequence's block turned out to duplicate a published one that
  // had lost its part).
  void move(int32_t from, int32_t to);
  // Frees every cached part (no on_evict). Returns the number freed.
  int32_t clear();

  // The longest leading part of a matched chain that a sequence can resume
  // from: k blocks of `chain` (published, in chain order) are usable when
  // the window layers' K/V of every position the first computed row reads
  // are here, i.e. blocks [first_block(pos), k) have parts, where pos is the
  // first position computed after them (k * block_size, or the block before
  // when the chain covers all `n_tokens`: its last token is recomputed).
  int32_t usable_prefix(std::span<const int32_t> chain, int32_t n_tokens) const;
  // First logical block a row at position `pos` reads in a window layer.
  int32_t first_block(int32_t pos) const;
  // The first position computed after resuming from `k` cached blocks of a
  // sequence of `n_tokens` tokens (conservatively, the earlier one).
  int32_t resume_position(int32_t k, int32_t n_tokens) const;

  int32_t window_tokens() const { return window_tokens_; }
  int32_t n_blocks() const { return static_cast<int32_t>(parts_.size()); }

  WindowBlocksStats stats() const;
  // The internal structures agree; with `expected_refs` ([n logical blocks],
  // the parts' references the caller's sequences hold), the refs equal them.
  Status check_invariants(const std::vector<int32_t>* expected_refs = nullptr) const;

 private:
  struct Part {
    int32_t logical = -1;  // -1: free (or block 0)
    int32_t ref = 0;
    int32_t pinned = 0;
    bool in_lru = false;
    int32_t lru_prev = -1;  // towards the head (newer)
    int32_t lru_next = -1;  // towards the tail (older)
  };
  void lru_push_front(int32_t part);
  void lru_push_back(int32_t part);
  void lru_remove(int32_t part);
  void free_part(int32_t part);  // unmaps it and puts it on the free list
  void settle(int32_t part, bool old_end = false);  // ref 0 and unpinned: cache or free

  const BlockManager& blocks_;
  EvictFn on_evict_;
  int32_t window_tokens_ = 0;
  int32_t block_size_ = 1;
  std::vector<Part> parts_;         // [n_window_blocks]
  std::vector<int32_t> part_of_;    // [n logical blocks] -> window block or -1
  std::vector<int32_t> free_;       // stack of free window blocks
  int32_t lru_head_ = -1, lru_tail_ = -1, lru_size_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace prefixd
