// One request's life inside the engine: its tokens, its block table, how
// much of it is computed and published, and its per-request sampling and
// text state. Owned and touched by the engine thread only.
#pragma once

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
  uint64_t seed = 0;                   // namespace seed of its blocks (includes cache_salt)
  std::vector<BlockHash> hashes;       // chain hashes of its full blocks, computed as they fill
  int32_t n_published = 0;             // leading blocks published (or shared from the index)
  int32_t target_tokens = 0;           // computed tokens at which it is complete (prefetch)

  std::optional<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop;
  int32_t n_generated = 0;
  bool recomputing = false;            // preempted after generating; recomputing its known tokens

  Usage usage;
  bool first_admission_done = false;
  // The cache split of the latest admission. It becomes the request's usage
  // (and is added to the engine's counters) once, when the prompt is done:
  // at the first token, or at the end for prefetches and cancellations.
  bool cache_usage_committed = false;
  int32_t adm_host_tokens = 0;         // restored from host RAM at this admission
  int32_t adm_disk_tokens = 0;         // restored from disk at this admission
  const char* adm_restore_path = "none";
  int32_t n_device_matched = 0;        // kLoading: blocks matched in the pool
  Clock::time_point t_submit{}, t_admit{}, t_loading_start{}, t_first_token{};
};

}  // namespace prefixd
