// GenerationSession: one generation request (/v1/completions,
// /v1/chat/completions, /v1/messages) from its gates to its end, whatever its
// dialect. The dialect's handler parses the body and renders the answer; the
// steps between live here, in order: the namespace salt, the gates (the
// tenant's max_concurrent, the admission gate), submit, the waits on the
// engine with the fold of its events and the latency histograms, the TTL pins
// of a completed answer, and the accounting of its end. (The route refuses a
// generation request while the daemon drains, before its handler runs.)
//
// Thread-safety: one thread at a time: the handler's HTTP worker, then, for a
// stream, the worker running the response's content provider.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daemon/api/call.h"
#include "daemon/api/completion_response.h"
#include "daemon/api/daemon_context.h"
#include "daemon/api/ttl_pins.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/http/api_result.h"
#include "daemon/http/reply.h"
#include "engine/request.h"

namespace prefixd {

using SteadyClock = std::chrono::steady_clock;

// The tenant's max_concurrent slot (with --api-keys; an empty ticket
// without, or for no tenant), or its 429 `tenant_concurrency_limit`
// (Retry-After set on `res`, the refusal counted) when the tenant has that
// many requests in flight. The first gate of a session, and of a prefetch.
ApiResult<TenantTicket> take_tenant_slot(DaemonContext& ctx, const Tenant* tenant, Reply& res);

// Whether the prefixes a completed answer pins count as cache breakpoints'
// hits and misses (prefixd_cache_breakpoints_total): /v1/messages'
// cache_control breakpoints do, prompt_cache_retention does not.
enum class BreakpointCount : uint8_t { kCount, kNoCount };

class GenerationSession {
 public:
  // Puts the caller's namespace into request.cache_salt (engine_salt), takes
  // the tenant's max_concurrent slot (with --api-keys) and one of the
  // admission gate, then submits the request to the engine. When a gate is
  // full: its 429 (Retry-After set on `res`), the request counted as
  // rejected in call.count, and no session.
  static ApiResult<std::unique_ptr<GenerationSession>> start(DaemonContext& ctx, const Call& call,
                                                            Request request, Reply& res);

  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;
  // A request that has not finished is cancelled (its stream ended early:
  // the engine frees its blocks) and counted as cancelled unless its end was
  // recorded. Releases the gates' slots.
  ~GenerationSession();

  // One wake-up: cancels the request when the daemon cancels everything,
  // waits up to kChannelPoll for events, folds them up to the one that ends
  // the request and feeds the latency histograms. Returns the events folded,
  // in order (the ones to render); none after a quiet poll or once finished.
  std::vector<EngineEvent> next();

  // A whole answer: next() until the request finished, then end().
  void wait_whole();

  // Records the end of a finished request once (later calls do nothing):
  // its outcome settled in call.count (prefixd_requests_total and its
  // tenant's), its tenant's tokens, its queue time, and (completed ones) its
  // TTFT by cache hit or miss and the dashboard. A stream has always observed
  // the queue time of failed and cancelled requests too; a whole answer only
  // that of completed ones.
  void end(Delivery delivery);

  // After a completed answer: refreshes the TTL pins whose prefix the request
  // read, then pins (or refreshes) the prefix up to each of `breakpoints` in
  // the caller's name, counting each as a breakpoint hit or miss with
  // BreakpointCount::kCount. One outcome per breakpoint; nullopt when the
  // context has no TtlPins (ctx.ttl_pins null).
  std::optional<std::vector<BreakpointOutcome>> retain(std::span<const CacheBreakpoint> breakpoints,
                                                       BreakpointCount count);

  // The client went away: the engine frees the request's blocks at its next step.
  void cancel() { channel_->cancel(); }

  const CompletionFold& fold() const { return fold_; }
  const Request& request() const { return request_; }  // as submitted (salted)

 private:
  // Latency bookkeeping as the HTTP worker sees it.
  struct Timing {
    SteadyClock::time_point t_arrival;
    SteadyClock::time_point t_last_token{};
    bool first_token_seen = false;
    double ttft_s = 0;  // set with the first token
  };

  GenerationSession(DaemonContext& ctx, const Call& call, Request request);
  // Feeds the TTFT and inter-token histograms with the `n_tokens` that arrived
  // in one wake-up: the gap since the previous token is split evenly among them.
  void on_tokens(size_t n_tokens, SteadyClock::time_point now);

  DaemonContext& ctx_;
  Request request_;
  std::shared_ptr<RequestCount> count_;  // the request's outcome, settled once
  AdmissionTicket admission_;
  TenantTicket tenant_slot_;  // the tenant's max_concurrent slot; empty without --api-keys
  std::shared_ptr<RequestChannel> channel_;
  Timing timing_;
  CompletionFold fold_;
};

}  // namespace prefixd
