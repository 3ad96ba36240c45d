// RecordMac with libsodium: keyed BLAKE2b for key derivation, Poly1305 for
// the tag (see record_mac.h for the scheme).
#include "storage/record_mac.h"

#include <sodium.h>

#include <cstring>

#include "common/result.h"

namespace prefixd {
namespace {

constexpr char kMacKeyContext[] = "prefixd record MAC v1";

// The Poly1305 key for one nonce.
std::array<uint8_t, crypto_onetimeauth_KEYBYTES> one_time_key(const std::array<uint8_t, 32>& mac_key,
                                                              const uint8_t* nonce) {
  std::array<uint8_t, crypto_onetimeauth_KEYBYTES> key;
  crypto_generichash(key.data(), key.size(), nonce, RecordMac::kNonceBytes, mac_key.data(),
                     mac_key.size());
  return key;
}

}  // namespace

static_assert(RecordMac::kTagBytes == crypto_onetimeauth_BYTES);

RecordMac::RecordMac(const std::array<uint8_t, 16>& deployment_secret) {
  PREFIXD_CHECK(sodium_init() >= 0, "libsodium failed to initialize");
  static_assert(sizeof(deployment_secret) >= crypto_generichash_KEYBYTES_MIN);
  crypto_generichash(mac_key_.data(), mac_key_.size(),
                     reinterpret_cast<const uint8_t*>(kMacKeyContext), sizeof(kMacKeyContext) - 1,
                     deployment_secret.data(), deployment_secret.size());
}

RecordMac::~RecordMac() { sodium_memzero(mac_key_.data(), mac_key_.size()); }

RecordMac::Trailer RecordMac::sign(std::span<const uint8_t> record) const {
  Trailer trailer;
  randombytes_buf(trailer.data(), kNonceBytes);
  auto key = one_time_key(mac_key_, trailer.data());
  crypto_onetimeauth(trailer.data() + kNonceBytes, record.data(), record.size(), key.data());
  sodium_memzero(key.data(), key.size());
  return trailer;
}

bool RecordMac::verify(std::span<const uint8_t> record,
                       std::span<const uint8_t, kTrailerBytes> trailer) const {
  auto key = one_time_key(mac_key_, trailer.data());
  const bool ok = crypto_onetimeauth_verify(trailer.data() + kNonceBytes, record.data(),
                                            record.size(), key.data()) == 0;
  sodium_memzero(key.data(), key.size());
  return ok;
}

}  // namespace prefixd
