// Completions and chat completions: validate, submit, then fold the engine's
// events (CompletionFold) into one JSON answer or an SSE stream. A stream
// whose client goes away cancels its request (the engine then frees its
// blocks). Also the model list and (de)tokenization.
#include "daemon/api/openai_handlers.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/api/completion_response.h"
#include "daemon/api/generation_session.h"
#include "daemon/api/ttl_pins.h"
#include "daemon/auth/api_keys.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/validation/prompt_cache_request.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;
// After a completed answer: the TTL pins whose prefix it read are
// refreshed, and with prompt_cache_retention "24h" its prompt's prefix is
// pinned for 24 h. The pin's account for prefix_cache.retention; null
// without retention.
json retain_prompt(DaemonContext& ctx, const Request& r, std::optional<CacheTtl> retention,
                   int32_t cached_tokens, int32_t tenant) {
  if (!ctx.ttl_pins) return nullptr;
  ctx.ttl_pins->refresh_hits(r.cache_salt, r.prompt, cached_tokens);
  if (!retention) return nullptr;
  const CacheBreakpoint whole{"prompt_cache_retention", *retention,
                              static_cast<int32_t>(r.prompt.size())};
  const BreakpointOutcome o = ctx.ttl_pins->pin(r.cache_salt, r.prompt, whole, tenant);
  return json{{"ttl", ttl_name(o.breakpoint.ttl)},
              {"status", pin_status_name(o.status)},
              {"pinned_tokens", o.pinned_tokens}};
}

void append_event(std::string* out, const json& j) {
  *out += "data: ";
  *out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  *out += "\n\n";
}

// State of one SSE answer, owned by the response's content provider. Its
// destructor cancels the request when the stream ended early.
struct StreamState {
  DaemonContext* ctx = nullptr;
  GenerationRequest meta;
  CompletionHead head;
  std::shared_ptr<RequestChannel> channel;
  AdmissionTicket ticket;
  TenantTicket tenant_ticket;  // the tenant's max_concurrent slot, held as long as the stream
  std::optional<CacheTtl> retention;  // prompt_cache_retention "24h"
  std::shared_ptr<RequestCount> count;  // the request's outcome, settled once
  int32_t tenant = -1;         // Tenant::index; -1 without keys
  Timing timing;
  CompletionFold fold;
  bool role_sent = false;
  bool echo_sent = false;         // completions with echo: the prompt chunk went out
  size_t n_tokens_rendered = 0;   // token events rendered so far (their index in the fold)
  size_t logprobs_sent = 0;       // chat: tokens whose logprobs went out (a token whose text
                                  // is held back sends its logprobs with the next text)
  SteadyClock::time_point t_last_write;

  ~StreamState() {
    if (!fold.finished) channel->cancel();
    count->settle(RequestOutcome::kCancelled);  // ignored when the end was recorded
  }

  // Turns newly arrived events into SSE bytes.
  void render(const std::vector<EngineEvent>& events, std::string* out) {
    if (head.chat && !role_sent) {
      append_event(out, role_chunk_json(head));
      role_sent = true;
    }
    const size_t n_folded = fold_wakeup(fold, timing, *ctx->metrics, events);
    // Echo without logprobs: the prompt goes first (with logprobs it waits
    // for the prompt's logprobs event).
    if (head.echo && !head.logprobs && !echo_sent && n_folded > 0) {
      append_event(out, echo_chunk_json(head, fold));
      echo_sent = true;
    }
    for (size_t i = 0; i < n_folded; ++i) render_event(events[i], out);
  }

  // The logprobs of the tokens rendered but not yet sent (chat), now sent.
  json take_pending_logprobs() {
    json lp = tokens_logprobs_json(head, fold, logprobs_sent, n_tokens_rendered - logprobs_sent);
    logprobs_sent = n_tokens_rendered;
    return lp;
  }

  // One folded event: the echoed prompt, a token chunk, or the end (last
  // chunk, usage chunk or error event, then [DONE]).
  void render_event(const EngineEvent& e, std::string* out) {
    if (e.type == EngineEvent::Type::kPromptLogprobs) {
      if (head.echo && !echo_sent) append_event(out, echo_chunk_json(head, fold));
      echo_sent = true;
      return;
    }
    if (e.type == EngineEvent::Type::kToken) {
      const size_t index = n_tokens_rendered++;
      if (!head.chat) {
        append_event(out, chunk_json(head, e.text, {&e.token, 1}, std::nullopt,
                                     tokens_logprobs_json(head, fold, index, 1)));
        logprobs_sent = n_tokens_rendered;
      } else if (!e.text.empty()) {
        append_event(out, chunk_json(head, e.text, {&e.token, 1}, std::nullopt,
                                     take_pending_logprobs()));
      }
      return;
    }
    const bool pending = logprobs_sent < n_tokens_rendered;
    if (e.type == EngineEvent::Type::kFinished && (!e.text.empty() || pending))
      append_event(out, chunk_json(head, e.text, {}, std::nullopt, take_pending_logprobs()));
    if (ApiResult<void> err = completion_error(fold, Delivery::kStream); !err.ok()) {
      append_event(out, err.error().to_json());
    } else {
      append_event(out, chunk_json(head, "", {}, fold.finish));
      json retained = retain_prompt(*ctx, meta.request, retention, fold.usage.cached_tokens, tenant);
      if (meta.include_usage) {
        json usage = usage_chunk_json(head, fold.usage);
        if (!retained.is_null()) usage["prefix_cache"]["retention"] = std::move(retained);
        append_event(out, usage);
      }
    }
    *out += "data: [DONE]\n\n";
  }

  // Called by the content provider once per wake-up; false ends the stream.
  bool pump(ChunkSink& sink) {
    if (ctx->cancel_all.load()) channel->cancel();
    std::vector<EngineEvent> events = channel->wait(kChannelPoll);
    std::string out;
    if (!events.empty() || (head.chat && !role_sent)) render(events, &out);
    const SteadyClock::time_point now = SteadyClock::now();
    // An SSE comment now and then: keeps proxies from timing out and lets a
    // failed write reveal a client that went away while nothing was produced.
    if (out.empty() && now - t_last_write > std::chrono::seconds(1)) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!sink.write(out)) {
        channel->cancel();
        return false;  // the destructor counts the request as cancelled
      }
      t_last_write = now;
    }
    if (fold.finished) {
      if (!count->settled()) record_end(*ctx, meta.request, fold, timing, Delivery::kStream, *count);
      sink.done();
    }
    return true;
  }
};

// Waits for the whole answer and sends it (or its error) as one document.
void answer_whole(DaemonContext& ctx, const GenerationRequest& g, const CompletionHead& head,
                  RequestChannel& channel, Timing timing, RequestCount& count,
                  std::optional<CacheTtl> retention, Reply& res) {
  const int32_t tenant = count.tenant();
  CompletionFold fold;
  while (!fold.finished) {
    if (ctx.cancel_all.load()) channel.cancel();
    fold_wakeup(fold, timing, *ctx.metrics, channel.wait(kChannelPoll));
  }
  record_end(ctx, g.request, fold, timing, Delivery::kWhole, count);
  if (ApiResult<void> err = completion_error(fold, Delivery::kWhole); !err.ok())
    return res.error(err.error());
  json out = completion_json(head, fold);
  json retained = retain_prompt(ctx, g.request, retention, fold.usage.cached_tokens, tenant);
  if (!retained.is_null()) out["prefix_cache"]["retention"] = std::move(retained);
  res.json(out);
}

// Streams the answer; the response's content provider owns the state.
void answer_stream(DaemonContext& ctx, GenerationRequest g, const CompletionHead& head,
                   std::shared_ptr<RequestChannel> channel, GenerationSlots slots,
                   std::shared_ptr<RequestCount> count, Timing timing,
                   std::optional<CacheTtl> retention, Reply& res) {
  auto st = std::make_shared<StreamState>();
  st->ctx = &ctx;
  st->meta = std::move(g);
  st->head = head;
  st->channel = std::move(channel);
  st->ticket = std::move(slots.admission);
  st->tenant_ticket = std::move(slots.tenant);
  st->retention = retention;
  st->tenant = count->tenant();
  st->count = std::move(count);
  st->timing = timing;
  st->t_last_write = SteadyClock::now();
  res.header("Cache-Control", "no-cache");
  res.header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", [st](ChunkSink& sink) { return st->pump(sink); });
}

void handle_generation(DaemonContext& ctx, const Call& call, Reply& res, bool chat) {
  const Timing timing{call.t_routed};
  const Tenant* tenant = call.caller.tenant;
  auto refuse = [&](const ApiError& e, RequestOutcome outcome) {
    call.count->settle(outcome);
    res.error(e);
  };
  auto parsed = validate_generation(*call.body, ctx.model, chat);
  if (!parsed.ok()) return refuse(parsed.error(), RequestOutcome::kInvalid);
  GenerationRequest g = std::move(parsed.value());
  auto cache_fields = read_prompt_cache_fields(*call.body);
  if (!cache_fields.ok()) return refuse(cache_fields.error(), RequestOutcome::kInvalid);
  const std::optional<CacheTtl> retention = cache_fields.value().retention;
  // The tenant's namespace goes into the salt its blocks are hashed under.
  g.request.cache_salt = engine_salt(tenant, g.request.cache_salt);

  GenerationSlots slots;
  if (std::optional<Refusal> r = admit_generation(ctx, tenant, res, &slots))
    return refuse(r->error, r->outcome);
  CompletionHead head;
  head.id = make_response_id(chat ? "chatcmpl" : "cmpl");
  head.created = static_cast<int64_t>(std::time(nullptr));
  head.model = g.model;
  head.chat = chat;
  head.logprobs = g.request.logprobs.sampled;
  head.tokens = TokenWriter{ctx.model.tokenizer, g.tokens_as_ids};
  if (g.echo)
    head.echo = std::make_shared<EchoedPrompt>(echo_prompt(g.request.prompt, ctx.model.tokenizer));
  std::shared_ptr<RequestChannel> channel = ctx.engine->submit(g.request);
  if (g.stream) {
    return answer_stream(ctx, std::move(g), head, std::move(channel), std::move(slots), call.count,
                         timing, retention, res);
  }
  answer_whole(ctx, g, head, *channel, timing, *call.count, retention, res);
}

}  // namespace

void handle_completions(DaemonContext& ctx, const Call& call, Reply& res) {
  handle_generation(ctx, call, res, /*chat=*/false);
}

void handle_chat_completions(DaemonContext& ctx, const Call& call, Reply& res) {
  handle_generation(ctx, call, res, /*chat=*/true);
}

void handle_models(DaemonContext& ctx, const Call&, Reply& res) {
  json m = {{"id", ctx.model.id},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "prefixd"},
            {"context_length", ctx.model.n_ctx},
            {"backend", ctx.build.backend_name}};
  res.json(json{{"object", "list"}, {"data", json::array({m})}});
}

void handle_tokenize(DaemonContext& ctx, const Call& call, Reply& res) {
  auto ids = validate_tokenize(*call.body, ctx.model);
  if (!ids.ok()) return res.error(ids.error());
  res.json(json{{"tokens", ids.value()}});
}

void handle_detokenize(DaemonContext& ctx, const Call& call, Reply& res) {
  auto ids = validate_detokenize(*call.body, ctx.model);
  if (!ids.ok()) return res.error(ids.error());
  res.json(json{{"content", ctx.model.tokenizer->decode(ids.value())}});
}

}  // namespace prefixd
