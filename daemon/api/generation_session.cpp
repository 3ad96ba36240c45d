// The gates before submission, the latency histograms and the end-of-request
// accounting shared by the OpenAI and Anthropic generation routes.
#include "daemon/api/generation_session.h"

#include <string>

#include "daemon/monitoring/dashboard.h"

namespace prefixd {
namespace {

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void Timing::on_tokens(Metrics& m, size_t n_tokens, SteadyClock::time_point now) {
  if (n_tokens == 0) return;
  size_t gaps = n_tokens;
  if (!first_token_seen) {
    ttft_s = seconds_between(t_arrival, now);
    m.observe_ttft(ttft_s);
    first_token_seen = true;
    gaps = n_tokens - 1;
  } else {
    const double gap_s = seconds_between(t_last_token, now) / static_cast<double>(n_tokens);
    for (size_t i = 0; i < gaps; ++i) m.observe_inter_token(gap_s);
    gaps = 0;
  }
  for (size_t i = 0; i < gaps; ++i) m.observe_inter_token(0.0);
  t_last_token = now;
}

size_t fold_wakeup(CompletionFold& fold, Timing& timing, Metrics& metrics,
                   const std::vector<EngineEvent>& events) {
  const size_t n_tokens_before = fold.token_ids.size();
  const size_t n_folded = fold.add(events);
  timing.on_tokens(metrics, fold.token_ids.size() - n_tokens_before, SteadyClock::now());
  return n_folded;
}

void record_end(DaemonContext& ctx, const Request& request, const CompletionFold& fold,
                const Timing& timing, Delivery delivery, RequestCount& count) {
  const RequestOutcome outcome = fold.outcome();
  count.settle(outcome);
  ctx.metrics->count_tenant_tokens(count.tenant(), fold.usage.prompt_tokens, fold.usage.cached_tokens,
                                   fold.usage.completion_tokens);
  if (outcome == RequestOutcome::kCompleted && timing.first_token_seen)
    ctx.metrics->observe_ttft_by_cache(timing.ttft_s, fold.usage.cached_tokens > 0);
  const bool observe_queue =
      delivery == Delivery::kStream ? !fold.failed : outcome == RequestOutcome::kCompleted;
  if (observe_queue) ctx.metrics->observe_queue(fold.usage.queue_ms / 1000.0);
  if (ctx.dashboard && outcome == RequestOutcome::kCompleted)
    ctx.dashboard->record_request(request.prompt, request.cache_salt, fold.usage);
}

std::optional<Refusal> admit_generation(DaemonContext& ctx, const Tenant* tenant, Reply& res,
                                        GenerationSlots* slots) {
  if (tenant && ctx.tenant_limits) {
    std::optional<TenantTicket> t = ctx.tenant_limits->try_begin(tenant->index);
    if (!t) {
      ctx.metrics->count_tenant_limited(tenant->index, TenantLimit::kMaxConcurrent);
      res.header("Retry-After", std::to_string(ctx.retry_after_s));
      return Refusal{
          ApiError::too_many_requests("tenant '" + tenant->name + "' has its max_concurrent of " +
                                          std::to_string(tenant->limits.max_concurrent) +
                                          " requests in flight; retry when one ends",
                                      "tenant_concurrency_limit"),
          RequestOutcome::kRejected};
    }
    slots->tenant = std::move(*t);
  }
  if (!ctx.admission->try_acquire()) {
    res.header("Retry-After", std::to_string(ctx.retry_after_s));
    return Refusal{
        ApiError::too_many_requests("too many requests in flight (" +
                                    std::to_string(ctx.admission->limit()) + "); retry later"),
        RequestOutcome::kRejected};
  }
  slots->admission = AdmissionTicket(ctx.admission);
  return std::nullopt;
}

}  // namespace prefixd
