// UTF-8 validation/sanitising and the streaming detokenizer.
#include "engine/text/stream_decoder.h"

#include "engine/text/tokenizer.h"

namespace prefixd {
namespace utf8 {
namespace {

enum class SeqStatus { kValid, kInvalid, kTruncated };

// Examines the sequence starting at p[0] (n >= 1 bytes available). Sets
// *length to the sequence length when valid, to the maximal-subpart length
// (>= 1) when invalid, and to the bytes present when truncated.
SeqStatus examine(const uint8_t* p, size_t n, size_t* length) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *length = 1;
    return SeqStatus::kValid;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *length = 1;
    return SeqStatus::kInvalid;
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= n) {
      *length = n;
      return SeqStatus::kTruncated;
    }
    const uint8_t b = p[k];
    const uint8_t klo = k == 1 ? lo : 0x80;
    const uint8_t khi = k == 1 ? hi : 0xBF;
    if (b < klo || b > khi) {
      *length = k;
      return SeqStatus::kInvalid;
    }
  }
  *length = need;
  return SeqStatus::kValid;
}

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

size_t sequence_length(uint8_t lead_byte) {
  if (lead_byte < 0xC0) return 1;
  if (lead_byte < 0xE0) return 2;
  if (lead_byte < 0xF0) return 3;
  if (lead_byte < 0xF8) return 4;
  return 1;
}

bool is_valid(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (examine(p + i, n - i, &len) != SeqStatus::kValid) return false;
    i += len;
  }
  return true;
}

void append_sanitized(std::string_view bytes, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    const SeqStatus st = examine(p + i, n - i, &len);
    if (st == SeqStatus::kValid) {
      i += len;
      continue;
    }
    out->append(bytes.data() + run_start, i - run_start);
    out->append(kReplacement);
    i += len;
    run_start = i;
  }
  out->append(bytes.data() + run_start, n - run_start);
}

std::string sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_sanitized(bytes, &out);
  return out;
}

size_t incomplete_tail_bytes(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // A truncated sequence starts at most 3 bytes before the end.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = p[n - back];
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: look further back
    size_t len = 0;
    return examine(p + n - back, back, &len) == SeqStatus::kTruncated ? back : 0;
  }
  return 0;
}

}  // namespace utf8

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space)
    : tokenizer_(tokenizer), strip_leading_space_(strip_leading_space) {}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tokenizer_.token_to_piece(id);
  if (piece.empty()) return {};
  if (strip_leading_space_) {
    strip_leading_space_ = false;
    if (tokenizer_.strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t hold = utf8::incomplete_tail_bytes(pending_);
  std::string out;
  utf8::append_sanitized(std::string_view(pending_).substr(0, pending_.size() - hold), &out);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace prefixd
