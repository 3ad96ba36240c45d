// The completion fold and the envelope of whole answers and SSE chunks
// (daemon/api.md has the shapes).
#include "daemon/completion_response.h"

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
        text += e.text;
        break;
      case EngineEvent::Type::kFinished:
        finished = true;
        finish = e.finish;
        usage = e.usage;
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

std::optional<ApiError> completion_error(const CompletionFold& fold, Delivery delivery) {
  switch (fold.outcome()) {
    case RequestOutcome::kError:
      return ApiError::internal_error("the engine failed this request" +
                                      (fold.error.empty() ? "" : ": " + fold.error));
    case RequestOutcome::kCancelled:
      return ApiError::service_unavailable("the request was cancelled (server shutting down)",
                                           delivery == Delivery::kStream ? "" : "shutting_down");
    default:
      return std::nullopt;
  }
}

json completion_json(const CompletionHead& head, const CompletionFold& fold) {
  json choice;
  choice["index"] = 0;
  if (head.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", fold.text}};
  } else {
    choice["text"] = fold.text;
  }
  choice["finish_reason"] = finish_name(fold.finish);
  choice["logprobs"] = nullptr;
  choice["token_ids"] = fold.token_ids;
  json out = envelope(head, whole_object(head), json::array({choice}));
  out["usage"] = usage_json(fold.usage);
  out["prefix_cache"] = prefix_cache_json(fold.usage);
  return out;
}

json chunk_json(const CompletionHead& head, std::string_view text,
                std::span<const int32_t> token_ids, std::optional<FinishReason> finish) {
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
  choice["logprobs"] = nullptr;
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
  j["prefill_tokens"] = u.prefill_tokens;
  j["restore_path"] = u.restore_path;
  j["queue_ms"] = u.queue_ms;
  j["restore_ms"] = u.restore_ms;
  j["prefill_ms"] = u.prefill_ms;
  j["ttft_ms"] = u.ttft_ms;
  j["decode_ms"] = u.decode_ms;
  return j;
}

}  // namespace prefixd
