// What a completion or a chat completion answers: the fold of the engine's
// events into text, token ids, finish reason and usage, and the JSON envelope
// of a whole answer and of its SSE chunks. The plain and the streaming paths
// use the same fold and the same envelope. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/logprobs_json.h"
#include "daemon/http/api_result.h"
#include "daemon/monitoring/metrics.h"
#include "engine/request.h"

namespace prefixd {

// A request's answer so far, folded from its engine events in order.
struct CompletionFold {
  std::string text;                // generated text, held-back tail included once finished
  std::vector<int32_t> token_ids;  // (n_tokens) generated token ids
  std::vector<int32_t> text_offsets;  // (n_tokens) where each token's text starts in `text`,
                                      // in code points
  int32_t text_chars = 0;             // code points in `text`
  std::vector<PositionLogprobs> logprobs;         // (n_tokens) when the request asked for them
  std::vector<PositionLogprobs> prompt_logprobs;  // (n_prompt - 1) echo with logprobs: prompt
                                                  // tokens 1..
  FinishReason finish = FinishReason::kNone;
  Usage usage;            // from the kFinished event
  bool finished = false;  // a kFinished or kError event arrived: nothing follows
  bool failed = false;    // ... and it was kError
  std::string error;      // kError's message

  // Folds `events` up to and including the one that ends the request (none
  // once finished); returns how many it folded, so that a caller can render
  // exactly those.
  size_t add(std::span<const EngineEvent> events);

  // How the request ended (meaningful once finished).
  RequestOutcome outcome() const;
};

// How the answer reaches the client: one JSON document, or server-sent events.
enum class Delivery : uint8_t { kWhole, kStream };

// The error a finished request that did not complete answers with: 500 when
// the engine failed it, 503 when shutdown cancelled it; ok when it
// completed (stop or length). In a stream it goes out as an event, and there
// the cancellation has always carried no code.
ApiResult<void> completion_error(const CompletionFold& fold, Delivery delivery);

// The fields every document of one answer repeats, and how it is rendered.
struct CompletionHead {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model id
  bool chat = false;    // /v1/chat/completions (else /v1/completions)
  bool logprobs = false;  // choices carry `logprobs` (else null)
  TokenWriter tokens{};   // how logprobs write tokens
  std::shared_ptr<const EchoedPrompt> echo{};  // completions with echo: the prompt leading the text
};

// The whole answer of a completed request (object "text_completion" or
// "chat.completion", with usage and prefix_cache).
nlohmann::json completion_json(const CompletionHead& head, const CompletionFold& fold);

// The `logprobs` of generated tokens [first, first + n) of `fold` in the
// answer's shape (completions: offsets count the echoed prompt too); null
// when the request asked for none.
nlohmann::json tokens_logprobs_json(const CompletionHead& head, const CompletionFold& fold,
                                    size_t first, size_t n);

// One SSE chunk (object "text_completion" or "chat.completion.chunk"): new
// `text` and, for completions, the `token_ids` that produced it, with their
// `logprobs` (null when not asked); `finish_reason` null unless `finish` is
// given (the last chunk).
nlohmann::json chunk_json(const CompletionHead& head, std::string_view text,
                          std::span<const int32_t> token_ids,
                          std::optional<FinishReason> finish = std::nullopt,
                          nlohmann::json logprobs = nullptr);

// A completion stream's echo chunk: the prompt's text and, with logprobs,
// the prompt's logprobs (from fold.prompt_logprobs). Needs head.echo.
nlohmann::json echo_chunk_json(const CompletionHead& head, const CompletionFold& fold);

// A chat stream's first chunk: delta {"role": "assistant", "content": ""}.
nlohmann::json role_chunk_json(const CompletionHead& head);

// The stream_options.include_usage chunk: empty choices, usage and prefix_cache.
nlohmann::json usage_chunk_json(const CompletionHead& head, const Usage& usage);

// The `usage` and `prefix_cache` objects of an answer (daemon/api.md).
nlohmann::json usage_json(const Usage& u);
nlohmann::json prefix_cache_json(const Usage& u);

}  // namespace prefixd
