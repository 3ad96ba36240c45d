// Cache endpoints over Engine::lookup/pin/clear_cache, prefetch requests and
// a StatsSnapshot of the engine and tiers.
#include "daemon/api/cache_handlers.h"

#include <optional>
#include <vector>

#include "daemon/api/completion_response.h"
#include "daemon/api/generation_session.h"
#include "daemon/auth/api_keys.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/validation/request_validation.h"
#include "engine/engine.h"
#include "storage/tier_manager.h"

namespace prefixd {
namespace {

using nlohmann::json;

json tier_json(const TierFigures& t) {
  return json{{"capacity_bytes", t.capacity_bytes},
              {"used_bytes", t.used_bytes},
              {"blocks", t.blocks},
              {"hits", t.hits},
              {"misses", t.misses},
              {"evictions", t.evictions}};
}

// Parses a prompt body, its cache_salt put in the caller's namespace
// (engine_salt); answers the error itself and returns false on failure.
bool parse_prompt(DaemonContext& ctx, const Call& call, Reply& res, PromptRequest* out) {
  auto p = validate_prompt_body(*call.body, ctx.model);
  if (!p.ok()) {
    res.error(p.error());
    return false;
  }
  *out = std::move(p.value());
  out->cache_salt = engine_salt(call.caller.tenant, out->cache_salt);
  return true;
}

// A pin by a tenant with accounting (tenant_limits.h): reserves the blocks the
// device pool holds for the prompt, refuses with 429 when they would take the
// tenant over its max_pinned_blocks, pins no more than those blocks and
// settles the count with what was pinned. nullopt when it answered itself.
std::optional<Result<PinResult>> pin_for_tenant(DaemonContext& ctx, const Tenant& t,
                                                const PromptRequest& p, Reply& res) {
  const int32_t block_size = ctx.engine->options().block_size;
  const int32_t n_blocks = ctx.engine->lookup(p.prompt, p.cache_salt).device_tokens / block_size;
  if (!ctx.tenant_limits->reserve_pins(t.index, n_blocks)) {
    ctx.metrics->count_tenant_limited(t.index, TenantLimit::kMaxPinnedBlocks);
    res.error(ApiError::too_many_requests(
        "tenant '" + t.name + "' has " + std::to_string(ctx.tenant_limits->pinned_blocks(t.index)) +
            " blocks pinned; pinning " + std::to_string(n_blocks) +
            " more would pass its max_pinned_blocks of " +
            std::to_string(t.limits.max_pinned_blocks) + "; unpin first",
        "tenant_pin_limit"));
    return std::nullopt;
  }
  // Blocks that became ready since the lookup are not pinned: the reservation bounds the pin.
  const std::vector<int32_t> head(p.prompt.begin(),
                                  p.prompt.begin() + static_cast<ptrdiff_t>(n_blocks) * block_size);
  Result<PinResult> r = ctx.engine->pin(head, p.cache_salt, /*pin=*/true);
  ctx.tenant_limits->settle_pins(t.index, n_blocks, r.ok() ? r->pinned_blocks : 0);
  return r;
}

// POST /v1/cache/pin (pin = true) and /v1/cache/unpin.
void pin_prompt(DaemonContext& ctx, const Call& call, Reply& res, bool pin) {
  PromptRequest p;
  if (!parse_prompt(ctx, call, res, &p)) return;
  const Tenant* tenant = ctx.tenant_limits ? call.caller.tenant : nullptr;
  std::optional<Result<PinResult>> pinned;
  if (pin && tenant) {
    pinned = pin_for_tenant(ctx, *tenant, p, res);
    if (!pinned) return;
  } else {
    pinned = ctx.engine->pin(p.prompt, p.cache_salt, pin);
    if (!pin && tenant && pinned->ok())
      ctx.tenant_limits->unpinned(tenant->index, (*pinned)->pinned_blocks);
  }
  Result<PinResult>& r = *pinned;
  if (!r.ok()) {
    return res.error(
        ApiError::conflict("prompt", r.message(), pin ? "pin_failed" : "unpin_failed"));
  }
  // A pin that found nothing cached pins nothing: the table would mislead.
  if (ctx.dashboard && (!pin || r->pinned_blocks > 0))
    ctx.dashboard->record_cache_call(p.prompt, p.cache_salt, pin ? CacheCall::kPin : CacheCall::kUnpin);
  res.json(json{{"pinned_blocks", r->pinned_blocks}, {"pinned_tokens", r->pinned_tokens}});
}

}  // namespace

json cache_stats_json(const StatsSnapshot& s, int32_t block_size) {
  json device = tier_json(s.device);
  device["blocks_total"] = s.pool_blocks_total;
  device["blocks_referenced"] = s.pool_blocks_referenced;
  device["blocks_cached"] = s.pool_blocks_cached;
  device["blocks_pinned"] = s.pool_blocks_pinned;
  json out;
  out["block_size"] = block_size;
  out["tokens_saved"] = s.cached_tokens();
  out["prompt_tokens"] = s.prompt_tokens;
  out["cached_tokens"] = cached_tokens_json(s);
  out["prefill_tokens"] = s.prefill_tokens;
  out["generated_tokens"] = s.generated_tokens;
  out["requests_running"] = s.running;
  out["requests_waiting"] = s.waiting;
  json disk = tier_json(s.disk);
  disk["write_errors"] = s.disk_write_errors;
  disk["io_errors"] = s.disk_io_errors;
  disk["writes_stopped"] = s.disk_writes_stopped;
  disk["writes_dropped"] = s.disk_writes_dropped;
  disk["pending_write_bytes"] = s.disk_pending_write_bytes;
  disk["write_lag_ms"] = {{"count", s.disk_write_lag.count},
                          {"p50", s.disk_write_lag.p50_ms},
                          {"p99", s.disk_write_lag.p99_ms},
                          {"max", s.disk_write_lag.max_ms}};
  out["tiers"] = {{"device", device}, {"host", tier_json(s.host)}, {"disk", disk}};
  if (s.has_remote_tier) {
    const RemoteFigures& r = s.remote_io;
    json remote = tier_json(s.remote);
    remote["servers"] = r.servers;
    remote["read_bytes"] = r.read_bytes;
    remote["written_bytes"] = r.written_bytes;
    remote["writes_dropped"] = r.writes_dropped;
    remote["errors"] = r.errors;
    remote["timeouts"] = r.timeouts;
    remote["corrupt_records"] = r.corrupt_records;
    remote["unauthenticated_records"] = r.unauthenticated_records;
    remote["pending_write_bytes"] = r.pending_write_bytes;
    remote["servers_in_ring"] = r.servers_in_ring;
    remote["server_ejections"] = r.server_ejections;
    json out_of_ring = json::array();
    for (const RemoteServerState& st : r.server_states) {
      if (st.in_ring) continue;
      out_of_ring.push_back(json{{"server", remote_server_name(st.server)},
                                 {"reason", st.reason},
                                 {"back_in_ms", st.back_in_ms}});
    }
    remote["servers_out"] = std::move(out_of_ring);
    remote["lookup_hits"] = r.lookup_hits;
    remote["lookup_misses"] = r.lookup_misses;
    remote["generation"] = r.generation;
    out["tiers"]["remote"] = remote;
  }
  return out;
}

void handle_cache_stats(DaemonContext& ctx, const Call&, Reply& res) {
  res.json(cache_stats_json(read_stats(*ctx.engine, ctx.tiers), ctx.engine->options().block_size));
}

void handle_cache_lookup(DaemonContext& ctx, const Call& call, Reply& res) {
  PromptRequest p;
  if (!parse_prompt(ctx, call, res, &p)) return;
  // The remote tier is asked here, on this HTTP thread (bounded by the
  // tier's timeout), never on the engine thread.
  LookupResult r = ctx.engine->lookup_all_tiers(p.prompt, p.cache_salt);
  json out{{"prompt_tokens", r.prompt_tokens},
           {"cached_tokens", r.cached_tokens()},
           {"device_tokens", r.device_tokens},
           {"host_tokens", r.host_tokens},
           {"disk_tokens", r.disk_tokens},
           {"remote_tokens", r.remote_tokens}};
  if (!r.remote_error.empty()) out["remote_error"] = r.remote_error;
  res.json(out);
}

void handle_cache_prefetch(DaemonContext& ctx, const Call& call, Reply& res) {
  PromptRequest p;
  if (!parse_prompt(ctx, call, res, &p)) return;
  ApiResult<TenantTicket> tenant_ticket = take_tenant_slot(ctx, call.caller.tenant, res);
  if (!tenant_ticket.ok()) return res.error(tenant_ticket.error());
  if (!ctx.admission->try_acquire()) {
    res.header("Retry-After", std::to_string(ctx.retry_after_s));
    return res.error(ApiError::too_many_requests("too many requests in flight; retry later"));
  }
  AdmissionTicket ticket(ctx.admission);
  Request r;
  r.kind = RequestKind::kPrefetch;
  r.prompt = p.prompt;
  r.cache_salt = p.cache_salt;
  r.max_tokens = 0;
  r.sampling.temperature = 0;
  std::shared_ptr<RequestChannel> ch = ctx.engine->submit(std::move(r));
  for (;;) {
    if (ctx.cancel_all.load()) ch->cancel();
    for (EngineEvent& e : ch->wait(kChannelPoll)) {
      if (e.type == EngineEvent::Type::kError || e.finish == FinishReason::kError) {
        return res.error(ApiError::internal_error("prefetch failed: " + e.error));
      }
      if (e.type != EngineEvent::Type::kFinished) continue;
      if (e.finish == FinishReason::kCancelled) {
        return res.error(
            ApiError::service_unavailable("the prefetch was cancelled (server shutting down)"));
      }
      const int32_t block_size = ctx.engine->options().block_size;
      if (ctx.dashboard) ctx.dashboard->record_cache_call(p.prompt, p.cache_salt, CacheCall::kPrefetch);
      return res.json(json{{"prompt_tokens", e.usage.prompt_tokens},
                           {"cached_tokens", e.usage.cached_tokens},
                           {"prefill_tokens", e.usage.prefill_tokens},
                           {"blocks", static_cast<int32_t>(p.prompt.size()) / block_size},
                           {"prefix_cache", prefix_cache_json(e.usage)}});
    }
  }
}

void handle_cache_pin(DaemonContext& ctx, const Call& call, Reply& res) {
  pin_prompt(ctx, call, res, /*pin=*/true);
}

void handle_cache_unpin(DaemonContext& ctx, const Call& call, Reply& res) {
  pin_prompt(ctx, call, res, /*pin=*/false);
}

void handle_cache_clear(DaemonContext& ctx, const Call& call, Reply& res) {
  // ?scope=all (default): this daemon's tiers and its namespace in the
  // shared remote pool; ?scope=local: this daemon's tiers only.
  bool local_only = false;
  const auto it = call.query.lower_bound("scope");  // the first value given
  if (it != call.query.end() && it->first == "scope") {
    if (it->second != "all" && it->second != "local") {
      return res.error(ApiError::bad_request(
          "scope", "scope must be 'all' (this daemon's tiers and the shared remote pool) or "
                   "'local' (this daemon's tiers only), got '" + it->second + "'",
          "invalid_value"));
    }
    local_only = it->second == "local";
  }
  json remote;
  if (ctx.tiers != nullptr && ctx.tiers->has_remote()) {
    if (local_only) {
      remote = {{"cleared", false}, {"reason", "scope=local: the shared pool was left"}};
    } else {
      // A generation bump in the pool (one round trip on this HTTP thread,
      // bounded by the remote tier's timeout; see RemoteTier::clear_pool),
      // before the local tiers are emptied, so that an onboard in between
      // cannot bring the pool's old blocks back into them.
      Result<uint64_t> g = ctx.tiers->clear_remote();
      if (g.ok()) {
        remote = {{"cleared", true}, {"generation", *g}};
      } else {
        remote = {{"cleared", false}, {"reason", g.message()}};
      }
    }
  }
  json out{{"cleared_blocks", ctx.engine->clear_cache()}};
  if (!remote.is_null()) out["remote"] = std::move(remote);
  res.json(out);
}

}  // namespace prefixd
