// Cache endpoints over Engine::stats/lookup/pin/clear_cache and prefetch
// requests; tier figures come from the TierManager when one is configured.
#include "daemon/cache_handlers.h"

#include "daemon/http_util.h"
#include "daemon/openai_handlers.h"
#include "storage/tier_manager.h"

namespace prefixd {
namespace {

using nlohmann::json;

json tier_json(uint64_t capacity, uint64_t used, uint64_t blocks, uint64_t hits, uint64_t misses,
               uint64_t evictions) {
  return json{{"capacity_bytes", capacity}, {"used_bytes", used},
              {"blocks", blocks},           {"hits", hits},
              {"misses", misses},           {"evictions", evictions}};
}

// Parses a prompt body; answers the error itself and returns false on failure.
bool parse_prompt(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res,
                  PromptRequest* out) {
  auto body = parse_json_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) {
    send_error(res, *e);
    return false;
  }
  auto p = validate_prompt_body(std::get<json>(body), ctx.model);
  if (auto* e = std::get_if<ApiError>(&p)) {
    send_error(res, *e);
    return false;
  }
  *out = std::move(std::get<PromptRequest>(p));
  return true;
}

}  // namespace

json cache_stats_json(const DaemonContext& ctx, const EngineStats& s) {
  json tiers;
  json device =
      tier_json(s.pool_capacity_bytes, s.pool_used_bytes, s.pool_blocks_used + s.pool_blocks_cached,
                s.device_hits, s.device_misses, s.device_evictions);
  device["blocks_total"] = s.pool_blocks_total;
  device["blocks_referenced"] = s.pool_blocks_used;
  device["blocks_cached"] = s.pool_blocks_cached;
  device["blocks_pinned"] = s.pool_blocks_pinned;
  tiers["device"] = device;
  if (ctx.tiers) {
    TierManagerStats t = ctx.tiers->stats();
    tiers["host"] = tier_json(t.host.capacity_bytes, t.host.used_bytes, t.host.blocks, t.host.hits,
                              t.host.misses, t.host.evictions);
    tiers["disk"] = t.has_disk ? tier_json(t.disk.capacity_bytes, t.disk.used_bytes, t.disk.blocks,
                                           t.disk.hits, t.disk.misses, t.disk.evictions)
                               : tier_json(0, 0, 0, 0, 0, 0);
  } else {
    tiers["host"] = tier_json(0, 0, 0, 0, 0, 0);
    tiers["disk"] = tier_json(0, 0, 0, 0, 0, 0);
  }
  json out;
  out["block_size"] = ctx.engine->options().block_size;
  out["tokens_saved"] = s.cached_tokens_device + s.cached_tokens_host + s.cached_tokens_disk;
  out["prompt_tokens"] = s.prompt_tokens;
  out["cached_tokens"] = {{"device", s.cached_tokens_device},
                          {"host", s.cached_tokens_host},
                          {"disk", s.cached_tokens_disk}};
  out["prefill_tokens"] = s.prefill_tokens;
  out["generated_tokens"] = s.generated_tokens;
  out["requests_running"] = s.running;
  out["requests_waiting"] = s.waiting;
  out["tiers"] = tiers;
  return out;
}

void handle_cache_stats(DaemonContext& ctx, const httplib::Request&, httplib::Response& res) {
  send_json(res, cache_stats_json(ctx, ctx.engine->stats()));
}

void handle_cache_lookup(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res) {
  PromptRequest p;
  if (!parse_prompt(ctx, req, res, &p)) return;
  LookupResult r = ctx.engine->lookup(p.prompt, p.cache_salt);
  send_json(res, json{{"prompt_tokens", r.prompt_tokens},
                      {"cached_tokens", r.cached_tokens()},
                      {"device_tokens", r.device_tokens},
                      {"host_tokens", r.host_tokens},
                      {"disk_tokens", r.disk_tokens}});
}

void handle_cache_prefetch(DaemonContext& ctx, const httplib::Request& req,
                           httplib::Response& res) {
  if (ctx.draining.load()) {
    res.set_header("Retry-After", std::to_string(ctx.retry_after_s));
    return send_error(
        res, ApiError{503, "the server is shutting down", "unavailable", "", "shutting_down"});
  }
  PromptRequest p;
  if (!parse_prompt(ctx, req, res, &p)) return;
  if (!ctx.admission->try_acquire()) {
    res.set_header("Retry-After", std::to_string(ctx.retry_after_s));
    return send_error(res, ApiError{429, "too many requests in flight; retry later",
                                    "rate_limit_error", "", "queue_full"});
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
        return send_error(res,
                          ApiError{500, "prefetch failed: " + e.error, "server_error", "", ""});
      }
      if (e.type != EngineEvent::Type::kFinished) continue;
      if (e.finish == FinishReason::kCancelled) {
        return send_error(res, ApiError{503, "the prefetch was cancelled (server shutting down)",
                                        "unavailable", "", "shutting_down"});
      }
      const int32_t block_size = ctx.engine->options().block_size;
      return send_json(res, json{{"prompt_tokens", e.usage.prompt_tokens},
                                 {"cached_tokens", e.usage.cached_tokens},
                                 {"prefill_tokens", e.usage.prefill_tokens},
                                 {"blocks", static_cast<int32_t>(p.prompt.size()) / block_size},
                                 {"prefix_cache", prefix_cache_json(e.usage)}});
    }
  }
}

void handle_cache_pin(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res,
                      bool pin) {
  PromptRequest p;
  if (!parse_prompt(ctx, req, res, &p)) return;
  Result<PinResult> r = ctx.engine->pin(p.prompt, p.cache_salt, pin);
  if (!r.ok()) {
    return send_error(res, ApiError{409, r.message(), "invalid_request_error", "prompt",
                                    pin ? "pin_failed" : "unpin_failed"});
  }
  send_json(res, json{{"pinned_blocks", r->pinned_blocks}, {"pinned_tokens", r->pinned_tokens}});
}

void handle_cache_clear(DaemonContext& ctx, const httplib::Request&, httplib::Response& res) {
  send_json(res, json{{"cleared_blocks", ctx.engine->clear_cache()}});
}

}  // namespace prefixd
