// The completion fold and the envelope of whole answers and SSE chunks
// (daemon/api.md has the shapes).
#include "daemon/api/completion_response.h"

namespace prefixd {
namespace {

using nlohmann::json;

const char* finish_name(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

// id, object, created, model and choices: what every document of an answer has.
json envelope(const CompletionHead& head, const char* object, json choices) {
  json out;
  out["id"] = head.id;
  out["object"] = object;
  out["created"] = head.created;
  out["model"] = head.model;
  out["choices"] = std::move(choices);
  return out;
}

const char* whole_object(const CompletionHead& head) {
  return head.chat ? "chat.completion" : "text_completion";
}

const char* chunk_object(const CompletionHead& head) {
  return head.chat ? "chat.completion.chunk" : "text_completion";
}

}  // namespace

size_t CompletionFold::add(std::span<const EngineEvent> events) {
  size_t n_folded = 0;
  for (const EngineEvent& e : events) {
    if (finished) break;
    ++n_folded;
    switch (e.type) {
      case EngineEvent::Type::kToken:
        token_ids.push_back(e.token);
        text_offsets.push_back(text_chars);
        text_chars += utf8_chars(e.text);
        text += e.text;
        if (e.logprobs) logprobs.push_back(*e.logprobs);
        break;
      case EngineEvent::Type::kPromptLogprobs:
        prompt_logprobs = e.prompt_logprobs;
        break;
      case EngineEvent::Type::kFinished:
        finished = true;
        finish = e.finish;
        usage = e.usage;
        text_chars += utf8_chars(e.text);
        text += e.text;
        break;
      case EngineEvent::Type::kError:
        finished = true;
        failed = true;
        error = e.error;
        break;
    }
  }
  return n_folded;
}

RequestOutcome CompletionFold::outcome() const {
  if (failed || finish == FinishReason::kError) return RequestOutcome::kError;
  if (finish == FinishReason::kCancelled) return RequestOutcome::kCancelled;
  return RequestOutcome::kCompleted;
}

ApiResult<void> completion_error(const CompletionFold& fold, Delivery delivery) {
  switch (fold.outcome()) {
    case RequestOutcome::kError:
      return ApiError::internal_error("the engine failed this request" +
                                      (fold.error.empty() ? "" : ": " + fold.error));
    case RequestOutcome::kCancelled:
      return ApiError::service_unavailable("the request was cancelled (server shutting down)",
                                           delivery == Delivery::kStream ? "" : "shutting_down");
    default:
      return {};
  }
}

namespace {

// The echoed prompt's logprobs items: none for the first token, then
// fold.prompt_logprobs (as far as they came).
std::vector<LogprobsItem> prompt_items(const EchoedPrompt& echo, const CompletionFold& fold) {
  std::vector<LogprobsItem> items;
  for (size_t i = 0; i < echo.ids.size(); ++i) {
    const PositionLogprobs* lp =
        i >= 1 && i - 1 < fold.prompt_logprobs.size() ? &fold.prompt_logprobs[i - 1] : nullptr;
    items.push_back(LogprobsItem{echo.ids[i], lp, echo.text_offsets[i]});
  }
  return items;
}

// Generated tokens [first, first + n) as logprobs items.
void append_token_items(const CompletionHead& head, const CompletionFold& fold, size_t first,
                        size_t n, std::vector<LogprobsItem>* items) {
  const int32_t offset0 = head.echo ? utf8_chars(head.echo->text) : 0;
  for (size_t i = first; i < first + n && i < fold.token_ids.size(); ++i) {
    const PositionLogprobs* lp = i < fold.logprobs.size() ? &fold.logprobs[i] : nullptr;
    items->push_back(LogprobsItem{fold.token_ids[i], lp, offset0 + fold.text_offsets[i]});
  }
}

json logprobs_json(const CompletionHead& head, const std::vector<LogprobsItem>& items) {
  return head.chat ? chat_logprobs_json(items, head.tokens)
                   : completion_logprobs_json(items, head.tokens);
}

}  // namespace

json tokens_logprobs_json(const CompletionHead& head, const CompletionFold& fold, size_t first,
                          size_t n) {
  if (!head.logprobs) return nullptr;
  std::vector<LogprobsItem> items;
  append_token_items(head, fold, first, n, &items);
  return logprobs_json(head, items);
}

json echo_chunk_json(const CompletionHead& head, const CompletionFold& fold) {
  json logprobs = nullptr;
  if (head.logprobs)
    logprobs = completion_logprobs_json(prompt_items(*head.echo, fold), head.tokens);
  return chunk_json(head, head.echo->text, {}, std::nullopt, std::move(logprobs));
}

json completion_json(const CompletionHead& head, const CompletionFold& fold) {
  json choice;
  choice["index"] = 0;
  if (head.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", fold.text}};
  } else {
    choice["text"] = head.echo ? head.echo->text + fold.text : fold.text;
  }
  choice["finish_reason"] = finish_name(fold.finish);
  if (head.logprobs) {
    std::vector<LogprobsItem> items;
    if (head.echo && !head.chat) items = prompt_items(*head.echo, fold);
    append_token_items(head, fold, 0, fold.token_ids.size(), &items);
    choice["logprobs"] = logprobs_json(head, items);
  } else {
    choice["logprobs"] = nullptr;
  }
  choice["token_ids"] = fold.token_ids;
  json out = envelope(head, whole_object(head), json::array({choice}));
  out["usage"] = usage_json(fold.usage);
  out["prefix_cache"] = prefix_cache_json(fold.usage);
  return out;
}

json chunk_json(const CompletionHead& head, std::string_view text,
                std::span<const int32_t> token_ids, std::optional<FinishReason> finish,
                json logprobs) {
  json choice;
  choice["index"] = 0;
  if (head.chat) {
    json delta = json::object();
    if (!text.empty()) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
    choice["token_ids"] = std::vector<int32_t>(token_ids.begin(), token_ids.end());
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish ? json(finish_name(*finish)) : json(nullptr);
  return envelope(head, chunk_object(head), json::array({choice}));
}

json role_chunk_json(const CompletionHead& head) {
  json first = chunk_json(head, "", {});
  first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
  return first;
}

json usage_chunk_json(const CompletionHead& head, const Usage& usage) {
  json out = envelope(head, chunk_object(head), json::array());
  out["usage"] = usage_json(usage);
  out["prefix_cache"] = prefix_cache_json(usage);
  return out;
}

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
  j["remote_tokens"] = u.remote_tokens;
  j["prefill_tokens"] = u.prefill_tokens;
  j["restore_path"] = u.onboard_path;
  j["queue_ms"] = u.queue_ms;
  j["restore_ms"] = u.onboard_ms;
  j["prefill_ms"] = u.prefill_ms;
  j["ttft_ms"] = u.ttft_ms;
  j["decode_ms"] = u.decode_ms;
  if (u.has_state) {
    // Models resumed from state snapshots: where the recurrent state came from.
    j["state_resumed_tokens"] = u.state_resumed_tokens;
    j["state_from"] = u.state_from;
  }
  return j;
}

}  // namespace prefixd
