// SPM tokenizer: score-ordered bigram merges over UTF-8 characters with byte
// fallback (the algorithm of llama.cpp's llm_tokenizer_spm_session).
#include "engine/text/tokenizer_spm.h"

#include <cstdio>
#include <queue>
#include <unordered_map>

#include "engine/text/stream_decoder.h"

namespace prefixd {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁ U+2581

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t begin;  // byte offset in the escaped text
  size_t n;      // byte length; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  size_t size;  // bytes of the merged text (detects stale entries)
};

struct BigramOrder {
  // Highest score first, then leftmost.
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

// A character's UTF-8 bytes packed into an integer (its identity for pairs).
uint32_t pack_char(std::string_view text, size_t pos, size_t len) {
  uint32_t v = 0;
  for (size_t k = 0; k < len; ++k) v = (v << 8) | static_cast<uint8_t>(text[pos + k]);
  return v;
}

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> SpmTokenizer::create(TokenizerVocab vocab) {
  std::unique_ptr<SpmTokenizer> tok(new SpmTokenizer(std::move(vocab)));
  // normal_piece() needs nothing but the vocabulary, so the common tables can
  // be built first.
  Status s = tok->init_common();
  if (!s.ok()) return s;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = tok->find_token(name);
    if (id < 0) id = tok->find_token(std::string(1, static_cast<char>(b)));
    if (id < 0) id = tok->vocab_.unk_id;
    if (id < 0) {
      return Status::error(std::string("tokenizer: SPM vocabulary has neither the byte token ") +
                           name + " nor an unknown token");
    }
    tok->byte_token_[b] = id;
  }
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    const std::string& t = tok->vocab_.tokens[id];
    if (tok->mergeable_token(t) != id) continue;
    uint32_t prev = 0;
    bool have_prev = false;
    for (size_t pos = 0; pos < t.size();) {
      const size_t len =
          std::min(t.size() - pos, utf8::sequence_length(static_cast<uint8_t>(t[pos])));
      const uint32_t c = pack_char(t, pos, len);
      if (have_prev) tok->inner_pairs_.insert(pair_key(prev, c));
      prev = c;
      have_prev = true;
      pos += len;
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

std::string SpmTokenizer::normal_piece(int32_t id) const {
  const std::string& text = vocab_.tokens[id];
  if (token_type(id) == TokenType::kByte && text.size() == 6 && text.compare(0, 3, "<0x") == 0 &&
      text[5] == '>') {
    const int hi = hex_value(text[3]), lo = hex_value(text[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t hit = text.find(kSpace, pos);
    if (hit == std::string::npos) {
      out.append(text, pos, std::string::npos);
      break;
    }
    out.append(text, pos, hit - pos);
    out.push_back(' ');
    pos = hit + kSpace.size();
  }
  return out;
}

int32_t SpmTokenizer::mergeable_token(std::string_view text) const {
  const int32_t id = find_token(text);
  if (id < 0) return -1;
  const TokenType t = token_type(id);
  if (t == TokenType::kControl || t == TokenType::kUnknown) return -1;
  return id;
}

void SpmTokenizer::tokenize_text(std::string_view raw, bool after_special,
                                 std::vector<int32_t>* out) const {
  // Escape whitespace: " " -> "▁", with the optional prefix.
  std::string text;
  text.reserve(raw.size() * 2 + 3);
  if (vocab_.add_space_prefix && after_special) text += kSpace;
  for (char c : raw) {
    if (c == ' ') {
      text += kSpace;
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  // Cut at character boundaries no merge can cross; repeated chunks (words)
  // reuse their first result.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;  // chunk -> range in *out
  auto emit = [&](std::string_view chunk) {
    auto it = cache.find(chunk);
    if (it != cache.end()) {
      for (size_t k = 0; k < it->second.second; ++k) {
        const int32_t id = (*out)[it->second.first + k];
        out->push_back(id);
      }
      return;
    }
    const size_t from = out->size();
    tokenize_chunk(chunk, out);
    cache.emplace(chunk, std::make_pair(from, out->size() - from));
  };
  size_t chunk_begin = 0;
  uint32_t prev = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len =
        std::min(text.size() - pos, utf8::sequence_length(static_cast<uint8_t>(text[pos])));
    const uint32_t c = pack_char(text, pos, len);
    if (pos > 0 && inner_pairs_.count(pair_key(prev, c)) == 0) {
      emit(std::string_view(text).substr(chunk_begin, pos - chunk_begin));
      chunk_begin = pos;
    }
    prev = c;
    pos += len;
  }
  emit(std::string_view(text).substr(chunk_begin));
}

void SpmTokenizer::tokenize_chunk(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(text.size() - off,
                                utf8::sequence_length(static_cast<uint8_t>(text[off])));
    const int32_t idx = static_cast<int32_t>(symbols.size());
    symbols.push_back({idx - 1, -1, off, len});
    if (idx > 0) symbols[idx - 1].next = idx;
    off += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view merged(text.data() + symbols[left].begin,
                                  symbols[left].n + symbols[right].n);
    const int32_t id = mergeable_token(merged);
    if (id < 0) return;
    const float score = vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
    queue.push({left, right, score, merged.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece(text.data() + s.begin, s.n);
    const int32_t id = mergeable_token(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Only single characters can be missing (every merge forms a token).
    for (char c : piece) out->push_back(byte_token_[static_cast<uint8_t>(c)]);
  }
}

}  // namespace prefixd
