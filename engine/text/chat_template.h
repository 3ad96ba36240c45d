// Chat templates: OpenAI-style messages -> prompt tokens for the common model
// families, detected from tokenizer.chat_template or named by --chat-template.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine/text/tokenizer.h"

namespace prefixd {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others are passed through where the family allows)
  std::string content;
};

// One chat format. The supported families (names accepted by detect()'s
// override, aliases in parentheses):
//   chatml   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   llama-3  (llama3) <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//   llama-2  (llama2) [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   mistral  [INST] {system}\n\n{user} [/INST]{assistant}</s>[INST] ...
//   gemma    (gemma3) <start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n
//            <start_of_turn>model\n...
//            Gemma 2 and 3: user and model contents trimmed as their templates' `| trim`;
//            the system prompt opens the first user turn (Gemma 3's first_user_prefix)
//   phi-3    (phi3) <|{role}|>\n{content}<|end|>\n ... <|assistant|>\n
//   zephyr   <|{role}|>\n{content}{eos}\n ... <|assistant|>\n
// The leading BOS is not part of the rendering: encode() adds it as the
// tokenizer's add_bos flag says (as llama.cpp does).
//
// Prefix sharing: every family renders messages strictly in order and puts
// the system prompt first (families without a system role fold it into the
// start of the first user turn), so requests that share a system prompt (and
// earlier turns) share a token prefix.
//
// Injection safety: render() marks the template's own markup as segments
// whose special-token text is parsed and message contents as segments whose
// text never becomes special tokens; encode() tokenizes them with
// Tokenizer::encode_segments. A user writing "<|im_end|>" gets those
// characters as text. The ids equal llama.cpp's tokenization of the rendered
// string with parse_special when contents hold no special-token text.
//
// Thread-safety: immutable; const methods may be called from any thread.
class ChatTemplate {
 public:
  // Picks the family from the Jinja text of tokenizer.chat_template, or from
  // `override_name` when that is non-empty. An empty or unrecognised template
  // without an override, or an unknown override name, is an error whose
  // message lists the supported names.
  static Result<ChatTemplate> detect(const std::string& template_text,
                                     const std::string& override_name);

  // Canonical family name ("chatml", "llama-3", ...).
  const std::string& name() const { return name_; }
  static std::vector<std::string> supported_names();

  // The prompt as segments (markup: parse_special = true; contents: false).
  // `eos_text` is the model's EOS token text (used by llama-2, mistral and
  // zephyr to close assistant turns).
  std::vector<TextSegment> render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  const std::string& eos_text = "</s>") const;

  // The rendered prompt as one string (for logs and tests).
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& eos_text = "</s>") const;

  // Prompt token ids: BOS per the tokenizer's add_bos, then the rendering,
  // special tokens recognised in the markup only.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) const;

 private:
  enum class Family { kChatml, kLlama3, kLlama2, kMistral, kGemma, kPhi3, kZephyr };
  ChatTemplate(Family family, std::string name) : family_(family), name_(std::move(name)) {}

  Family family_;
  std::string name_;
};

}  // namespace prefixd
