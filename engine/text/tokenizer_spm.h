// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): Llama 2,
// Mistral, TinyLlama, stories260K. Greedy merges by token score with byte
// fallback, as llama.cpp's llm_tokenizer_spm does.
#pragma once

#include <array>
#include <memory>
#include <unordered_set>

#include "engine/text/tokenizer.h"

namespace prefixd {

// Encoding: spaces become "▁" (U+2581); a run of text that starts the sequence
// or follows a special token gets a "▁" prefix when add_space_prefix is set.
// The text is split into UTF-8 characters; repeatedly, the adjacent pair whose
// concatenation is the vocabulary token with the highest score (leftmost on
// ties) is merged. Symbols that are not tokens are re-split along their merge
// history, and characters that never were tokens become byte tokens <0xNN>
// (or the unknown token when the vocabulary has no byte tokens). Control and
// unknown tokens are never formed by merging, so plain text cannot produce
// "<s>" or "</s>".
class SpmTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerVocab vocab);

 protected:
  void tokenize_text(std::string_view text, bool after_special,
                     std::vector<int32_t>* out) const override;
  std::string normal_piece(int32_t id) const override;

 private:
  explicit SpmTokenizer(TokenizerVocab vocab) : Tokenizer(std::move(vocab)) {}

  // Id of a token that may result from a merge, or -1.
  int32_t mergeable_token(std::string_view text) const;
  // The merge algorithm on one chunk of escaped text.
  void tokenize_chunk(std::string_view text, std::vector<int32_t>* out) const;

  // Pairs of adjacent characters (each packed as its UTF-8 bytes) that occur
  // inside some mergeable token. Between two characters that form no such
  // pair no merge can ever happen, so the text is cut there into chunks that
  // are tokenized independently (same result, much less work on long text).
  std::unordered_set<uint64_t> inner_pairs_;

  std::array<int32_t, 256> byte_token_{};  // byte -> <0xNN> token (or its fallback), -1 if none
};

}  // namespace prefixd
