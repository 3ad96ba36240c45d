// What every generation route (/v1/completions, /v1/chat/completions,
// /v1/messages) does around the engine whatever its dialect: the gates a
// request passes before it is submitted (the tenant's max_concurrent, the
// admission gate; the route refuses it while the daemon drains), its latency bookkeeping, and the
// accounting of its end. Called on HTTP worker threads.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "daemon/api/call.h"
#include "daemon/api/completion_response.h"
#include "daemon/api/daemon_context.h"
#include "daemon/auth/api_keys.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/http/api_error.h"
#include "daemon/http/reply.h"

namespace prefixd {

using SteadyClock = std::chrono::steady_clock;

// Latency bookkeeping of one request as its HTTP worker sees it.
struct Timing {
  SteadyClock::time_point t_arrival;
  SteadyClock::time_point t_last_token{};
  bool first_token_seen = false;
  double ttft_s = 0;  // set with the first token

  // Called once per wake-up with the number of tokens that arrived in it; a
  // wake-up that delivers k tokens splits the gap since the previous token
  // evenly among them.
  void on_tokens(Metrics& m, size_t n_tokens, SteadyClock::time_point now);
};

// Folds the events of one wake-up and feeds the latency histograms; returns
// how many events were folded.
size_t fold_wakeup(CompletionFold& fold, Timing& timing, Metrics& metrics,
                   const std::vector<EngineEvent>& events);

// The end of a request that the engine finished: its outcome settled in
// `count` (prefixd_requests_total and its tenant's), its tenant's tokens, its
// queue time, and (completed ones) its TTFT by cache hit or miss and the
// dashboard. A stream has always observed the queue time of failed and
// cancelled requests too; a whole answer only that of completed ones.
void record_end(DaemonContext& ctx, const Request& request, const CompletionFold& fold,
                const Timing& timing, Delivery delivery, RequestCount& count);

// A refusal before submission: the error to answer (Retry-After already set
// on the response where it applies) and how the request is counted.
struct Refusal {
  ApiError error;
  RequestOutcome outcome;
};

// The slots a submitted request holds until it ends.
struct GenerationSlots {
  AdmissionTicket admission;
  TenantTicket tenant;  // the tenant's max_concurrent slot; empty without --api-keys
};

// Takes the tenant's max_concurrent slot (with --api-keys) and one of the
// admission gate; a 429 refusal (Retry-After set) when either is full.
std::optional<Refusal> admit_generation(DaemonContext& ctx, const Tenant* tenant, Reply& res,
                                        GenerationSlots* slots);

}  // namespace prefixd
