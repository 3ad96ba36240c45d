// Streaming-safe detokenization: turns generated token ids into text chunks
// that are always valid UTF-8, holding back the bytes of a character whose
// remaining bytes have not been generated yet. Also the UTF-8 helpers the
// tokenizers use to sanitise their input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixd {

class Tokenizer;

namespace utf8 {

// Length in bytes of the UTF-8 sequence a lead byte announces (1 for ASCII,
// continuation bytes and invalid lead bytes, 2..4 otherwise).
size_t sequence_length(uint8_t lead_byte);

// True when `bytes` is entirely well-formed UTF-8 (no surrogates, no overlong
// forms, nothing above U+10FFFF).
bool is_valid(std::string_view bytes);

// Appends `bytes` to `out` with every ill-formed part replaced by U+FFFD, one
// replacement per maximal subpart (the Unicode / WHATWG "best practice" rule,
// the one JavaScript's TextDecoder uses). Valid input is copied unchanged.
void append_sanitized(std::string_view bytes, std::string* out);
std::string sanitize(std::string_view bytes);

// Number of bytes at the end of `bytes` that form a truncated but so far
// well-formed sequence (0..3): the bytes a streaming decoder must hold back.
size_t incomplete_tail_bytes(std::string_view bytes);

}  // namespace utf8

// Turns a stream of token ids into valid UTF-8 text chunks.
//
// push(id) returns the text that became complete with this token (possibly
// empty). Bytes of a character split across tokens (byte-fallback tokens,
// byte-level BPE pieces) are held back until the character completes; bytes
// that can never form a character are emitted as U+FFFD. Control tokens (BOS,
// EOS, <|eot_id|>, ...) produce no text. flush() returns whatever is held back
// (as U+FFFD) at the end of the stream and resets the decoder.
//
// The concatenation of every push() and the final flush() equals
// tokenizer.decode(ids) when `strip_leading_space` is true and the ids start
// the sequence; with the default (false) the SPM leading space is kept, which is
// what a continuation of a prompt needs ("▁there" after "Once upon a time"
// must print " there").
//
// Thread-safety: one instance per stream; the Tokenizer must outlive it and is
// only read.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space = false);

  std::string push(int32_t id);
  std::string flush();

  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool strip_leading_space_;  // only until the first text-producing token
  std::string pending_;       // held-back bytes of an incomplete character
};

}  // namespace prefixd
