// Logprobs JSON in the completions and chat shapes, token writing and the
// echoed prompt (daemon/api.md has the shapes).
#include "daemon/api/logprobs_json.h"

#include <algorithm>
#include <cstdio>

#include "engine/text/stream_decoder.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

// A -inf logprob has no JSON number; OpenAI and vLLM write -9999.0.
double json_logprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

// The bytes a token stands for; control tokens (no bytes) give their vocabulary text.
std::string token_bytes(const Tokenizer& t, int32_t id) {
  if (t.token_type(id) == TokenType::kControl) return t.token_text(id);
  return t.token_to_piece(id);
}

}  // namespace

std::string TokenWriter::text(int32_t id) const {
  if (as_token_ids || tokenizer == nullptr) return "token_id:" + std::to_string(id);
  std::string bytes = token_bytes(*tokenizer, id);
  if (utf8::is_valid(bytes)) return bytes;
  std::string out = "bytes:";
  for (unsigned char b : bytes) {
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02x", b);
    out += hex;
  }
  return out;
}

json TokenWriter::bytes(int32_t id) const {
  if (tokenizer == nullptr) return nullptr;
  json out = json::array();
  for (unsigned char b : token_bytes(*tokenizer, id)) out.push_back(static_cast<int>(b));
  return out;
}

json completion_logprobs_json(std::span<const LogprobsItem> items, const TokenWriter& w) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const LogprobsItem& item : items) {
    tokens.push_back(w.text(item.token));
    text_offset.push_back(item.text_offset);
    if (item.logprobs == nullptr) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    const PositionLogprobs& lp = *item.logprobs;
    token_logprobs.push_back(json_logprob(lp.chosen.logprob));
    json top = json::object();
    bool chosen_in_top = false;
    for (const TokenLogprob& t : lp.top) {
      top[w.text(t.token)] = json_logprob(t.logprob);
      chosen_in_top = chosen_in_top || t.token == lp.chosen.token;
    }
    if (!chosen_in_top) top[w.text(lp.chosen.token)] = json_logprob(lp.chosen.logprob);
    top_logprobs.push_back(std::move(top));
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(text_offset)}};
}

json chat_logprobs_json(std::span<const LogprobsItem> items, const TokenWriter& w) {
  auto entry = [&](const TokenLogprob& t) {
    return json{{"token", w.text(t.token)},
                {"logprob", json_logprob(t.logprob)},
                {"bytes", w.bytes(t.token)}};
  };
  json content = json::array();
  for (const LogprobsItem& item : items) {
    if (item.logprobs == nullptr) continue;
    json e = entry(item.logprobs->chosen);
    json top = json::array();
    for (const TokenLogprob& t : item.logprobs->top) top.push_back(entry(t));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

EchoedPrompt echo_prompt(const std::vector<int32_t>& ids, const Tokenizer* tokenizer) {
  EchoedPrompt p;
  p.ids = ids;
  p.text_offsets.assign(ids.size(), 0);
  if (tokenizer == nullptr) return p;
  // The streaming decoder from the sequence start gives decode(ids) piece by
  // piece, so each token's offset is the text before it.
  StreamDecoder decoder(*tokenizer, /*strip_leading_space=*/true);
  int32_t chars = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p.text_offsets[i] = chars;
    const std::string piece = decoder.push(ids[i]);
    chars += utf8_chars(piece);
    p.text += piece;
  }
  p.text += decoder.flush();
  return p;
}

int32_t utf8_chars(std::string_view text) {
  int32_t n = 0;
  for (unsigned char b : text) n += (b & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace prefixd
