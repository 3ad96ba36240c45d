// /v1/messages: validate (messages_request.h), start a GenerationSession
// (gates, submit, the waits, the breakpoints' pins once the answer is
// complete, and the end are there), and render Anthropic's message or its
// event stream (message_start,
// content_block_start, content_block_delta*, content_block_stop,
// message_delta with the final usage, message_stop).
#include "daemon/api/anthropic_handlers.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "daemon/api/completion_response.h"
#include "daemon/api/generation_session.h"
#include "daemon/api/ttl_pins.h"
#include "daemon/auth/api_keys.h"
#include "daemon/validation/messages_request.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

// "msg_" and 24 random base-62 characters, as Anthropic's ids look.
std::string make_message_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string id = "msg_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % 62];
  return id;
}

ApiError anthropic(ApiError e) {
  e.dialect = ErrorDialect::kAnthropic;
  return e;
}

// Why generation stopped, Anthropic's names: "end_turn", "max_tokens" or
// "stop_sequence" (with the sequence: the one the generated text continues
// with right where the answer's text was cut).
struct StopInfo {
  std::string reason;
  json sequence = nullptr;
};
StopInfo stop_info(const CompletionFold& fold, const Request& r, const Tokenizer* tokenizer) {
  if (fold.finish == FinishReason::kLength) return {"max_tokens"};
  if (!r.stop.empty() && tokenizer) {
    const std::string generated = tokenizer->decode(fold.token_ids);
    for (const std::string& s : r.stop) {
      if (generated.compare(fold.text.size(), s.size(), s) == 0) return {"stop_sequence", s};
    }
  }
  return {"end_turn"};
}

// Each breakpoint's prefix pinned (or refreshed) after a completed answer,
// the pins that the request read refreshed, and the breakpoint hit/miss
// counters (GenerationSession::retain).
std::vector<BreakpointOutcome> settle_breakpoints(GenerationSession& session,
                                                  const MessagesRequest& m) {
  return session.retain(m.breakpoints, BreakpointCount::kCount)
      .value_or(std::vector<BreakpointOutcome>{});
}

// Anthropic's usage, and prefixd's account of each breakpoint.
json messages_usage_json(const Usage& u, const std::vector<BreakpointOutcome>& outcomes) {
  const CacheUsage c = cache_usage(u.prompt_tokens, u.cached_tokens, outcomes);
  json bps = json::array();
  for (const BreakpointOutcome& o : outcomes) {
    bps.push_back({{"field", o.breakpoint.field},
                   {"ttl", ttl_name(o.breakpoint.ttl)},
                   {"position_tokens", o.breakpoint.position_tokens},
                   {"pinned_tokens", o.pinned_tokens},
                   {"status", pin_status_name(o.status)}});
  }
  return json{
      {"input_tokens", c.input_tokens},
      {"output_tokens", u.completion_tokens},
      {"cache_creation_input_tokens", c.creation_tokens},
      {"cache_read_input_tokens", c.read_tokens},
      {"cache_creation",
       {{"ephemeral_5m_input_tokens", c.creation_tokens_by_ttl[static_cast<int>(CacheTtl::k5m)]},
        {"ephemeral_1h_input_tokens", c.creation_tokens_by_ttl[static_cast<int>(CacheTtl::k1h)]}}},
      {"cache_breakpoints", std::move(bps)}};
}

json message_json(const std::string& id, const MessagesRequest& m, json content,
                  const StopInfo* stop, json usage) {
  return json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", m.model},
              {"content", std::move(content)},
              {"stop_reason", stop ? json(stop->reason) : json(nullptr)},
              {"stop_sequence", stop ? stop->sequence : json(nullptr)},
              {"usage", std::move(usage)}};
}

void append_event(std::string* out, const char* name, const json& data) {
  *out += "event: ";
  *out += name;
  *out += "\ndata: ";
  *out += data.dump(-1, ' ', false, json::error_handler_t::replace);
  *out += "\n\n";
}

// One accepted request: what both deliveries share. m.request was moved
// into the session (session->request() is the request as submitted).
struct MessageCall {
  const Tokenizer* tokenizer = nullptr;  // the served model's (stop sequences)
  MessagesRequest m;
  std::string id;
  std::unique_ptr<GenerationSession> session;
};

// The events of one SSE answer, owned by the response's content provider.
// The session's destructor cancels the request when the stream ended early.
struct MessageStream {
  MessageCall call;
  bool started = false;
  SteadyClock::time_point t_last_write;

  void render_start(std::string* out) {
    json usage = {{"input_tokens", static_cast<int32_t>(call.session->request().prompt.size())},
                  {"output_tokens", 0},
                  {"cache_creation_input_tokens", 0},
                  {"cache_read_input_tokens", 0}};
    append_event(out, "message_start",
                 {{"type", "message_start"},
                  {"message", message_json(call.id, call.m, json::array(), nullptr, usage)}});
    append_event(out, "content_block_start",
                 {{"type", "content_block_start"},
                  {"index", 0},
                  {"content_block", {{"type", "text"}, {"text", ""}}}});
    started = true;
  }

  void render_text(const std::string& text, std::string* out) {
    if (text.empty()) return;
    append_event(out, "content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", 0},
                  {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }

  // The end: the held-back text, then the stop events with the final usage
  // (the breakpoints are pinned first), or an error event.
  void render_end(const EngineEvent& e, std::string* out) {
    render_text(e.text, out);
    const CompletionFold& fold = call.session->fold();
    if (ApiResult<void> err = completion_error(fold, Delivery::kStream); !err.ok()) {
      append_event(out, "error", anthropic(err.error()).to_json());
      return;
    }
    const std::vector<BreakpointOutcome> outcomes = settle_breakpoints(*call.session, call.m);
    const StopInfo stop = stop_info(fold, call.session->request(), call.tokenizer);
    append_event(out, "content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
    append_event(out, "message_delta",
                 {{"type", "message_delta"},
                  {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", stop.sequence}}},
                  {"usage", messages_usage_json(fold.usage, outcomes)}});
    append_event(out, "message_stop", {{"type", "message_stop"}});
  }

  // Turns newly folded events into SSE bytes.
  void render(const std::vector<EngineEvent>& events, std::string* out) {
    for (const EngineEvent& e : events) {
      if (e.type == EngineEvent::Type::kToken) render_text(e.text, out);
      if (e.type == EngineEvent::Type::kFinished || e.type == EngineEvent::Type::kError)
        render_end(e, out);
    }
  }

  // Called by the content provider once per wake-up; false ends the stream.
  bool pump(ChunkSink& sink) {
    std::string out;
    if (!started) render_start(&out);
    std::vector<EngineEvent> events = call.session->next();
    if (!events.empty()) render(events, &out);
    const SteadyClock::time_point now = SteadyClock::now();
    if (out.empty() && now - t_last_write > std::chrono::seconds(1)) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!sink.write(out)) {
        call.session->cancel();
        return false;  // the session's destructor counts the request as cancelled
      }
      t_last_write = now;
    }
    if (call.session->fold().finished) {
      call.session->end(Delivery::kStream);
      sink.done();
    }
    return true;
  }
};

void answer_whole(MessageCall& call, Reply& res) {
  GenerationSession& session = *call.session;
  session.wait_whole();
  const CompletionFold& fold = session.fold();
  if (ApiResult<void> err = completion_error(fold, Delivery::kWhole); !err.ok())
    return res.error(anthropic(err.error()));
  const std::vector<BreakpointOutcome> outcomes = settle_breakpoints(session, call.m);
  const StopInfo stop = stop_info(fold, session.request(), call.tokenizer);
  json content = json::array({{{"type", "text"}, {"text", fold.text}}});
  res.json(message_json(call.id, call.m, std::move(content), &stop,
                        messages_usage_json(fold.usage, outcomes)));
}

void answer_stream(std::unique_ptr<MessageCall> call, Reply& res) {
  auto st = std::make_shared<MessageStream>();
  st->call = std::move(*call);
  st->t_last_write = SteadyClock::now();
  res.header("Cache-Control", "no-cache");
  res.header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", [st](ChunkSink& sink) { return st->pump(sink); });
}

}  // namespace

void handle_messages(DaemonContext& ctx, const Call& http_call, Reply& res) {
  auto parsed = validate_messages(*http_call.body, ctx.model, /*count_only=*/false);
  if (!parsed.ok()) {
    http_call.count->settle(RequestOutcome::kInvalid);
    return res.error(anthropic(parsed.error()));
  }
  auto call = std::make_unique<MessageCall>();
  call->tokenizer = ctx.model.tokenizer;
  call->m = std::move(parsed.value());
  auto started = GenerationSession::start(ctx, http_call, std::move(call->m.request), res);
  if (!started.ok()) return res.error(anthropic(started.error()));
  call->session = std::move(started.value());
  call->id = make_message_id();
  if (call->m.stream) return answer_stream(std::move(call), res);
  answer_whole(*call, res);
}

void handle_count_tokens(DaemonContext& ctx, const Call& call, Reply& res) {
  auto parsed = validate_messages(*call.body, ctx.model, /*count_only=*/true);
  if (!parsed.ok()) return res.error(anthropic(parsed.error()));
  res.json(json{{"input_tokens", parsed.value().request.prompt.size()}});
}

}  // namespace prefixd
