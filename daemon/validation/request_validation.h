// Parsing and validation of HTTP JSON bodies into engine Requests. Anything
// that fails here is answered with a 4xx ApiError and never reaches the
// engine. Pure functions over the body and the served model's facts; safe to
// call from any thread (the tokenizer and chat template are immutable).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/http/api_result.h"
#include "daemon/validation/model_info.h"
#include "engine/request.h"

namespace prefixd {

// A validated /v1/completions or /v1/chat/completions request.
struct GenerationRequest {
  Request request;  // kind kGenerate; prompt ids in vocabulary, fits the context;
                    // request.logprobs says whether logprobs are returned
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt leads the text (and the logprobs)
  bool tokens_as_ids = false;  // return_tokens_as_token_ids: tokens written "token_id:N"
  std::string model;           // echoed in the response (the served id)
};

// Limits on a request body's JSON, enforced while it is parsed (before the
// whole document is built), so a body within --max-body-bytes cannot grow
// into a much larger tree: at most kMaxJsonDepth nested arrays/objects and
// kMaxJsonValues values in all (every scalar, array and object counts one).
// A token-id prompt of the longest context we serve is far below either.
constexpr int kMaxJsonDepth = 64;
constexpr int64_t kMaxJsonValues = 1'000'000;
// `cache_salt` is kept beyond the request (the dashboard's prefix tracker
// stores it with each tracked prefix), so its length is bounded.
constexpr size_t kMaxCacheSaltBytes = 256;
// `stop`: each string is matched against every generated token's text, so
// their number and length are bounded (as OpenAI's API bounds them to 4).
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;

// Body -> JSON object, parsed once; malformed JSON, a non-object, nesting
// deeper than kMaxJsonDepth or more than kMaxJsonValues values give 400.
ApiResult<nlohmann::json> parse_json_body(const std::string& body);

// /v1/completions (chat = false) or /v1/chat/completions (chat = true).
ApiResult<GenerationRequest> validate_generation(const nlohmann::json& body, const ModelInfo& model,
                                                 bool chat);

// The prompt of a cache endpoint body: `prompt` (text or ids) or `messages`
// (rendered with the chat template and the generation prompt, exactly as a
// chat completion would tokenize it), plus `cache_salt`.
struct PromptRequest {
  std::vector<int32_t> prompt;  // token ids in vocabulary, within the context
  std::string cache_salt;
};
ApiResult<PromptRequest> validate_prompt_body(const nlohmann::json& body, const ModelInfo& model);

// POST /tokenize {"content": str, "add_special": bool (default false),
// "parse_special": bool (default true)} -> token ids.
ApiResult<std::vector<int32_t>> validate_tokenize(const nlohmann::json& body,
                                                  const ModelInfo& model);

// POST /detokenize {"tokens": [ids]} -> the ids (checked against the vocabulary).
ApiResult<std::vector<int32_t>> validate_detokenize(const nlohmann::json& body,
                                                    const ModelInfo& model);

}  // namespace prefixd
