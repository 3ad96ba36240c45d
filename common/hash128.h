// Hash128: the one type for 128-bit hashes (XXH3-128) everywhere in prefixd:
// block chain hashes, model fingerprints, record fields and tier keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace prefixd {

// lo = low 64 bits (XXH128_hash_t::low64), hi = high 64 bits (high64).
struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;

  // 32 lowercase hex digits, hi first (XXH128's canonical big-endian form).
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                  static_cast<unsigned long long>(lo));
    return buf;
  }
};

// Hash functor for unordered containers keyed by Hash128 (the bits are
// already uniform: no further mixing needed).
struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 7)); }
};

}  // namespace prefixd
