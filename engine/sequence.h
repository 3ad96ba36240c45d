// One request's life inside the engine: its tokens, its block table, how
// much of it is computed and published, where its cached prompt tokens came
// from, and its per-request sampling and text state. Owned and touched by the
// engine thread only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/kv/block_hash.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/text/stop_matcher.h"
#include "engine/text/stream_decoder.h"

namespace prefixd {

enum class SeqState : uint8_t {
  kWaiting,   // queued, not admitted (or preempted, to be recomputed)
  kLoading,   // admitted; waiting for blocks onboarded from host/disk
  kRunning,   // computing its known tokens (prefill) or decoding
  kFinished,
};

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Prompt tokens found in each tier, summed over requests (EngineStats).
struct CachedTokenTotals {
  int64_t device = 0;
  int64_t host = 0;
  int64_t disk = 0;
  int64_t remote = 0;
};

// The cache split of a sequence's latest admission: how many of its prompt
// tokens were matched in the device pool and how many were onboarded from host
// RAM, from disk or from the remote tier. The one place where those figures are worked out: the
// scheduler records each admission and onboarding here, report() writes the
// split into the request's Usage when it starts computing, and commit() adds
// it, once, to the engine's totals when the prompt is done (at the first
// token, or at the end for prefetches and cancellations). A preempted
// sequence is admitted again before its first token; its usage then reports
// the latest admission.
struct CacheSplit {
  bool admitted = false;              // admitted at least once
  bool committed = false;             // added to the totals; usage final
  int32_t device_blocks = 0;          // matched in the pool at this admission
  int32_t onboarded_blocks = 0;        // onboarded from the tiers at this admission
  int32_t onboarded_host_blocks = 0;   // of which from host RAM
  int32_t onboarded_remote_blocks = 0;  // of which from the remote tier (the rest from disk)
  const char* admission_path = "none";  // "none", or "recompute" when the tiers held
                                        // blocks and recomputing them was chosen
  // State snapshots (recurrent models): the leading blocks whose state was
  // resumed at this admission (0: none) and where the snapshot came from
  // ("device", "tiers", "none"). The scheduler resets them before it asks
  // SchedulerHooks::resume_state, which records a restore (state_resumed).
  bool state_tracked = false;
  int32_t state_blocks = 0;
  const char* state_from = "none";

  // A new admission that matched `n_device_blocks` in the pool.
  void admit(int32_t n_device_blocks, const char* path) {
    admitted = true;
    device_blocks = n_device_blocks;
    onboarded_blocks = onboarded_host_blocks = onboarded_remote_blocks = 0;
    admission_path = path;
  }
  // An admission of a model with state snapshots looks for a state to resume.
  void state_lookup() {
    state_tracked = true;
    state_blocks = 0;
    state_from = "none";
  }
  // The state after the first `n_blocks` blocks was restored from `from`.
  void state_resumed(int32_t n_blocks, const char* from) {
    state_blocks = n_blocks;
    state_from = from;
  }
  // The tiers brought `n_blocks` leading blocks: up to `n_from_host` from host
  // RAM, up to `n_from_remote` (the chain's tail) from the remote tier, the
  // rest from disk.
  void onboarded(int32_t n_blocks, int32_t n_from_host, int32_t n_from_remote) {
    onboarded_blocks = n_blocks;
    onboarded_host_blocks = std::min(n_from_host, n_blocks);
    onboarded_remote_blocks = std::min(n_from_remote, n_blocks - onboarded_host_blocks);
  }
  // The sequence starts computing at `cached_tokens` (its device and onboarded
  // blocks, less a last block or token it recomputes): writes the split into
  // `usage`, unless the usage is already final.
  void report(int32_t cached_tokens, int32_t block_size, Usage& usage) const {
    if (committed) return;
    const int32_t device = std::min(cached_tokens, device_blocks * block_size);
    const int32_t below = cached_tokens - device;
    // Onboarded tokens keep their tier split. What is recomputed of them (the
    // last block or token) comes off the chain's tail: remote, then disk.
    const int32_t host = std::min(onboarded_host_blocks * block_size, below);
    const int32_t disk_blocks = onboarded_blocks - onboarded_host_blocks - onboarded_remote_blocks;
    const int32_t disk = std::min(disk_blocks * block_size, below - host);
    usage.device_tokens = device;
    usage.host_tokens = host;
    usage.disk_tokens = disk;
    usage.remote_tokens = below - host - disk;
    usage.cached_tokens = cached_tokens;
    usage.onboard_path = onboarded_blocks > 0 ? "restore" : admission_path;
    usage.has_state = state_tracked;
    usage.state_resumed_tokens = std::min(cached_tokens, state_blocks * block_size);
    usage.state_from = state_blocks > 0 ? state_from : "none";
  }
  // Adds the usage's split to `totals`, once, if the sequence was admitted.
  void commit(const Usage& usage, CachedTokenTotals& totals) {
    if (committed || !admitted) return;
    committed = true;
    totals.device += usage.device_tokens;
    totals.host += usage.host_tokens;
    totals.disk += usage.disk_tokens;
    totals.remote += usage.remote_tokens;
  }
};

struct Sequence {
  uint64_t id = 0;
  uint64_t admit_order = 0;            // larger = admitted later (preemption victim order)
  Request request;
  std::shared_ptr<RequestChannel> channel;
  SeqState state = SeqState::kWaiting;

  std::vector<int32_t> tokens;         // prompt followed by generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;              // leading tokens whose K/V are in the pool
  std::vector<int32_t> block_table;    // logical block -> pool block id
  // Window space (sliding-window models; else empty): whether the sequence
  // references block_table[i]'s window part (parallel to block_table). It
  // holds the parts of the blocks its next rows' windows reach and of the
  // ones it writes; none before window_first.
  std::vector<uint8_t> window_held;
  int32_t window_first = 0;
  uint64_t namespace_seed = 0;         // of its blocks (includes cache_salt)
  std::vector<BlockHash> hashes;       // chain hashes of its full blocks, computed as they fill
  int32_t n_published = 0;             // leading blocks published (or shared from the index)
  int32_t target_tokens = 0;           // computed tokens at which it is complete (prefetch)
  // Recurrent models: the block count of the snapshot taken at its latest
  // block boundary among generated tokens (0: none). Each new one replaces
  // it, so a running sequence keeps at most one such snapshot; the last one
  // lets the next turn of a conversation resume after this answer.
  int32_t generated_snapshot_blocks = 0;
  // Recurrent models: at its latest admission, how many leading blocks of
  // its prompt the pool and the tiers held (the point where it leaves a
  // cached prompt), up to its last resumable boundary; 0 when none. A
  // snapshot boundary: the next prompt sharing that prefix resumes there.
  int32_t shared_blocks = 0;

  std::optional<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop;
  int32_t n_generated = 0;
  bool recomputing = false;            // preempted after generating; recomputing its known tokens
  // Request::logprobs.prompt: logprobs of prompt tokens 1.. as their
  // positions are computed (entry i from position i), sent once complete.
  std::vector<PositionLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  // Needs the logits of every prompt position (computes its whole prompt).
  bool wants_prompt_logits() const { return request.logprobs.prompt && !prompt_logprobs_sent; }

  Usage usage;
  CacheSplit cache;                    // where its cached prompt tokens came from
  Clock::time_point t_submit{}, t_admit{}, t_loading_start{}, t_first_token{};
};

}  // namespace prefixd
