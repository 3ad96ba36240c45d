// Byte-level BPE tokenizer: PCRE2 pre-tokenizer, GPT-2 byte mapping, ranked
// merges (the algorithm of llama.cpp's llm_tokenizer_bpe_session).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/tokenizer_bpe.h"

#include <pcre2.h>

#include <queue>

#include "engine/text/stream_decoder.h"

namespace prefixd {
namespace {

// Pre-tokenizer patterns, from the models' tokenizer.json files as adapted by
// llama.cpp (the case-insensitive group spelled out).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// qwen35 (Qwen3.5): qwen2's with combining marks (\p{M}) kept inside words.
constexpr const char* kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer {
  std::vector<const char*> patterns;
  bool ignore_merges = false;
};

bool pre_tokenizer_for(const std::string& pre, PreTokenizer* out) {
  if (pre == "default") {
    *out = {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", R"([0-9][0-9][0-9])"}, false};
  } else if (pre == "gpt-2" || pre == "gpt2") {
    *out = {{kGpt2}, false};
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "lfm2") {  // lfm2: as llama.cpp
    *out = {{kLlama3}, true};
  } else if (pre == "qwen2") {
    *out = {{kQwen2}, false};
  } else if (pre == "qwen35") {
    *out = {{kQwen35}, false};
  } else if (pre == "smollm") {
    *out = {{R"(\p{N})", kGpt2}, false};
  } else {
    return false;
  }
  return true;
}

struct Symbol {
  int32_t prev;
  int32_t next;
  int32_t token;  // -1 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  int32_t left_token;   // tokens at push time, to detect stale entries
  int32_t right_token;
};

struct BigramOrder {
  // Lowest rank first, then leftmost.
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes one code point of well-formed UTF-8 at text[*pos], advancing *pos.
uint32_t next_code_point(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<uint8_t>(text[*pos]);
  const size_t len = std::min(text.size() - *pos, utf8::sequence_length(b0));
  uint32_t cp = len == 1 ? b0 : (b0 & (0x7F >> len));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[*pos + k]) & 0x3F);
  *pos += len;
  return cp;
}

std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cps{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? b : 256 + n++;
  }
  return cps;
}

}  // namespace

const std::array<std::string, 256>& BpeTokenizer::byte_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    const std::array<uint32_t, 256> cps = byte_code_points();
    for (int b = 0; b < 256; ++b) append_utf8(cps[b], &c[b]);
    return c;
  }();
  return chars;
}

BpeTokenizer::~BpeTokenizer() {
  for (void* re : regexes_) pcre2_code_free(static_cast<pcre2_code*>(re));
}

namespace {

// The pre-tokenizer's patterns, compiled (JIT where available) and appended
// to *regexes in order; the caller owns them (pcre2_code_free), also those
// appended before an error.
Status compile_patterns(const PreTokenizer& pre, std::vector<void*>* regexes) {
  for (const char* pattern : pre.patterns) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (re == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return Status::error(std::string("tokenizer: cannot compile pre-tokenizer pattern: ") +
                           reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
    regexes->push_back(re);
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> BpeTokenizer::create(TokenizerVocab vocab) {
  PreTokenizer pre;
  if (!pre_tokenizer_for(vocab.pre, &pre)) {
    return Status::error("tokenizer: unsupported BPE pre-tokenizer tokenizer.ggml.pre = '" +
                         vocab.pre + "' (supported: default, gpt-2, llama-bpe, lfm2, qwen2, smollm)");
  }
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(vocab)));
  tok->ignore_merges_ = pre.ignore_merges;
  if (Status s = compile_patterns(pre, &tok->regexes_); !s.ok()) return s;

  const std::array<uint32_t, 256> cps = byte_code_points();
  for (int b = 0; b < 256; ++b) tok->char_to_byte_[cps[b]] = static_cast<uint8_t>(b);

  Status s = tok->init_common();
  if (!s.ok()) return s;

  for (int b = 0; b < 256; ++b) {
    int32_t id = tok->find_token(byte_chars()[b]);
    if (id < 0) id = tok->vocab_.unk_id;
    if (id < 0) {
      return Status::error("tokenizer: BPE vocabulary lacks the token for byte " +
                           std::to_string(b) + " and has no unknown token");
    }
    tok->byte_token_[b] = id;
  }

  // Merges "left right" (split at the first space after the first character,
  // as llama.cpp does), keyed by the two token ids.
  const auto& merges = tok->vocab_.merges;
  tok->merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      return Status::error("tokenizer: malformed BPE merge #" + std::to_string(rank) + " '" + m +
                           "'");
    }
    const std::string_view left(m.data(), sp);
    const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t l = tok->find_token(left), r = tok->find_token(right);
    std::string joined(left);
    joined += right;
    const int32_t result = tok->find_token(joined);
    if (l < 0 || r < 0 || result < 0) continue;  // cannot apply to token symbols
    tok->merges_.try_emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), result});
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

std::string BpeTokenizer::normal_piece(int32_t id) const {
  const std::string& text = vocab_.tokens[id];
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cp = next_code_point(text, &pos);
    auto it = char_to_byte_.find(cp);
    if (it != char_to_byte_.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(text, start, pos - start);  // not a byte character: keep as is
    }
  }
  return out;
}

void BpeTokenizer::split_words(std::string_view text,
                               std::vector<std::pair<size_t, size_t>>* words) const {
  std::vector<std::pair<size_t, size_t>> pieces = {{0, text.size()}};
  std::vector<std::pair<size_t, size_t>> next;
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  for (void* re_ptr : regexes_) {
    auto* re = static_cast<pcre2_code*>(re_ptr);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    next.clear();
    for (const auto& [begin, end] : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
      const size_t len = end - begin;
      size_t offset = 0;
      size_t gap_start = 0;
      while (offset < len) {
        const int rc = pcre2_match(re, subject, len, offset, PCRE2_NO_UTF_CHECK, md, mctx);
        if (rc < 0) break;  // no further match (or a resource limit): the rest is a gap
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t m_begin = ov[0], m_end = ov[1];
        if (m_begin > gap_start) next.emplace_back(begin + gap_start, begin + m_begin);
        if (m_end > m_begin) {
          next.emplace_back(begin + m_begin, begin + m_end);
          offset = m_end;
        } else {
          // Empty match: step over one character.
          offset = m_end + utf8::sequence_length(static_cast<uint8_t>(text[begin + m_end]));
          if (offset > len) offset = len;
          next.emplace_back(begin + m_end, begin + offset);
        }
        gap_start = offset;
      }
      if (gap_start < len) next.emplace_back(begin + gap_start, end);
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  pcre2_jit_stack_free(jit_stack);
  pcre2_match_context_free(mctx);
  words->insert(words->end(), pieces.begin(), pieces.end());
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (char c : word) mapped += byte_chars()[static_cast<uint8_t>(c)];
    const int32_t id = find_token(mapped);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const int32_t n = static_cast<int32_t>(word.size());
  if (n == 1) {
    out->push_back(byte_token_[static_cast<uint8_t>(word[0])]);
    return;
  }
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {i - 1, i + 1 < n ? i + 1 : -1, byte_token_[static_cast<uint8_t>(word[i])]};
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].token, symbols[right].token));
    if (it == merges_.end()) return;
    queue.push({left, right, it->second.rank, symbols[left].token, symbols[right].token});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    if (left.token != b.left_token || left.next != b.right) continue;  // stale
    Symbol& right = symbols[b.right];
    if (right.token != b.right_token) continue;
    left.token = merges_.find(pair_key(b.left_token, b.right_token))->second.result;
    right.token = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int32_t i = 0; i != -1; i = symbols[i].next) out->push_back(symbols[i].token);
}

void BpeTokenizer::tokenize_text(std::string_view text, bool /*after_special*/,
                                 std::vector<int32_t>* out) const {
  std::vector<std::pair<size_t, size_t>> words;
  split_words(text, &words);
  // Words repeat a lot in real text: remember the BPE result of each.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;  // word -> range in *out
  for (const auto& [begin, end] : words) {
    const std::string_view word = text.substr(begin, end - begin);
    auto it = cache.find(word);
    if (it != cache.end()) {
      const auto [from, count] = it->second;
      for (size_t k = 0; k < count; ++k) {
        const int32_t id = (*out)[from + k];
        out->push_back(id);
      }
      continue;
    }
    const size_t from = out->size();
    encode_word(word, out);
    cache.emplace(word, std::make_pair(from, out->size() - from));
  }
}

}  // namespace prefixd
