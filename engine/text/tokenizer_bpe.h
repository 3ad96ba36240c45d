// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"): Llama 3, Qwen2,
// SmolLM, GPT-2. Regex pre-tokenizer selected by tokenizer.ggml.pre (PCRE2,
// UTF + Unicode properties, JIT), GPT-2 byte-to-unicode mapping, ranked merges.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/text/tokenizer.h"

namespace prefixd {

// Encoding, as llama.cpp's llm_tokenizer_bpe: the pre-tokenizer's regexes
// split the text into words (each regex in turn splits the pieces the previous
// one produced; unmatched gaps are kept as pieces). Each word's bytes start as
// one symbol per byte (the GPT-2 byte-to-unicode character); the adjacent pair
// with the lowest merge rank (leftmost on ties) is merged until none applies.
// With llama-bpe (ignore_merges), a word that is itself a token is emitted
// directly. Supported pre values: default, gpt-2 (and gpt2), llama-bpe (llama3,
// llama-v3; lfm2, whose splits and flags llama.cpp takes from llama3), qwen2,
// smollm; any other is an error at create().
class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerVocab vocab);
  ~BpeTokenizer() override;

  // The GPT-2 byte-to-unicode character of each byte, UTF-8 encoded.
  static const std::array<std::string, 256>& byte_chars();

 protected:
  void tokenize_text(std::string_view text, bool after_special,
                     std::vector<int32_t>* out) const override;
  std::string normal_piece(int32_t id) const override;

 private:
  explicit BpeTokenizer(TokenizerVocab vocab) : Tokenizer(std::move(vocab)) {}

  struct Merge {
    int32_t rank;
    int32_t result;  // token id of the merged pair
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // Splits `text` into pre-tokenizer words (byte ranges) appended to *words.
  void split_words(std::string_view text,
                   std::vector<std::pair<size_t, size_t>>* words) const;
  // BPE of one word (raw bytes), appending ids.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  bool ignore_merges_ = false;
  std::vector<void*> regexes_;             // pcre2_code_8*, owned, applied in order
  std::array<int32_t, 256> byte_token_{};  // byte -> token of its byte char, -1 if none
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
  std::unordered_map<uint32_t, uint8_t> char_to_byte_;  // byte char code point -> byte
};

}  // namespace prefixd
