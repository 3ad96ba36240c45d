// Tokenizer factory, GGUF metadata loading, special-token partitioning and
// the parts of encode/decode both models share.
#include "engine/text/tokenizer.h"

#include <algorithm>

#include "engine/text/stream_decoder.h"
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_spm.h"

namespace prefixd {
namespace {

// Reads an optional token id; absent keeps `fallback`, an id outside the
// vocabulary (e.g. 0xFFFFFFFF, "none") gives -1.
Status read_token_id(const GgufFile& gguf, std::string_view key, int64_t n_vocab,
                     int32_t* id) {
  if (gguf.find(key) == nullptr) return Status::ok_status();
  Result<uint64_t> v = gguf.get_uint(key);
  if (!v.ok()) {
    // A negative signed id means "none".
    const GgufValue* raw = gguf.find(key);
    if (raw->type == GgufType::INT32 || raw->type == GgufType::INT64 ||
        raw->type == GgufType::INT8 || raw->type == GgufType::INT16) {
      *id = -1;
      return Status::ok_status();
    }
    return v.status();
  }
  *id = *v < static_cast<uint64_t>(n_vocab) ? static_cast<int32_t>(*v) : -1;
  return Status::ok_status();
}

Status read_bool(const GgufFile& gguf, std::string_view key, bool* value) {
  if (gguf.find(key) == nullptr) return Status::ok_status();
  Result<bool> v = gguf.get_bool(key);
  if (!v.ok()) return v.status();
  *value = *v;
  return Status::ok_status();
}

// Control tokens that end generation besides EOS/EOT/EOM (llama.cpp's list).
constexpr const char* kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>",
    "<|endoftext|>", "<EOT>",   "_<EOT>",     "<|end_of_text|>",
};
// Texts that identify the end-of-turn token when tokenizer.ggml.eot_token_id is absent.
constexpr const char* kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
};

// The tokenizer model's name, its tokens, and the optional scores, token
// types, merges and pre-tokenizer name.
Status read_vocab_arrays(const GgufFile& gguf, TokenizerVocab* out) {
  TokenizerVocab& v = *out;
  Result<std::string> model = gguf.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  v.model = *model;
  Result<std::vector<std::string>> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  v.tokens = std::move(tokens).value();
  if (gguf.find("tokenizer.ggml.scores") != nullptr) {
    Result<std::vector<float>> scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    v.scores = std::move(scores).value();
  }
  if (gguf.find("tokenizer.ggml.token_type") != nullptr) {
    Result<std::vector<int64_t>> types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    v.token_types.assign(types->begin(), types->end());
  }
  if (gguf.find("tokenizer.ggml.merges") != nullptr) {
    Result<std::vector<std::string>> merges = gguf.get_string_array("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status();
    v.merges = std::move(merges).value();
  }
  if (gguf.find("tokenizer.ggml.pre") != nullptr) {
    Result<std::string> pre = gguf.get_string("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    v.pre = *pre;
  }
  return Status::ok_status();
}

// BOS, EOS, EOT, EOM, padding and unknown ids (llama.cpp's defaults per
// model, then the file's keys), and the add_bos / add_eos / space prefix flags.
Status read_special_tokens(const GgufFile& gguf, int64_t n_vocab, TokenizerVocab* out) {
  TokenizerVocab& v = *out;
  // Defaults as in llama.cpp's vocabulary loader.
  if (v.model == "llama") {
    v.bos_id = 1;
    v.eos_id = 2;
    v.unk_id = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (v.model == "gpt2") {
    if (v.pre.empty()) v.pre = "default";
    v.add_bos = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "lfm2";
  }
  if (n_vocab <= v.bos_id) v.bos_id = -1;
  if (n_vocab <= v.eos_id) v.eos_id = -1;
  if (n_vocab <= v.unk_id) v.unk_id = -1;

  struct IdKey {
    const char* key;
    int32_t* id;
  };
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos_id},     {"tokenizer.ggml.eos_token_id", &v.eos_id},
      {"tokenizer.ggml.eot_token_id", &v.eot_id},     {"tokenizer.ggml.eom_token_id", &v.eom_id},
      {"tokenizer.ggml.padding_token_id", &v.pad_id}, {"tokenizer.ggml.unknown_token_id", &v.unk_id},
  };
  for (const IdKey& k : id_keys) {
    Status s = read_token_id(gguf, k.key, n_vocab, k.id);
    if (!s.ok()) return s;
  }
  for (auto [key, flag] : {std::pair{"tokenizer.ggml.add_bos_token", &v.add_bos},
                           std::pair{"tokenizer.ggml.add_eos_token", &v.add_eos},
                           std::pair{"tokenizer.ggml.add_space_prefix", &v.add_space_prefix}}) {
    Status s = read_bool(gguf, key, flag);
    if (!s.ok()) return s;
  }
  return Status::ok_status();
}

}  // namespace

Result<TokenizerVocab> load_tokenizer_vocab(const GgufFile& gguf) {
  TokenizerVocab v;
  if (Status s = read_vocab_arrays(gguf, &v); !s.ok()) return s;
  const int64_t n_vocab = static_cast<int64_t>(v.tokens.size());
  if (Status s = read_special_tokens(gguf, n_vocab, &v); !s.ok()) return s;
  if (gguf.find("tokenizer.chat_template") != nullptr) {
    Result<std::string> tmpl = gguf.get_string("tokenizer.chat_template");
    if (!tmpl.ok()) return tmpl.status();
    v.chat_template = *tmpl;
  }
  return v;
}

Tokenizer::Tokenizer(TokenizerVocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(TokenizerVocab vocab) {
  if (vocab.tokens.empty()) return Status::error("tokenizer: the vocabulary is empty");
  const size_t n = vocab.tokens.size();
  if (n > static_cast<size_t>(INT32_MAX)) return Status::error("tokenizer: vocabulary too large");
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return Status::error("tokenizer: tokenizer.ggml.scores has " +
                         std::to_string(vocab.scores.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return Status::error("tokenizer: tokenizer.ggml.token_type has " +
                         std::to_string(vocab.token_types.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }
  for (int32_t* id : {&vocab.bos_id, &vocab.eos_id, &vocab.eot_id, &vocab.eom_id, &vocab.pad_id,
                      &vocab.unk_id}) {
    if (*id < -1 || *id >= static_cast<int64_t>(n)) {
      return Status::error("tokenizer: special token id " + std::to_string(*id) +
                           " is outside the vocabulary of " + std::to_string(n));
    }
  }
  if (vocab.add_bos && vocab.bos_id < 0) {
    return Status::error("tokenizer: add_bos is set but the model has no BOS token");
  }
  if (vocab.add_eos && vocab.eos_id < 0) {
    return Status::error("tokenizer: add_eos is set but the model has no EOS token");
  }

  std::unique_ptr<Tokenizer> tok;
  if (vocab.model == "llama") {
    Result<std::unique_ptr<Tokenizer>> spm = SpmTokenizer::create(std::move(vocab));
    if (!spm.ok()) return spm.status();
    tok = std::move(spm).value();
  } else if (vocab.model == "gpt2") {
    Result<std::unique_ptr<Tokenizer>> bpe = BpeTokenizer::create(std::move(vocab));
    if (!bpe.ok()) return bpe.status();
    tok = std::move(bpe).value();
  } else {
    return Status::error("tokenizer: unsupported tokenizer.ggml.model '" + vocab.model +
                         "' (supported: llama, gpt2)");
  }
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  Result<TokenizerVocab> vocab = load_tokenizer_vocab(gguf);
  if (!vocab.ok()) return vocab.status();
  return create(std::move(vocab).value());
}

Status Tokenizer::init_common() {
  const int32_t n = n_vocab();
  token_to_id_.reserve(static_cast<size_t>(n) * 2);
  for (int32_t i = 0; i < n; ++i) token_to_id_[vocab_.tokens[i]] = i;  // last wins, as llama.cpp

  // The end-of-turn token, when the metadata does not name one.
  if (vocab_.eot_id < 0) {
    for (const char* text : kEndOfTurnTexts) {
      const int32_t id = find_token(text);
      if (id >= 0 && token_type(id) == TokenType::kControl) {
        vocab_.eot_id = id;
        break;
      }
    }
  }
  end_of_generation_.assign(n, 0);
  for (int32_t id : {vocab_.eos_id, vocab_.eot_id, vocab_.eom_id}) {
    if (id >= 0) end_of_generation_[id] = 1;
  }
  for (const char* text : kEndOfGenerationTexts) {
    const int32_t id = find_token(text);
    if (id >= 0 && (token_type(id) == TokenType::kControl ||
                    token_type(id) == TokenType::kUserDefined)) {
      end_of_generation_[id] = 1;
    }
  }

  for (int32_t i = 0; i < n; ++i) {
    if (vocab_.tokens[i].empty()) continue;
    const TokenType t = token_type(i);
    if (t == TokenType::kUserDefined) user_defined_.push_back(i);
    if (t == TokenType::kUserDefined || t == TokenType::kControl || t == TokenType::kUnknown) {
      special_.push_back(i);
    }
  }
  auto longest_first = [this](int32_t a, int32_t b) {
    const size_t la = vocab_.tokens[a].size(), lb = vocab_.tokens[b].size();
    return la != lb ? la > lb : a < b;
  };
  std::sort(user_defined_.begin(), user_defined_.end(), longest_first);
  std::sort(special_.begin(), special_.end(), longest_first);

  pieces_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    switch (token_type(i)) {
      case TokenType::kControl:
        break;  // renders as nothing
      case TokenType::kUnknown:
        pieces_[i] = "\xE2\x96\x85";  // ▅, as llama.cpp prints <unk>
        break;
      case TokenType::kUserDefined:
        pieces_[i] = vocab_.tokens[i];
        break;
      default:
        pieces_[i] = normal_piece(i);
        break;
    }
  }
  return Status::ok_status();
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return vocab_.tokens[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  if (vocab_.token_types.empty()) return TokenType::kNormal;
  return static_cast<TokenType>(vocab_.token_types[id]);
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < n_vocab() && end_of_generation_[id] != 0;
}

bool Tokenizer::strips_leading_space() const {
  return vocab_.model == "llama" && vocab_.add_space_prefix;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return pieces_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string raw;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    const std::string& piece = pieces_[id];
    if (piece.empty()) continue;
    if (first && strips_leading_space() && piece[0] == ' ') {
      raw.append(piece, 1, std::string::npos);
    } else {
      raw += piece;
    }
    first = false;
  }
  return utf8::is_valid(raw) ? raw : utf8::sanitize(raw);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<TextSegment> segments(1);
  segments[0].text.assign(text);
  segments[0].parse_special = parse_special;
  return encode_segments(segments, add_special);
}

namespace {

// A piece of the input after special-token partitioning: a token id, or a
// byte range [begin, end) of ordinary text in `text`.
struct Fragment {
  int32_t token = -1;  // -1: ordinary text
  size_t begin = 0;
  size_t end = 0;
};

// The segments' text, concatenated (invalid UTF-8 sanitised), as one
// ordinary-text fragment per non-empty segment; *parse_special[i] tells
// whether fragment i may hold special tokens.
std::string join_segments(const std::vector<TextSegment>& segments, std::vector<Fragment>* fragments,
                          std::vector<uint8_t>* parse_special) {
  std::string text;
  for (const TextSegment& seg : segments) {
    const size_t begin = text.size();
    if (utf8::is_valid(seg.text)) {
      text += seg.text;
    } else {
      utf8::append_sanitized(seg.text, &text);
    }
    if (text.size() > begin) {
      fragments->push_back({-1, begin, text.size()});
      parse_special->push_back(seg.parse_special ? 1 : 0);
    }
  }
  return text;
}

// Splits every ordinary-text fragment of *cur at each occurrence of `needle`
// (token `id`); *cur is replaced only when something was split.
void split_at_token(std::string_view text, int32_t id, const std::string& needle,
                    std::vector<Fragment>* cur) {
  std::vector<Fragment> next;
  bool split = false;
  for (const Fragment& frag : *cur) {
    if (frag.token >= 0) {
      next.push_back(frag);
      continue;
    }
    const std::string_view hay(text.data() + frag.begin, frag.end - frag.begin);
    size_t pos = hay.find(needle);
    if (pos == std::string_view::npos) {
      next.push_back(frag);
      continue;
    }
    split = true;
    size_t start = 0;
    while (pos != std::string_view::npos) {
      if (pos > start) next.push_back({-1, frag.begin + start, frag.begin + pos});
      next.push_back({id, 0, 0});
      start = pos + needle.size();
      pos = hay.find(needle, start);
    }
    if (start < hay.size()) next.push_back({-1, frag.begin + start, frag.end});
  }
  if (split) *cur = std::move(next);
}

}  // namespace

std::vector<int32_t> Tokenizer::encode_segments(const std::vector<TextSegment>& segments,
                                                bool add_special) const {
  // Concatenate the (sanitised) segments; remember which byte ranges may hold
  // special tokens.
  std::vector<Fragment> fragments;  // ordinary-text fragments still to partition, in order
  std::vector<uint8_t> fragment_parse_special;
  const std::string text = join_segments(segments, &fragments, &fragment_parse_special);

  // Partition: each special token, longest first, splits every ordinary-text
  // fragment it occurs in (llama.cpp's tokenizer_st_partition).
  std::vector<Fragment> parts;
  for (size_t f = 0; f < fragments.size(); ++f) {
    std::vector<Fragment> cur = {fragments[f]};
    const std::vector<int32_t>& candidates = fragment_parse_special[f] ? special_ : user_defined_;
    for (int32_t id : candidates) split_at_token(text, id, vocab_.tokens[id], &cur);
    parts.insert(parts.end(), cur.begin(), cur.end());
  }

  // Tokenize; adjacent ordinary-text parts (from different segments) are one run.
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);
  bool after_special = true;
  size_t i = 0;
  while (i < parts.size()) {
    if (parts[i].token >= 0) {
      out.push_back(parts[i].token);
      after_special = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < parts.size() && parts[j + 1].token < 0 && parts[j + 1].begin == parts[j].end) {
      ++j;
    }
    const std::string_view run(text.data() + parts[i].begin, parts[j].end - parts[i].begin);
    tokenize_text(run, after_special, &out);
    after_special = false;
    i = j + 1;
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

}  // namespace prefixd
