// What callers hand to the engine (a Request) and what they get back (a
// RequestChannel of events). The channel is the only meeting point between
// an HTTP worker thread and the engine thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace prefixd {

enum class RequestKind : uint8_t {
  kGenerate,  // prefill then decode
  kPrefetch,  // compute (or onboard) the prompt's full blocks, generate nothing
};

struct Request {
  RequestKind kind = RequestKind::kGenerate;
  std::vector<int32_t> prompt;          // token ids, already validated against the vocabulary
  SamplingParams sampling;
  int32_t max_tokens = 16;              // generated tokens at most; 0: compute the prompt only
                                        // (with logprobs.prompt: score it), generate nothing
  std::vector<std::string> stop;        // stop strings (text)
  bool ignore_eos = false;
  std::string cache_salt;               // tenant isolation of cached blocks
  // Prompt lengths (token counts) the caller marked as prefixes to reuse
  // (`cache_control` breakpoints): a model with recurrent layers snapshots
  // its state at the last block boundary at or before each.
  std::vector<int32_t> reuse_positions;
  bool return_logits = false;           // attach each sampled position's logits to its event
  LogprobsOptions logprobs;             // token log-probabilities on the events (engine/logprobs.h)
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kError };

// Where a request's prompt tokens came from, and how long each phase took.
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;     // device + host + disk + remote
  int32_t device_tokens = 0;     // matched in the device pool
  int32_t host_tokens = 0;       // onboarded from host RAM
  int32_t disk_tokens = 0;       // onboarded from disk
  int32_t remote_tokens = 0;     // onboarded from the remote tier (memcached)
  int32_t prefill_tokens = 0;    // prompt tokens computed (prompt_tokens - cached_tokens, plus recompute after preemption)
  std::string onboard_path = "none";  // "none", "restore" or "recompute" (JSON: prefix_cache.restore_path)
  double queue_ms = 0;           // submit -> admitted
  double onboard_ms = 0;         // waiting for tier onboarding (JSON: prefix_cache.restore_ms)
  double prefill_ms = 0;         // admitted -> first token sampled (excluding onboard)
  double ttft_ms = 0;            // submit -> first token
  double decode_ms = 0;          // first token -> finish
  // Models that resume a recurrent state from state snapshots (qwen35,
  // unless --state-snapshots 0; else has_state is false and the rest unset): the
  // position the state was resumed at (0: computed from the first token;
  // when resumed, equal to cached_tokens) and where its snapshot came from:
  // "device" (a device snapshot slot), "tiers" (host, disk or remote) or
  // "none" (JSON: prefix_cache.state_resumed_tokens and state_from).
  bool has_state = false;
  int32_t state_resumed_tokens = 0;
  std::string state_from = "none";
};

// A request's events, in order: kPromptLogprobs (only with
// Request::logprobs.prompt, once the whole prompt is computed), kToken per
// generated token, then one kFinished or kError.
struct EngineEvent {
  enum class Type : uint8_t { kToken, kFinished, kError, kPromptLogprobs } type = Type::kToken;
  int32_t token = -1;      // kToken
  std::string text;        // kToken: text that became safe to emit (may be empty); kFinished: any held-back text
  FinishReason finish = FinishReason::kNone;  // kFinished
  Usage usage;             // kFinished
  std::string error;       // kError
  std::vector<float> logits;  // kToken with Request::return_logits: (n_vocab) f32 of the sampled position
  std::optional<PositionLogprobs> logprobs;  // kToken with Request::logprobs.sampled
  std::vector<PositionLogprobs> prompt_logprobs;  // kPromptLogprobs: (n_prompt - 1), tokens 1..
};

// A single-producer (engine) / single-consumer (HTTP worker) event queue plus
// a cancel flag the consumer may set at any time.
class RequestChannel {
 public:
  void push(EngineEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` for at least one event; returns all pending events.
  std::vector<EngineEvent> wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    std::vector<EngineEvent> out(std::make_move_iterator(events_.begin()),
                                 std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
  }
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace prefixd
