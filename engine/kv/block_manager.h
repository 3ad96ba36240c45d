// BlockManager: the device pool's block ids, ref counts, free list, the
// verified prefix index (hash -> block) and the LRU of unreferenced cached
// blocks that supplies eviction. It deals in block ids only; the KV bytes live
// in the backend's KvPool.
//
// Thread-safety: none. One object is owned and called by the engine thread.
// It does no I/O and starts no threads; eviction reports through a callback.
//
// Block states:
//   free     ref 0, not indexed, on the free list (content meaningless)
//   private  ref > 0, not indexed (being filled, or a duplicate/collision copy)
//   ready    indexed with immutable content; referenced (ref > 0), pinned
//            (ref 0, pin > 0, never evicted) or cached (ref 0, pin 0, in LRU)
// A block is published (private -> ready) only once its K/V are written, so
// everything the index holds is complete. Requests that arrive while another
// is still computing the same blocks wait for them in the scheduler (its
// in-flight map, engine/scheduler.h), not here: the index has no "being
// computed" state. (It had one, used only by tests, beside the map the engine
// used; dropping it was the smaller change of the two, and a waiting request
// then holds no block at all.)
//
// Index invariants: an indexed block's parent (parent_block) is indexed and
// is what the index holds for parent_hash; pins are prefix-closed (pin() takes
// whole chains from the root). Evicting or dropping a block also drops its
// indexed descendants (they are unreachable without it), so the tail of a
// chain never outlives its head in the index.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "engine/kv/block_hash.h"

namespace prefixd {

// What the index knows about one published block. `tokens` points into the
// manager and is valid only during the call that received it.
struct BlockMeta {
  BlockHash hash;
  BlockHash parent_hash;           // kRootParentHash for a prompt's first block
  int32_t parent_block = -1;       // block id of the parent; -1 for a first block
  uint64_t namespace_seed = 0;     // the hash was computed with it
  uint64_t last_use = 0;           // manager tick of the last release / publish
  int32_t pinned = 0;              // pin count
  std::span<const int32_t> tokens; // (block_size) int32 token ids of the block
};

struct BlockManagerOptions {
  int32_t n_blocks = 0;            // pool size in blocks (> 0)
  int32_t block_size = 16;         // tokens per block (> 0)
  int32_t max_pinned_blocks = 0;   // cap on distinct pinned blocks (0 = no pinning)
};

// Counters and a snapshot of the block states.
struct BlockManagerStats {
  int32_t blocks_total = 0;
  int32_t blocks_referenced = 0;  // ref > 0 (private or ready)
  int32_t blocks_cached = 0;   // ref 0 and indexed (pinned ones included)
  int32_t blocks_free = 0;     // on the free list
  int32_t blocks_pinned = 0;   // pin > 0
  int64_t hits = 0;            // blocks matched (count_lookup)
  int64_t misses = 0;          // blocks looked up and not matched (count_lookup)
  int64_t evictions = 0;       // cached blocks reclaimed for reuse (on_evict calls)
  int64_t verify_failures = 0; // index hits rejected by token/parent/namespace checks
  int64_t publish_duplicates = 0;  // publish() found the same content already indexed
  int64_t publish_collisions = 0;  // publish() found the hash taken by other content
};

// The outcome of walking a prompt's hash chain through the index. Block ids
// are valid until the next mutating call; acquire() them at once.
struct MatchResult {
  std::vector<int32_t> block_ids;  // [n_ready] verified ready blocks, in chain order
  int32_t n_ready() const { return static_cast<int32_t>(block_ids.size()); }
};

// What a publish() call found.
enum class PublishOutcome : uint8_t {
  kPublished,      // the block is now indexed (ready)
  kDuplicate,      // the hash is indexed by another block with the same tokens, parent
                   // and namespace seed (existing_block); this block stays private.
                   // The caller may acquire existing_block and release its own.
  kCollision,      // the hash is indexed by another block with different content; this
                   // block stays private (and its chain below cannot be published)
  kParentMissing,  // parent_block is not the indexed block for parent_hash (or not
                   // referenced); the block stays private
};

struct PublishResult {
  PublishOutcome outcome = PublishOutcome::kPublished;
  int32_t existing_block = -1;     // kDuplicate / kCollision: the indexed block
};

// What a caller says about a filled private block.
struct PublishInfo {
  uint64_t namespace_seed = 0;
  BlockHash hash;
  BlockHash parent_hash;            // kRootParentHash for a first block
  int32_t parent_block = -1;        // the caller's block for the parent; -1 for a first block
  std::span<const int32_t> tokens;  // (block_size) int32 token ids
};

class BlockManager {
 public:
  // Called with a cached block about to be reclaimed (its bytes are still
  // intact in the pool during the call). Used to offload the block to host RAM.
  using EvictFn = std::function<void(int32_t block_id, const BlockMeta& meta)>;

  explicit BlockManager(const BlockManagerOptions& options, EvictFn on_evict = nullptr);

  int32_t n_blocks() const { return options_.n_blocks; }
  int32_t block_size() const { return options_.block_size; }
  void set_on_evict(EvictFn on_evict) { on_evict_ = std::move(on_evict); }

  // --- lookup ---------------------------------------------------------------
  // Walks `hashes` (chain hashes of the prompt's full blocks under
  // `namespace_seed`) and returns the leading blocks that are indexed and
  // verified: same namespace seed, same token ids (tokens covers at least
  // hashes.size() * block_size ids), same parent hash and parent block as the
  // block matched before. A hash hit that fails verification is a miss.
  // Does not change ref counts or LRU order (a later acquire() does).
  MatchResult match(uint64_t namespace_seed, std::span<const BlockHash> hashes,
                    std::span<const int32_t> tokens);
  // Adds to the hit/miss counters (the engine calls it once per admission,
  // not for read-only lookups).
  void count_lookup(int32_t hit_blocks, int32_t missed_blocks);

  // --- references -----------------------------------------------------------
  // ref + 1 on each block; each must be ready (typically match().block_ids).
  // Cached blocks leave the LRU.
  void acquire(std::span<const int32_t> block_ids);
  // True when n blocks can be allocated now (free + evictable cached).
  bool can_allocate(int32_t n) const;
  // Blocks an allocation can get now: free plus evictable (cached, unpinned).
  int32_t n_allocatable() const;
  // Returns n private blocks (ref 1): free blocks first, then cached blocks
  // evicted from the LRU tail (on_evict is called for each, and for any
  // cached descendants dropped with it). Requires can_allocate(n).
  std::vector<int32_t> allocate(int32_t n);
  // ref - 1 on each block, last to first (so a chain's tail enters the LRU
  // older than its head). At ref 0: private blocks return to the free list;
  // ready blocks stay findable (LRU, or pinned).
  void release(std::span<const int32_t> block_ids);

  // --- publishing -----------------------------------------------------------
  // Makes a referenced private block, whose K/V are written, findable under
  // info.hash (ready). The block is not modified when the outcome is not
  // kPublished.
  PublishResult publish(int32_t block_id, const PublishInfo& info);
  bool is_indexed(int32_t block_id) const;

  // --- pinning --------------------------------------------------------------
  // pin + 1 on each block of `chain` (a root-first chain of ready blocks, as
  // match() returns). Pinned blocks are never evicted or cleared. Fails,
  // pinning nothing, when the chain is not a valid indexed chain or when it
  // would take the number of distinct pinned blocks above max_pinned_blocks.
  Status pin(std::span<const int32_t> chain);
  // pin - 1 on each block; fails, changing nothing, if a block is not pinned.
  Status unpin(std::span<const int32_t> chain);

  // Drops every unreferenced, unpinned cached block from the index (no
  // on_evict: the content is discarded). Returns the number dropped.
  int32_t clear();

  // --- introspection --------------------------------------------------------
  int32_t ref_count(int32_t block_id) const;
  // Metadata of an indexed block (tokens valid until the next mutating call).
  BlockMeta meta(int32_t block_id) const;
  BlockManagerStats stats() const;
  // Checks every internal invariant; with `expected_refs` ([n_blocks], the
  // references the caller's sequences hold), also that ref counts equal them.
  // Returns the first violation found.
  Status check_invariants(const std::vector<int32_t>* expected_refs = nullptr) const;

 private:
  enum class State : uint8_t { kFree, kPrivate, kReady };

  struct Block {
    State state = State::kFree;
    int32_t ref = 0;
    int32_t pinned = 0;
    bool in_lru = false;
    int32_t lru_prev = -1;         // towards the LRU head (newer)
    int32_t lru_next = -1;         // towards the LRU tail (older)
    BlockHash hash;
    BlockHash parent_hash;
    int32_t parent_block = -1;
    uint64_t namespace_seed = 0;
    uint64_t last_use = 0;
    std::vector<int32_t> children;  // indexed blocks whose parent_block is this one
  };

  bool indexed(const Block& b) const { return b.state == State::kReady; }
  // check_invariants()'s parts: the free list and the LRU list (marking the
  // ids they hold), one block's state, one block's index and tree links.
  Status check_free_list(std::vector<uint8_t>* on_free) const;
  Status check_lru(std::vector<uint8_t>* on_lru) const;
  Status check_block_state(int32_t id, bool on_free, bool on_lru) const;
  Status check_block_links(int32_t id) const;
  std::span<const int32_t> tokens_of(int32_t block_id) const;
  void check_id(int32_t block_id) const;

  void lru_push_front(int32_t block_id);  // newest end
  void lru_remove(int32_t block_id);
  // Removes block_id and all its indexed descendants from the index. Blocks
  // that end unreferenced go to the free list; with `evicting`, on_evict is
  // called for each of them first. Referenced ones become private.
  void unindex_subtree(int32_t block_id, bool evicting);
  void unindex_one(int32_t block_id, bool evicting);
  void evict_one();  // reclaims the LRU tail

  BlockManagerOptions options_;
  EvictFn on_evict_;
  std::vector<Block> blocks_;              // [n_blocks]
  std::vector<int32_t> tokens_;            // (n_blocks, block_size) int32 token ids of indexed blocks
  std::vector<int32_t> free_list_;         // stack of free block ids (back is taken first)
  std::unordered_map<BlockHash, int32_t, Hash128Hasher> index_;  // hash -> block id
  int32_t lru_head_ = -1;                  // newest cached block
  int32_t lru_tail_ = -1;                  // oldest cached block (evicted first)
  int32_t lru_size_ = 0;
  int32_t n_pinned_ = 0;                   // blocks with pinned > 0
  uint64_t tick_ = 0;
  BlockManagerStats counters_;             // only the int64 counters are kept here
};

}  // namespace prefixd
