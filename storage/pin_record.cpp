// PinRecord's byte format:
//   "PXPN" | u16 version (1) | model fingerprint (lo, hi: u64 each) |
//   namespace seed u64 | salt (u32 length, bytes) | tenant (u32 length, bytes) |
//   ttl_ms i64 | ttl_class i32 | expires_unix_ms i64 |
//   u32 n_tokens | i32 tokens[n] | u32 n_blocks | (lo, hi)[n_blocks] |
//   u64 XXH3-64 of every byte before it.
#include "storage/pin_record.h"

#include <xxhash.h>

#include <cstring>

namespace prefixd {
namespace {

constexpr char kMagic[4] = {'P', 'X', 'P', 'N'};
constexpr uint16_t kVersion = 1;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (static_assert in block_record.cpp)
  out.insert(out.end(), b, b + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// Reads fields in order; the first failure sticks and names the field.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T get(const char* field) {
    T v{};
    if (!take(sizeof(T), field)) return v;
    std::memcpy(&v, bytes_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }
  std::string get_string(const char* field) {
    const uint32_t n = get<uint32_t>(field);
    if (!error_.empty()) return {};
    if (n > kPinRecordMaxStringBytes) {
      fail(std::string(field) + " length " + std::to_string(n) + " over " + std::to_string(kPinRecordMaxStringBytes));
      return {};
    }
    if (!take(n, field)) return {};
    return std::string(reinterpret_cast<const char*>(bytes_.data() + pos_ - n), n);
  }
  uint32_t get_count(const char* field, size_t max) {
    const uint32_t n = get<uint32_t>(field);
    if (error_.empty() && n > max) fail(std::string(field) + " " + std::to_string(n) + " over " + std::to_string(max));
    return error_.empty() ? n : 0;
  }
  void fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }
  size_t pos() const { return pos_; }
  const std::string& error() const { return error_; }

 private:
  bool take(size_t n, const char* field) {
    if (!error_.empty()) return false;
    if (bytes_.size() - pos_ < n) {
      fail(std::string("truncated at ") + field + " (offset " + std::to_string(pos_) + " of " +
           std::to_string(bytes_.size()) + " bytes)");
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  std::string error_;
};

void put_be64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

std::vector<uint8_t> encode_pin_record(const PinRecord& pin) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  put<uint16_t>(out, kVersion);
  put<uint64_t>(out, pin.model_fingerprint.lo);
  put<uint64_t>(out, pin.model_fingerprint.hi);
  put<uint64_t>(out, pin.namespace_seed);
  put_string(out, pin.cache_salt);
  put_string(out, pin.tenant);
  put<int64_t>(out, pin.ttl_ms);
  put<int32_t>(out, pin.ttl_class);
  put<int64_t>(out, pin.expires_unix_ms);
  put<uint32_t>(out, static_cast<uint32_t>(pin.tokens.size()));
  for (int32_t t : pin.tokens) put<int32_t>(out, t);
  put<uint32_t>(out, static_cast<uint32_t>(pin.block_hashes.size()));
  for (const Hash128& h : pin.block_hashes) {
    put<uint64_t>(out, h.lo);
    put<uint64_t>(out, h.hi);
  }
  put<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<PinRecord> decode_pin_record(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4 + 2 + 8 || std::memcmp(bytes.data(), kMagic, 4) != 0)
    return Status::error("pin record: not a pin record (magic or size, " + std::to_string(bytes.size()) + " bytes)");
  const size_t body = bytes.size() - 8;
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body, 8);
  if (XXH3_64bits(bytes.data(), body) != stored) return Status::error("pin record: checksum mismatch (damaged)");
  Reader r(bytes.subspan(0, body));
  PinRecord p;
  (void)r.get<uint32_t>("magic");
  const uint16_t version = r.get<uint16_t>("version");
  if (r.error().empty() && version != kVersion)
    return Status::error("pin record: version " + std::to_string(version) + " (this build reads " +
                         std::to_string(kVersion) + ")");
  p.model_fingerprint.lo = r.get<uint64_t>("model fingerprint");
  p.model_fingerprint.hi = r.get<uint64_t>("model fingerprint");
  p.namespace_seed = r.get<uint64_t>("namespace seed");
  p.cache_salt = r.get_string("cache salt");
  p.tenant = r.get_string("tenant");
  p.ttl_ms = r.get<int64_t>("ttl");
  p.ttl_class = r.get<int32_t>("ttl class");
  p.expires_unix_ms = r.get<int64_t>("expiry");
  const uint32_t n_tokens = r.get_count("token count", kPinRecordMaxTokens);
  p.tokens.reserve(n_tokens);
  for (uint32_t i = 0; i < n_tokens && r.error().empty(); ++i) p.tokens.push_back(r.get<int32_t>("tokens"));
  const uint32_t n_blocks = r.get_count("block count", kPinRecordMaxTokens);
  p.block_hashes.reserve(n_blocks);
  for (uint32_t i = 0; i < n_blocks && r.error().empty(); ++i) {
    Hash128 h;
    h.lo = r.get<uint64_t>("block hashes");
    h.hi = r.get<uint64_t>("block hashes");
    p.block_hashes.push_back(h);
  }
  if (r.error().empty() && r.pos() != body)
    r.fail(std::to_string(body - r.pos()) + " bytes after the last field");
  if (r.error().empty() && (p.block_hashes.empty() || p.tokens.size() % p.block_hashes.size() != 0))
    r.fail(std::to_string(p.tokens.size()) + " tokens for " + std::to_string(p.block_hashes.size()) + " blocks");
  if (r.error().empty() && p.ttl_ms <= 0) r.fail("ttl " + std::to_string(p.ttl_ms) + " ms");
  if (!r.error().empty()) return Status::error("pin record: " + r.error());
  return p;
}

std::vector<uint8_t> pin_record_key(uint64_t namespace_seed, const Hash128& last_block_hash) {
  std::vector<uint8_t> key;
  key.reserve(24);
  put_be64(key, namespace_seed);
  put_be64(key, last_block_hash.hi);
  put_be64(key, last_block_hash.lo);
  return key;
}

}  // namespace prefixd
