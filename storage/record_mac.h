// RecordMac: a keyed MAC that a stored block record carries outside the tier
// that wrote it (the disk tier today), so that bytes written by anyone who
// does not hold the deployment secret are never served as KV. The record's own
// XXH3 checksums catch damage; they are unkeyed, so they cannot catch forgery.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace prefixd {

// Scheme (OpenSSL): mac_key = HMAC-SHA256(deployment secret, "prefixd record
// MAC v1"); per record a random 16-byte nonce, one_time_key =
// HMAC-SHA256(mac_key, nonce), tag = Poly1305(one_time_key, record bytes). The
// trailer stored after the record is nonce || tag. A fresh nonce per record
// keeps each Poly1305 key single-use (its requirement); Poly1305 runs at about
// 6 GB/s per core where HMAC-SHA256 or keyed BLAKE2b over the whole record
// would run at 0.7-1.5, and the onboard path reads every byte through it.
class RecordMac {
 public:
  static constexpr size_t kNonceBytes = 16;
  static constexpr size_t kTagBytes = 16;
  static constexpr size_t kTrailerBytes = kNonceBytes + kTagBytes;
  using Trailer = std::array<uint8_t, kTrailerBytes>;

  explicit RecordMac(const std::array<uint8_t, 16>& deployment_secret);
  ~RecordMac();
  RecordMac(const RecordMac&) = delete;
  RecordMac& operator=(const RecordMac&) = delete;

  // A trailer for `record` (fresh random nonce). Thread-safe.
  Trailer sign(std::span<const uint8_t> record) const;
  // Whether `trailer` authenticates `record` under this key (constant-time
  // tag comparison). Thread-safe.
  bool verify(std::span<const uint8_t> record, std::span<const uint8_t, kTrailerBytes> trailer) const;

 private:
  std::array<uint8_t, 32> mac_key_{};
};

}  // namespace prefixd
