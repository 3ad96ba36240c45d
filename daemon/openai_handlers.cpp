// Completions and chat completions: submit, then turn the engine's events
// into one JSON answer or an SSE stream. A stream whose client goes away
// cancels its request (the engine then frees its blocks).
#include "daemon/openai_handlers.h"

#include <chrono>
#include <ctime>
#include <memory>

#include "daemon/dashboard.h"
#include "daemon/http_util.h"
#include "engine/engine.h"

namespace prefixd {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

const char* finish_name(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Latency bookkeeping of one request as its HTTP worker sees it.
struct Timing {
  SteadyClock::time_point t_arrival;
  SteadyClock::time_point t_last_token{};
  bool first_token_seen = false;

  // Called once per wake-up with the number of tokens that arrived in it; a
  // wake-up that delivers k tokens splits the gap since the previous token
  // evenly among them.
  void on_tokens(Metrics& m, int32_t n_tokens, SteadyClock::time_point now) {
    if (n_tokens == 0) return;
    int32_t gaps = n_tokens;
    if (!first_token_seen) {
      m.observe_ttft(seconds_between(t_arrival, now));
      first_token_seen = true;
      gaps = n_tokens - 1;
    } else {
      const double gap_s = seconds_between(t_last_token, now) / n_tokens;
      for (int32_t i = 0; i < gaps; ++i) m.observe_inter_token(gap_s);
      gaps = 0;
    }
    for (int32_t i = 0; i < gaps; ++i) m.observe_inter_token(0.0);
    t_last_token = now;
  }
};

// The answer as it accumulates.
struct Accumulated {
  std::string text;
  std::vector<int32_t> token_ids;
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  bool finished = false;
  bool failed = false;
  std::string error;
};

RequestOutcome outcome_of(const Accumulated& a) {
  if (a.failed || a.finish == FinishReason::kError) return RequestOutcome::kError;
  if (a.finish == FinishReason::kCancelled) return RequestOutcome::kCancelled;
  return RequestOutcome::kCompleted;
}

json full_response(const GenerationRequest& g, const std::string& id, int64_t created,
                   const Accumulated& a) {
  json choice;
  choice["index"] = 0;
  if (g.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", a.text}};
  } else {
    choice["text"] = a.text;
  }
  choice["finish_reason"] = finish_name(a.finish);
  choice["logprobs"] = nullptr;
  choice["token_ids"] = a.token_ids;
  json out;
  out["id"] = id;
  out["object"] = g.chat ? "chat.completion" : "text_completion";
  out["created"] = created;
  out["model"] = g.model;
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(a.usage);
  out["prefix_cache"] = prefix_cache_json(a.usage);
  return out;
}

// State of one SSE answer, owned by the response's content provider. Its
// destructor cancels the request when the stream ended early.
struct StreamState {
  DaemonContext* ctx = nullptr;
  GenerationRequest meta;
  std::shared_ptr<RequestChannel> channel;
  AdmissionTicket ticket;
  std::string id;
  int64_t created = 0;
  Timing timing;
  Accumulated acc;
  bool role_sent = false;
  bool counted = false;
  SteadyClock::time_point t_last_write;

  ~StreamState() {
    if (!acc.finished) channel->cancel();
    if (!counted) ctx->metrics->count_request(RequestOutcome::kCancelled);
  }

  json chunk(const std::string& text, const std::vector<int32_t>& ids, const char* finish) const {
    json choice;
    choice["index"] = 0;
    if (meta.chat) {
      json delta = json::object();
      if (!text.empty()) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
      choice["token_ids"] = ids;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish ? json(finish) : json(nullptr);
    json out;
    out["id"] = id;
    out["object"] = meta.chat ? "chat.completion.chunk" : "text_completion";
    out["created"] = created;
    out["model"] = meta.model;
    out["choices"] = json::array({choice});
    return out;
  }

  static void append_event(std::string* out, const json& j) {
    *out += "data: ";
    *out += dump(j);
    *out += "\n\n";
  }

  // Turns newly arrived events into SSE bytes.
  void render(std::vector<EngineEvent>& events, std::string* out) {
    if (meta.chat && !role_sent) {
      json first = chunk("", {}, nullptr);
      first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      append_event(out, first);
      role_sent = true;
    }
    int32_t n_tokens = 0;
    for (EngineEvent& e : events) {
      if (e.type == EngineEvent::Type::kToken) {
        ++n_tokens;
        acc.token_ids.push_back(e.token);
        acc.text += e.text;
        if (!meta.chat || !e.text.empty()) append_event(out, chunk(e.text, {e.token}, nullptr));
      } else if (e.type == EngineEvent::Type::kFinished) {
        acc.finished = true;
        acc.finish = e.finish;
        acc.usage = e.usage;
        if (!e.text.empty()) {
          acc.text += e.text;
          append_event(out, chunk(e.text, {}, nullptr));
        }
        if (e.finish == FinishReason::kError || e.finish == FinishReason::kCancelled) {
          ApiError err{e.finish == FinishReason::kError ? 500 : 503,
                       e.finish == FinishReason::kError
                           ? "the engine failed this request"
                           : "the request was cancelled (server shutting down)",
                       e.finish == FinishReason::kError ? "server_error" : "unavailable", "", ""};
          append_event(out, err.to_json());
        } else {
          append_event(out, chunk("", {}, finish_name(e.finish)));
          if (meta.include_usage) {
            json u;
            u["id"] = id;
            u["object"] = meta.chat ? "chat.completion.chunk" : "text_completion";
            u["created"] = created;
            u["model"] = meta.model;
            u["choices"] = json::array();
            u["usage"] = usage_json(e.usage);
            u["prefix_cache"] = prefix_cache_json(e.usage);
            append_event(out, u);
          }
        }
        *out += "data: [DONE]\n\n";
      } else {  // kError
        acc.finished = true;
        acc.failed = true;
        acc.error = e.error;
        ApiError err{500, "the engine failed this request: " + e.error, "server_error", "", ""};
        append_event(out, err.to_json());
        *out += "data: [DONE]\n\n";
      }
      if (acc.finished) break;
    }
    timing.on_tokens(*ctx->metrics, n_tokens, SteadyClock::now());
  }

  void record_end() {
    if (counted) return;
    counted = true;
    ctx->metrics->count_request(outcome_of(acc));
    if (acc.finished && !acc.failed) ctx->metrics->observe_queue(acc.usage.queue_ms / 1000.0);
    if (ctx->dashboard && acc.finished && outcome_of(acc) == RequestOutcome::kCompleted)
      ctx->dashboard->record_request(meta.request.prompt, meta.request.cache_salt, acc.usage);
  }
};

}  // namespace

json usage_json(const Usage& u) {
  json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

json prefix_cache_json(const Usage& u) {
  json j;
  j["cached_tokens"] = u.cached_tokens;
  j["device_tokens"] = u.device_tokens;
  j["host_tokens"] = u.host_tokens;
  j["disk_tokens"] = u.disk_tokens;
  j["prefill_tokens"] = u.prefill_tokens;
  j["restore_path"] = u.restore_path;
  j["queue_ms"] = u.queue_ms;
  j["restore_ms"] = u.restore_ms;
  j["prefill_ms"] = u.prefill_ms;
  j["ttft_ms"] = u.ttft_ms;
  j["decode_ms"] = u.decode_ms;
  return j;
}

void handle_generation(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res,
                       bool chat) {
  const SteadyClock::time_point t_arrival = SteadyClock::now();
  auto fail = [&](const ApiError& e, RequestOutcome outcome) {
    ctx.metrics->count_request(outcome);
    send_error(res, e);
  };
  if (ctx.draining.load()) {
    res.set_header("Retry-After", std::to_string(ctx.retry_after_s));
    return fail(ApiError{503, "the server is shutting down", "unavailable", "", "shutting_down"},
                RequestOutcome::kRejected);
  }
  auto body = parse_json_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return fail(*e, RequestOutcome::kInvalid);
  auto parsed = validate_generation(std::get<json>(body), ctx.model, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e, RequestOutcome::kInvalid);
  GenerationRequest g = std::move(std::get<GenerationRequest>(parsed));

  if (!ctx.admission->try_acquire()) {
    res.set_header("Retry-After", std::to_string(ctx.retry_after_s));
    return fail(ApiError{429,
                         "too many requests in flight (" + std::to_string(ctx.admission->limit()) +
                             "); retry later",
                         "rate_limit_error", "", "queue_full"},
                RequestOutcome::kRejected);
  }
  AdmissionTicket ticket(ctx.admission);
  const std::string id = make_response_id(chat ? "chatcmpl" : "cmpl");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::shared_ptr<RequestChannel> channel = ctx.engine->submit(g.request);

  if (!g.stream) {
    Timing timing{t_arrival};
    Accumulated acc;
    while (!acc.finished) {
      if (ctx.cancel_all.load()) channel->cancel();
      std::vector<EngineEvent> events = channel->wait(kChannelPoll);
      int32_t n_tokens = 0;
      for (EngineEvent& e : events) {
        if (e.type == EngineEvent::Type::kToken) {
          ++n_tokens;
          acc.token_ids.push_back(e.token);
          acc.text += e.text;
        } else if (e.type == EngineEvent::Type::kFinished) {
          acc.finished = true;
          acc.finish = e.finish;
          acc.usage = e.usage;
          acc.text += e.text;
          break;
        } else {
          acc.finished = true;
          acc.failed = true;
          acc.error = e.error;
          break;
        }
      }
      timing.on_tokens(*ctx.metrics, n_tokens, SteadyClock::now());
    }
    ctx.metrics->count_request(outcome_of(acc));
    if (acc.failed || acc.finish == FinishReason::kError) {
      send_error(res, ApiError{500,
                               "the engine failed this request" +
                                   (acc.error.empty() ? "" : ": " + acc.error),
                               "server_error", "", ""});
      return;
    }
    if (acc.finish == FinishReason::kCancelled) {
      send_error(res, ApiError{503, "the request was cancelled (server shutting down)",
                               "unavailable", "", "shutting_down"});
      return;
    }
    ctx.metrics->observe_queue(acc.usage.queue_ms / 1000.0);
    if (ctx.dashboard)
      ctx.dashboard->record_request(g.request.prompt, g.request.cache_salt, acc.usage);
    send_json(res, full_response(g, id, created, acc));
    return;
  }

  auto st = std::make_shared<StreamState>();
  st->ctx = &ctx;
  st->meta = std::move(g);
  st->channel = channel;
  st->ticket = std::move(ticket);
  st->id = id;
  st->created = created;
  st->timing.t_arrival = t_arrival;
  st->t_last_write = SteadyClock::now();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t /*offset*/, httplib::DataSink& sink) {
        if (st->ctx->cancel_all.load()) st->channel->cancel();
        std::vector<EngineEvent> events = st->channel->wait(kChannelPoll);
        std::string out;
        if (!events.empty() || (st->meta.chat && !st->role_sent)) st->render(events, &out);
        const SteadyClock::time_point now = SteadyClock::now();
        // An SSE comment now and then: keeps proxies from timing out and lets a
        // failed write reveal a client that went away while nothing was produced.
        if (out.empty() && now - st->t_last_write > std::chrono::seconds(1))
          out = ": keep-alive\n\n";
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) {
            st->channel->cancel();
            return false;  // StreamState's destructor counts the request as cancelled
          }
          st->t_last_write = now;
        }
        if (st->acc.finished) {
          st->record_end();
          sink.done();
        }
        return true;
      });
}

}  // namespace prefixd
