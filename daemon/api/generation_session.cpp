// One generation request from its gates to its end (see generation_session.h).
#include "daemon/api/generation_session.h"

#include <string>
#include <utility>

#include "daemon/auth/api_keys.h"
#include "daemon/monitoring/dashboard.h"
#include "engine/engine.h"

namespace prefixd {
namespace {

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ApiResult<TenantTicket> take_tenant_slot(DaemonContext& ctx, const Tenant* tenant, Reply& res) {
  if (!tenant || !ctx.tenant_limits) return TenantTicket{};
  std::optional<TenantTicket> t = ctx.tenant_limits->try_begin(tenant->index);
  if (t) return std::move(*t);
  ctx.metrics->count_tenant_limited(tenant->index, TenantLimit::kMaxConcurrent);
  res.header("Retry-After", std::to_string(ctx.retry_after_s));
  return ApiError::too_many_requests("tenant '" + tenant->name + "' has its max_concurrent of " +
                                         std::to_string(tenant->limits.max_concurrent) +
                                         " requests in flight; retry when one ends",
                                     "tenant_concurrency_limit");
}

GenerationSession::GenerationSession(DaemonContext& ctx, const Call& call, Request request)
    : ctx_(ctx), request_(std::move(request)), count_(call.count), timing_{call.t_routed} {}

ApiResult<std::unique_ptr<GenerationSession>> GenerationSession::start(DaemonContext& ctx,
                                                                       const Call& call,
                                                                       Request request,
                                                                       Reply& res) {
  // The tenant's namespace goes into the salt its blocks are hashed under.
  request.cache_salt = engine_salt(call.caller.tenant, request.cache_salt);
  auto refuse = [&](ApiError e) {
    call.count->settle(RequestOutcome::kRejected);
    return e;
  };
  ApiResult<TenantTicket> tenant_slot = take_tenant_slot(ctx, call.caller.tenant, res);
  if (!tenant_slot.ok()) return refuse(tenant_slot.error());
  if (!ctx.admission->try_acquire()) {
    res.header("Retry-After", std::to_string(ctx.retry_after_s));
    return refuse(ApiError::too_many_requests("too many requests in flight (" +
                                              std::to_string(ctx.admission->limit()) +
                                              "); retry later"));
  }
  std::unique_ptr<GenerationSession> s(new GenerationSession(ctx, call, std::move(request)));
  s->admission_ = AdmissionTicket(ctx.admission);
  s->tenant_slot_ = std::move(tenant_slot.value());
  s->channel_ = ctx.engine->submit(s->request_);
  return s;
}

GenerationSession::~GenerationSession() {
  if (channel_ && !fold_.finished) channel_->cancel();
  count_->settle(RequestOutcome::kCancelled);  // ignored when the end was recorded
}

std::vector<EngineEvent> GenerationSession::next() {
  if (ctx_.cancel_all.load()) channel_->cancel();
  std::vector<EngineEvent> events = channel_->wait(kChannelPoll);
  const size_t n_tokens_before = fold_.token_ids.size();
  const size_t n_folded = fold_.add(events);
  on_tokens(fold_.token_ids.size() - n_tokens_before, SteadyClock::now());
  events.resize(n_folded);
  return events;
}

void GenerationSession::wait_whole() {
  while (!fold_.finished) next();
  end(Delivery::kWhole);
}

void GenerationSession::on_tokens(size_t n_tokens, SteadyClock::time_point now) {
  if (n_tokens == 0) return;
  Metrics& m = *ctx_.metrics;
  size_t gaps = n_tokens;
  if (!timing_.first_token_seen) {
    timing_.ttft_s = seconds_between(timing_.t_arrival, now);
    m.observe_ttft(timing_.ttft_s);
    timing_.first_token_seen = true;
    gaps = n_tokens - 1;
  } else {
    const double gap_s =
        seconds_between(timing_.t_last_token, now) / static_cast<double>(n_tokens);
    for (size_t i = 0; i < gaps; ++i) m.observe_inter_token(gap_s);
    gaps = 0;
  }
  for (size_t i = 0; i < gaps; ++i) m.observe_inter_token(0.0);
  timing_.t_last_token = now;
}

void GenerationSession::end(Delivery delivery) {
  if (count_->settled()) return;
  const RequestOutcome outcome = fold_.outcome();
  count_->settle(outcome);
  ctx_.metrics->count_tenant_tokens(count_->tenant(), fold_.usage.prompt_tokens,
                                    fold_.usage.cached_tokens, fold_.usage.completion_tokens);
  if (outcome == RequestOutcome::kCompleted && timing_.first_token_seen)
    ctx_.metrics->observe_ttft_by_cache(timing_.ttft_s, fold_.usage.cached_tokens > 0);
  const bool observe_queue =
      delivery == Delivery::kStream ? !fold_.failed : outcome == RequestOutcome::kCompleted;
  if (observe_queue) ctx_.metrics->observe_queue(fold_.usage.queue_ms / 1000.0);
  if (ctx_.dashboard && outcome == RequestOutcome::kCompleted)
    ctx_.dashboard->record_request(request_.prompt, request_.cache_salt, fold_.usage);
}

std::optional<std::vector<BreakpointOutcome>> GenerationSession::retain(
    std::span<const CacheBreakpoint> breakpoints, BreakpointCount count) {
  if (!ctx_.ttl_pins) return std::nullopt;
  const int32_t cached_tokens = fold_.usage.cached_tokens;
  ctx_.ttl_pins->refresh_hits(request_.cache_salt, request_.prompt, cached_tokens);
  const int32_t block = ctx_.ttl_pins->options().block_size;
  std::vector<BreakpointOutcome> out;
  for (const CacheBreakpoint& bp : breakpoints) {
    out.push_back(ctx_.ttl_pins->pin(request_.cache_salt, request_.prompt, bp, count_->tenant()));
    if (count == BreakpointCount::kCount) {
      const int32_t aligned = bp.position_tokens / block * block;
      ctx_.ttl_pins->count_breakpoint(aligned > 0 && cached_tokens >= aligned);
    }
  }
  return out;
}

}  // namespace prefixd
