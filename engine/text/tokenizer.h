// Tokenizer interface and factory: text <-> token ids exactly as the model was
// trained, from the GGUF tokenizer metadata. Two models: SentencePiece-style
// score merges ("llama", tokenizer_spm.h) and byte-level BPE ("gpt2",
// tokenizer_bpe.h). Special tokens are recognised in text only where asked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "engine/model/gguf.h"

namespace prefixd {

// GGUF token types (tokenizer.ggml.token_type), numbered as llama.cpp does.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, <|eot_id|>, <|im_start|>: never produced from plain text
  kUserDefined = 4,  // added tokens matched verbatim in any text
  kUnused = 5,
  kByte = 6,  // SPM byte fallback <0xNN>
};

// Everything a tokenizer needs, as read from GGUF metadata (or built by tests).
// Ids are -1 when the model has no such token.
struct TokenizerVocab {
  std::string model;                 // "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre;                   // BPE pre-tokenizer: default, gpt-2, llama-bpe, lfm2, qwen2, smollm
  std::vector<std::string> tokens;   // [n_vocab] token text (SPM: "▁" for space; BPE: byte-mapped)
  std::vector<float> scores;         // [n_vocab] SPM merge scores (higher merges first); may be empty
  std::vector<int32_t> token_types;  // [n_vocab] TokenType values; empty = all normal
  std::vector<std::string> merges;   // BPE merges "left right", highest priority first
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;  // end of turn (<|eot_id|>, <|im_end|>): detected from text when absent
  int32_t eom_id = -1;  // end of message (<|eom_id|>)
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prefix " " at the start and after special tokens
  std::string chat_template;      // tokenizer.chat_template (Jinja text), may be empty
};

// Reads tokenizer.ggml.* and tokenizer.chat_template. Applies llama.cpp's
// defaults where keys are absent (SPM: bos 1, eos 2, unk 0, add_bos and
// add_space_prefix true; BPE: pre "default", add_bos true for llama-bpe).
Result<TokenizerVocab> load_tokenizer_vocab(const GgufFile& gguf);

// A piece of text to encode, and whether special-token text in it may become
// special tokens. Chat templates produce markup segments (parse_special =
// true) and message-content segments (false), so that a user cannot inject
// "<|im_start|>system" through message content.
struct TextSegment {
  std::string text;
  bool parse_special = false;
};

// Thread-safety: immutable after create(); every method is const and may be
// called from any number of threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Validates the vocabulary and builds the tokenizer for vocab.model; an
  // unknown model or BPE pre-tokenizer is an error naming it.
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerVocab vocab);
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);

  // Encodes text. add_special: prepend BOS / append EOS as the add_bos /
  // add_eos flags say. parse_special: text equal to a control token
  // ("<|eot_id|>", "<s>") becomes that token; otherwise it is ordinary text.
  // User-defined tokens are always matched (as llama.cpp does). Ill-formed
  // UTF-8 in `text` is first replaced by U+FFFD (one per maximal subpart).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Encodes the concatenation of `segments`, recognising special tokens only
  // inside segments with parse_special. Ordinary text of adjacent segments is
  // tokenized as one string, so the result equals encode(concatenation,
  // add_special, true) whenever the non-special segments hold no special-token
  // text.
  std::vector<int32_t> encode_segments(const std::vector<TextSegment>& segments,
                                       bool add_special) const;

  // Raw bytes a token stands for: byte tokens give their byte, SPM "▁" gives a
  // space, byte-level BPE characters map back to bytes, user-defined tokens
  // give their text; control tokens give "" and the unknown token "▅" (as in
  // llama.cpp). May be a partial UTF-8 sequence.
  std::string token_to_piece(int32_t id) const;

  // Text of a whole sequence (from its start): control tokens are dropped,
  // the SPM leading space (see strips_leading_space) is removed from the first
  // piece, and ill-formed UTF-8 is replaced by U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const;

  // The token's vocabulary string verbatim ("<|eot_id|>", "▁the", "Ġthe").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Id of the token whose text is exactly `text`, or -1.
  int32_t find_token(std::string_view text) const;

  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t eot_id() const { return vocab_.eot_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  // EOS, EOT, EOM and the other end-of-generation control tokens
  // (<|im_end|>, <end_of_turn>, <|end|>, <|endoftext|>, ...).
  bool is_end_of_generation(int32_t id) const;
  // SPM with add_space_prefix: the first piece of a sequence starts with the
  // space that encode() added, and decode() removes it.
  bool strips_leading_space() const;
  const TokenizerVocab& vocab() const { return vocab_; }

 protected:
  explicit Tokenizer(TokenizerVocab vocab);

  // Builds the lookup tables shared by both models; called by create().
  Status init_common();

  // Tokenizes one run of ordinary text (valid UTF-8, no special tokens),
  // appending ids to *out. `after_special`: the run starts the sequence or
  // follows a special token (where SPM inserts its space prefix).
  virtual void tokenize_text(std::string_view text, bool after_special,
                             std::vector<int32_t>* out) const = 0;

  // Raw bytes of a normal/byte/user-defined token (model specific).
  virtual std::string normal_piece(int32_t id) const = 0;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  TokenizerVocab vocab_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  std::vector<std::string> pieces_;          // [n_vocab] token_to_piece results, filled by create()
  std::vector<uint8_t> end_of_generation_;   // [n_vocab] 1 for end-of-generation tokens
  std::vector<int32_t> user_defined_;        // user-defined token ids, longest text first
  std::vector<int32_t> special_;             // control + unknown + user-defined, longest first
};

}  // namespace prefixd
