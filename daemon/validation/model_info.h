// ModelInfo: the facts about the served model that request validation and the
// handlers need (its id, context length, vocabulary, tokenizer and chat
// template). Filled once by Server::create(); read-only afterwards.
#pragma once

#include <cstdint>
#include <string>

namespace prefixd {

class Tokenizer;
class ChatTemplate;

// Pointers are not owned and must outlive every call; `tokenizer` /
// `chat_template` may be null (then text prompts / messages are refused).
struct ModelInfo {
  std::string id;     // the served model id (`model` must equal it when given)
  int32_t n_ctx = 0;  // context length in tokens
  int32_t n_vocab = 0;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
};

}  // namespace prefixd
