// How token log-probabilities appear in an answer: OpenAI's legacy
// completions shape ({tokens, token_logprobs, top_logprobs, text_offset}),
// the chat shape ({content: [{token, logprob, bytes, top_logprobs}]}), how a
// token is written in them, and the echoed prompt of a completion. Pure
// functions; any thread (the tokenizer is immutable).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/logprobs.h"

namespace prefixd {

class Tokenizer;

// How a token id is written: the text of the bytes it stands for (a control
// token's vocabulary text, "<s>"; bytes that are not valid UTF-8 on their own
// as "bytes:\xNN..." as OpenAI does), or "token_id:N" with
// return_tokens_as_token_ids (vLLM's extension) or without a tokenizer.
struct TokenWriter {
  const Tokenizer* tokenizer = nullptr;  // not owned; null: every token as "token_id:N"
  bool as_token_ids = false;

  std::string text(int32_t id) const;
  // The chat `bytes` field: the token's bytes (its real bytes even when
  // written as "token_id:N"); null without a tokenizer.
  nlohmann::json bytes(int32_t id) const;
};

// One token of an answer's logprobs.
struct LogprobsItem {
  int32_t token = -1;
  const PositionLogprobs* logprobs = nullptr;  // null: none (an echoed prompt's first token)
  int32_t text_offset = 0;  // where its text starts in the choice's text, in code points
};

// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}: top_logprobs
// holds per token a {token: logprob} object of the top N and the chosen
// token (N + 1 entries when the chosen one is not among the top N; N = 0
// gives the chosen token alone), or null where the token has no logprob.
nlohmann::json completion_logprobs_json(std::span<const LogprobsItem> items, const TokenWriter& w);

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}] (the top N, best first)}], "refusal": null}. Items
// without logprobs are skipped (chat never has them).
nlohmann::json chat_logprobs_json(std::span<const LogprobsItem> items, const TokenWriter& w);

// The prompt that a completion with `echo` puts first: its text as the
// tokenizer decodes it (control tokens give no text; for a text prompt this
// is the prompt itself) and where each of its tokens starts in that text.
struct EchoedPrompt {
  std::string text;
  std::vector<int32_t> ids;           // (n_prompt)
  std::vector<int32_t> text_offsets;  // (n_prompt) in code points
};
// Without a tokenizer the text is empty and every offset 0.
EchoedPrompt echo_prompt(const std::vector<int32_t>& ids, const Tokenizer* tokenizer);

// Unicode code points in well-formed UTF-8 `text` (OpenAI's offsets count
// characters, not bytes).
int32_t utf8_chars(std::string_view text);

}  // namespace prefixd
