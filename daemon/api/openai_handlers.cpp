// Completions and chat completions: validate the body, start a
// GenerationSession (gates, submit, the waits and the end are there), and
// render its folded events (CompletionFold) as one JSON answer or an SSE
// stream. A stream whose client goes away cancels its request. Also the model
// list and (de)tokenization.
#include "daemon/api/openai_handlers.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/api/completion_response.h"
#include "daemon/api/generation_session.h"
#include "daemon/api/ttl_pins.h"
#include "daemon/validation/prompt_cache_request.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

// After a completed answer (GenerationSession::retain): with
// prompt_cache_retention "24h" the prompt's whole prefix is pinned for 24 h.
// The pin's account for prefix_cache.retention; null without retention (or
// without TTL pins).
json retain_prompt(GenerationSession& session, std::optional<CacheTtl> retention) {
  std::vector<CacheBreakpoint> whole;
  if (retention) {
    whole.push_back({"prompt_cache_retention", *retention,
                     static_cast<int32_t>(session.request().prompt.size())});
  }
  std::optional<std::vector<BreakpointOutcome>> pinned =
      session.retain(whole, BreakpointCount::kNoCount);
  if (!pinned || pinned->empty()) return nullptr;
  const BreakpointOutcome& o = pinned->front();
  return json{{"ttl", ttl_name(o.breakpoint.ttl)},
              {"status", pin_status_name(o.status)},
              {"pinned_tokens", o.pinned_tokens}};
}

void append_event(std::string* out, const json& j) {
  *out += "data: ";
  *out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  *out += "\n\n";
}

// State of one SSE answer, owned by the response's content provider. The
// session's destructor cancels the request when the stream ended early.
struct StreamState {
  std::unique_ptr<GenerationSession> session;
  CompletionHead head;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<CacheTtl> retention;  // prompt_cache_retention "24h"
  bool role_sent = false;
  bool echo_sent = false;         // completions with echo: the prompt chunk went out
  size_t n_tokens_rendered = 0;   // token events rendered so far (their index in the fold)
  size_t logprobs_sent = 0;       // chat: tokens whose logprobs went out (a token whose text
                                  // is held back sends its logprobs with the next text)
  SteadyClock::time_point t_last_write;

  // Turns newly folded events into SSE bytes.
  void render(const std::vector<EngineEvent>& events, std::string* out) {
    if (head.chat && !role_sent) {
      append_event(out, role_chunk_json(head));
      role_sent = true;
    }
    // Echo without logprobs: the prompt goes first (with logprobs it waits
    // for the prompt's logprobs event).
    if (head.echo && !head.logprobs && !echo_sent && !events.empty()) {
      append_event(out, echo_chunk_json(head, session->fold()));
      echo_sent = true;
    }
    for (const EngineEvent& e : events) render_event(e, out);
  }

  // The logprobs of the tokens rendered but not yet sent (chat), now sent.
  json take_pending_logprobs() {
    json lp = tokens_logprobs_json(head, session->fold(), logprobs_sent,
                                   n_tokens_rendered - logprobs_sent);
    logprobs_sent = n_tokens_rendered;
    return lp;
  }

  // One folded event: the echoed prompt, a token chunk, or the end (last
  // chunk, usage chunk or error event, then [DONE]).
  void render_event(const EngineEvent& e, std::string* out) {
    const CompletionFold& fold = session->fold();
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
      json retained = retain_prompt(*session, retention);
      if (include_usage) {
        json usage = usage_chunk_json(head, fold.usage);
        if (!retained.is_null()) usage["prefix_cache"]["retention"] = std::move(retained);
        append_event(out, usage);
      }
    }
    *out += "data: [DONE]\n\n";
  }

  // Called by the content provider once per wake-up; false ends the stream.
  bool pump(ChunkSink& sink) {
    std::vector<EngineEvent> events = session->next();
    std::string out;
    if (!events.empty() || (head.chat && !role_sent)) render(events, &out);
    const SteadyClock::time_point now = SteadyClock::now();
    // An SSE comment now and then: keeps proxies from timing out and lets a
    // failed write reveal a client that went away while nothing was produced.
    if (out.empty() && now - t_last_write > std::chrono::seconds(1)) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!sink.write(out)) {
        session->cancel();
        return false;  // the session's destructor counts the request as cancelled
      }
      t_last_write = now;
    }
    if (session->fold().finished) {
      session->end(Delivery::kStream);
      sink.done();
    }
    return true;
  }
};

// Waits for the whole answer and sends it (or its error) as one document.
void answer_whole(GenerationSession& session, const CompletionHead& head,
                  std::optional<CacheTtl> retention, Reply& res) {
  session.wait_whole();
  const CompletionFold& fold = session.fold();
  if (ApiResult<void> err = completion_error(fold, Delivery::kWhole); !err.ok())
    return res.error(err.error());
  json out = completion_json(head, fold);
  json retained = retain_prompt(session, retention);
  if (!retained.is_null()) out["prefix_cache"]["retention"] = std::move(retained);
  res.json(out);
}

// Streams the answer; the response's content provider owns the state.
void answer_stream(std::unique_ptr<GenerationSession> session, const CompletionHead& head,
                   bool include_usage, std::optional<CacheTtl> retention, Reply& res) {
  auto st = std::make_shared<StreamState>();
  st->session = std::move(session);
  st->head = head;
  st->include_usage = include_usage;
  st->retention = retention;
  st->t_last_write = SteadyClock::now();
  res.header("Cache-Control", "no-cache");
  res.header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", [st](ChunkSink& sink) { return st->pump(sink); });
}

// Parses the body, starts the session, and answers whole or streamed.
void handle_generation(DaemonContext& ctx, const Call& call, Reply& res, bool chat) {
  auto invalid = [&](const ApiError& e) {
    call.count->settle(RequestOutcome::kInvalid);
    res.error(e);
  };
  auto parsed = validate_generation(*call.body, ctx.model, chat);
  if (!parsed.ok()) return invalid(parsed.error());
  GenerationRequest g = std::move(parsed.value());
  auto cache_fields = read_prompt_cache_fields(*call.body);
  if (!cache_fields.ok()) return invalid(cache_fields.error());
  const std::optional<CacheTtl> retention = cache_fields.value().retention;
  const bool logprobs = g.request.logprobs.sampled;

  auto started = GenerationSession::start(ctx, call, std::move(g.request), res);
  if (!started.ok()) return res.error(started.error());
  std::unique_ptr<GenerationSession> session = std::move(started.value());
  CompletionHead head;
  head.id = make_response_id(chat ? "chatcmpl" : "cmpl");
  head.created = static_cast<int64_t>(std::time(nullptr));
  head.model = g.model;
  head.chat = chat;
  head.logprobs = logprobs;
  head.tokens = TokenWriter{ctx.model.tokenizer, g.tokens_as_ids};
  if (g.echo) {
    head.echo = std::make_shared<EchoedPrompt>(
        echo_prompt(session->request().prompt, ctx.model.tokenizer));
  }
  if (g.stream) return answer_stream(std::move(session), head, g.include_usage, retention, res);
  answer_whole(*session, head, retention, res);
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
