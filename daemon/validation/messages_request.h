// Validation of an Anthropic Messages body (POST /v1/messages and
// /v1/messages/count_tokens) into an engine Request and its cache
// breakpoints. Text content only: tools, images, documents and the other
// block types are refused with the field named, never dropped. Errors use
// Anthropic's dotted field paths ("messages.1.content.0.cache_control.ttl")
// as ApiError::param and at the start of the message. Pure functions; any
// thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/validation/cache_breakpoints.h"
#include "daemon/validation/request_validation.h"

namespace prefixd {

// Anthropic's limit on `cache_control` marks in one request.
constexpr size_t kMaxCacheBreakpoints = 4;
// `stop_sequences`: as `stop` on the OpenAI routes.
constexpr size_t kMaxStopSequences = kMaxStopStrings;

struct MessagesRequest {
  Request request;  // kind kGenerate; the rendered prompt, sampling, max_tokens, stop strings
  bool stream = false;
  std::string model;                         // the served id (echoed in the answer)
  std::vector<CacheBreakpoint> breakpoints;  // in prompt order (TTLs never increase along it)
};

// POST /v1/messages (count_only = false: max_tokens required) or
// /v1/messages/count_tokens (count_only = true: max_tokens, sampling and
// stream are not read).
ApiResult<MessagesRequest> validate_messages(const nlohmann::json& body, const ModelInfo& model,
                                             bool count_only);

}  // namespace prefixd
