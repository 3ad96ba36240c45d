// Scheduler: admission (prefix match in the device pool, in-flight
// coalescing, the tiers' offer), batch planning (decode steps first, then
// prefill chunks of the oldest sequences, within max_batch_tokens) and
// preemption (the newest sequence gives its blocks back when the pool runs
// out), over Sequences and the BlockManager.
//
// A plain object: no model, no I/O, no threads, no clock (time comes in as a
// parameter). What it needs from the world outside (copying a pool block,
// asking the tiers, offloading a published block) goes through SchedulerHooks,
// so tests drive it with plain functions. Thread-safety: none; one thread
// owns it (the engine thread).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/hash128.h"
#include "common/result.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/window_blocks.h"
#include "engine/sequence.h"

namespace prefixd {

struct SchedulerOptions {
  int32_t block_size = 16;         // tokens per block (the BlockManager's)
  int32_t max_batch_tokens = 512;  // tokens per forward pass (chunked prefill budget)
  int32_t max_running = 64;        // admitted sequences (running or loading) at most
  // Logits rows per pass for sequences that want every prompt position's
  // logits (prompt logprobs): their prefill chunks are cut to fit, so a pass
  // has at most max_running + max_prompt_logits_rows logits rows.
  int32_t max_prompt_logits_rows = 64;
  // false for a model with recurrent layers (qwen35): a cached prefix is of
  // no use without the recurrent state at its end, so the plain block match
  // (and in-flight coalescing, and the plain tiers' offer) is off for it. Such
  // a model resumes a prefix only through state snapshots (state_snapshots).
  bool prefix_reuse = true;
  // A recurrent model with snapshot slots (engine/state_snapshots.h): a hit
  // is the longest prefix of k blocks (k*block_size below the known tokens'
  // count) whose state SchedulerHooks::resume_state restores, its blocks
  // matched in the pool or, when the tiers offer them and a snapshot ends
  // there (SchedulerHooks::has_state), onboarded after the pool's match (the
  // state is restored once they arrive, cut back to the longest onboarded
  // prefix that still has one); prefill chunks end at snapshot boundaries
  // (ScheduledChunk::snapshot_blocks): every snapshot_interval_blocks blocks
  // (0: none), each of the request's reuse positions, and the last block
  // boundary before the prompt's end ((n_prompt - 1) / block_size blocks).
  bool state_snapshots = false;
  int32_t snapshot_interval_blocks = 0;
};

// What the tiers below the pool hold of blocks [from, to) of a sequence's
// chain, and whether onboarding them beats recomputing them.
struct TierOffer {
  int32_t n_blocks = 0;  // leading blocks of the range the tiers hold
  bool onboard = false;  // onboard them (else they are recomputed)
};

// What the scheduler asks of its owner (the engine: the backend and the
// tiers; tests: plain functions). copy_block is required; the others may be
// empty (no tiers; nothing to do on publish).
struct SchedulerHooks {
  // Copies one pool block's K/V into another (the shared last block of a
  // wholly cached prompt goes to a private block where its last token is
  // recomputed: shared blocks are never written).
  std::function<void(int32_t src_block, int32_t dst_block)> copy_block;
  // The tiers' offer for blocks [from_block, to_block) of the sequence's
  // chain (the blocks before from_block are matched in the pool). Empty: no tiers.
  std::function<TierOffer(const Sequence& seq, int32_t from_block, int32_t to_block)> offer;
  // Starts onboarding blocks [from_block, to_block) of the chain into the
  // pool blocks reserved for them (seq.block_table[from_block .. to_block)).
  // The owner calls onboarded() when the tiers answer. Required with `offer`.
  std::function<void(const Sequence& seq, int32_t from_block, int32_t to_block)> onboard;
  // A block of the sequence (seq.block_table[block_index], hash
  // seq.hashes[block_index]) has just been published in the index under its
  // own id (not a duplicate of another): e.g. a write-through offload.
  std::function<void(const Sequence& seq, int32_t block_index)> published;
  // state_snapshots: fills the sequence's state slot with the state after
  // its first n_blocks blocks (a snapshot keyed by seq.hashes[n_blocks - 1]);
  // false when there is none. Required with state_snapshots. It may record
  // where the snapshot came from (seq.cache.state_resumed).
  std::function<bool(Sequence& seq, int32_t n_blocks)> resume_state;
  // state_snapshots with tiers: whether resume_state(seq, n_blocks) would
  // find a snapshot (on the device or in the tiers), without restoring it.
  // Required with state_snapshots and `offer`.
  std::function<bool(const Sequence& seq, int32_t n_blocks)> has_state;
};

// One sequence's share of a forward pass: its known tokens
// [n_computed, n_computed + n_tokens), at those positions.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t n_tokens = 0;
  bool is_decode = false;   // the one token sampled last step (not counted as prefill)
  int32_t logits_row = -1;  // its row of the pass's logits when it completes a
                            // generate request's known tokens (then sample), else -1
  int32_t all_logits_row = -1;  // when it wants every row's logits (prompt logprobs): the
                                // row of its first token; its rows are [all_logits_row,
                                // all_logits_row + n_tokens) (logits_row, if any, the last)
  // state_snapshots: > 0 when the chunk ends exactly at this snapshot
  // boundary (a block count): after the pass, the sequence's state slot holds
  // the state after its first snapshot_blocks blocks, to be snapshotted
  // under seq.hashes[snapshot_blocks - 1].
  int32_t snapshot_blocks = 0;
  // The boundary is among generated tokens (past the prompt): the snapshot
  // replaces the sequence's previous such one (Sequence::generated_snapshot_blocks).
  bool generated_snapshot = false;
};

// The plan of one step.
struct StepPlan {
  // Batch order: decode steps, then prefill chunks, oldest first.
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> completed;  // prefetches with nothing left to compute: to finish
  std::vector<Sequence*> too_big;    // alone in the engine and still short of blocks: the pool
                                     // (less its pins) cannot hold it; to fail
};

struct SchedulerStats {
  int64_t prompt_tokens = 0;  // prompt tokens of admitted requests (counted at first admission)
  int64_t preemptions = 0;
  // state_snapshots: admissions resumed from a snapshot, and those whose
  // matched blocks had none at any of their boundaries.
  int64_t snapshot_hits = 0;
  int64_t snapshot_misses = 0;
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler; its block size is options.block_size.
  // `window` (a sliding-window model's window space, over `blocks`; may be
  // null) must outlive it too. With it, every block a sequence allocates
  // gets a window part, a sequence keeps the parts of the blocks its next
  // rows' windows reach (Sequence::window_first), and a prefix hit is only as
  // long as WindowBlocks::usable_prefix() allows: blocks past it are
  // recomputed (published again as duplicates, which gives the published
  // block its window part back).
  Scheduler(const SchedulerOptions& options, BlockManager& blocks, SchedulerHooks hooks,
            WindowBlocks* window = nullptr);

  // Queues a new sequence at the back of the waiting queue. Its id (unique),
  // request and namespace_seed are set; the rest is the scheduler's to fill.
  void add(std::unique_ptr<Sequence> seq);

  // Admits waiting sequences, in queue order, while fewer than max_running
  // are admitted. An admitted sequence takes the leading blocks of its chain
  // found in the pool; when the tiers offer to onboard the rest of the chain
  // (and the pool has room), it reserves blocks for them, goes kLoading and
  // hooks.onboard is called; otherwise it runs from its pool blocks. A
  // sequence that wants every prompt position's logits (prompt logprobs)
  // matches nothing and computes its whole prompt; it still publishes its
  // blocks (a duplicate of a cached block is shared, as for anyone).
  //
  // In-flight coalescing: a sequence whose next uncached block another
  // admitted sequence is computing stays waiting (sequences behind it may
  // pass), and is admitted once that block is published, sharing it. The
  // scheduler keeps these blocks in its own map (hash -> the sequence
  // computing it) rather than as "pending" entries of the BlockManager's
  // index: a waiting sequence then holds no blocks and no references, and the
  // index only ever holds complete blocks.
  void admit(Clock::time_point now);

  // The tiers wrote `n_onboarded` leading blocks of a loading sequence's
  // offered range into its reserved blocks, `n_from_host` of them from host
  // RAM and `n_from_remote` from the remote tier (the rest from disk):
  // returns the reserved blocks left unfilled, publishes the onboarded ones
  // and starts the sequence running after them.
  void onboarded(Sequence& seq, int32_t n_onboarded, int32_t n_from_host, int32_t n_from_remote);

  // Plans the next forward pass: decode steps first, then prefill chunks of
  // the oldest sequences, within max_batch_tokens (and, for sequences that
  // want every row's logits, max_prompt_logits_rows), allocating the blocks each
  // chunk writes. When the pool runs out, the newest running sequence
  // admitted after the one being planned (and not already planned) is
  // preempted: its blocks are released and it goes back to the front of the
  // waiting queue, to be recomputed. A chunk shrinks to the blocks it can
  // get; a sequence that gets none steps back (preempted) unless it is alone,
  // in which case it is reported too big, or, while blocks are held outside
  // any sequence (set_blocks_held_outside), waits for them.
  StepPlan plan_step();

  // Blocks referenced by something other than a sequence (write-through
  // copies still being read by the offload thread): they return to the pool
  // soon, so a sequence short of blocks waits for them instead of being
  // reported too big. The engine sets it before each plan_step().
  void set_blocks_held_outside(int32_t n_blocks) { blocks_held_outside_ = n_blocks; }

  // A forward pass computed the chunk's `n_tokens`: advances the sequence
  // and publishes its newly filled blocks.
  void advance(Sequence& seq, int32_t n_tokens);

  // Releases the sequence's blocks and destroys it (finished, failed or cancelled).
  void remove(Sequence& seq);

  // The admitted sequence `id` waiting for its onboarding, or nullptr (it was
  // cancelled or removed meanwhile).
  Sequence* find_loading(uint64_t id) const;
  // Not admitted (or preempted), in admission order.
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  // Admitted: kRunning or kLoading, in admission order.
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const SchedulerOptions& options() const { return options_; }
  const SchedulerStats& stats() const { return stats_; }

  // The BlockManager's own invariants, and that each block's ref count equals
  // the references held by the sequences' block tables (and the same of the
  // window space's parts).
  Status check_invariants() const;

  // The sequence's window table for a batch: the window block of each of its
  // blocks from window_first on, block 0 (never written) before. Empty
  // without a window space.
  std::vector<int32_t> window_table(const Sequence& seq) const;

 private:
  // Allocation over both spaces: each new block gets a window part.
  bool can_allocate(int32_t n) const;
  int32_t n_allocatable() const;
  std::vector<int32_t> allocate(int32_t n);
  // Drops the references of block_table[i] (its window part's too when it
  // has one for the sequence).
  void release_block(Sequence& seq, int32_t i);
  void release_all(Sequence& seq);
  // Drops the window parts the sequence's next rows no longer reach.
  void trim_window(Sequence& seq);
  // hold / attach block_table[i]'s window part for the sequence.
  void hold_part(Sequence& seq, int32_t i);
  void attach_part(Sequence& seq, int32_t i);
  // The first block a sequence resuming after `n_blocks` of its blocks reads
  // in a window layer.
  int32_t window_first_block(const Sequence& seq, int32_t n_blocks) const;
  bool try_admit(Sequence& seq, Clock::time_point now);
  // try_admit()'s parts: the cached blocks matching the sequence's prefix
  // (none when it needs every prompt position's logits), cut to where a
  // window model can resume; how many blocks after the first k (of n_full)
  // the tiers below offer to onboard (*path "recompute" when they hold some
  // but would not); the matched blocks taken as the table's start; and the
  // n_below blocks after k reserved for the tiers' chain, the sequence then
  // waiting in `loading` (window parts from block onboard_first on).
  MatchResult match_prefix(const Sequence& seq, bool whole_prompt) const;
  int32_t offer_below(const Sequence& seq, int32_t k, int32_t n_full, const char** path);
  void take_matched(Sequence& seq, const std::vector<int32_t>& block_ids);
  void start_loading(Sequence& seq, int32_t k, int32_t n_below, int32_t onboard_first,
                     Clock::time_point now);
  // Starts computing after the first n_device + n_onboarded blocks of the table.
  void start_running(Sequence& seq, int32_t n_device, int32_t n_onboarded);
  void publish_full_blocks(Sequence& seq);
  // plan_step()'s parts: the running sequences in step order; blocks for
  // n new positions of s (preempting newer sequences when short; returns the
  // tokens it can compute, 0 when it cannot run this pass); logits rows.
  std::vector<Sequence*> step_order() const;
  int32_t grant_blocks(Sequence& s, int32_t n, StepPlan& plan);
  // state_snapshots: the first snapshot boundary (a block count) after the
  // sequence's computed tokens, 0 when none is left in its known tokens.
  int32_t next_snapshot_boundary(const Sequence& s) const;
  // state_snapshots: marks `c` (the sequence's chunk) as ending at a
  // snapshot when it ends on a block boundary among generated tokens.
  void mark_generated_snapshot(Sequence& s, ScheduledChunk& c);
  // state_snapshots: the matched blocks cut to the longest prefix whose state resume_state restored.
  void cut_to_snapshot(Sequence& s, MatchResult& m);
  // state_snapshots: sets s.shared_blocks (the pool's match `m` and what
  // the tiers offer after it); with tiers, returns how many blocks after the
  // pool's match to onboard (0: none), the longest run the tiers offer that
  // ends at a snapshot has_state finds. *path as offer_below sets it.
  int32_t offer_state_below(Sequence& s, const MatchResult& m, const char** path);
  // state_snapshots: after onboarding, the state of the longest prefix of the
  // first n_blocks blocks that resume_state restores into the sequence's
  // slot; returns its block count (0: none, it starts from scratch).
  int32_t resume_after_onboard(Sequence& s, int32_t n_blocks);
  void assign_logits_rows(StepPlan& plan) const;
  Sequence* preemption_victim(const Sequence& seq,
                              const std::vector<ScheduledChunk>& planned) const;
  void preempt(Sequence& seq);
  void drop_inflight(const Sequence& seq);

  SchedulerOptions options_;
  BlockManager& blocks_;
  WindowBlocks* window_;
  SchedulerHooks hooks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  // In-flight blocks: hash of a block being computed -> the sequence computing it.
  std::unordered_map<BlockHash, uint64_t, Hash128Hasher> inflight_;
  uint64_t admit_counter_ = 0;
  int32_t blocks_held_outside_ = 0;  // set_blocks_held_outside()
  SchedulerStats stats_;
};

}  // namespace prefixd
