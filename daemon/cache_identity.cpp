// The cache identity: model fingerprint plus backend numerics (cache_identity.h).
#include "daemon/cache_identity.h"

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace prefixd {

std::string backend_numerics(std::string_view backend_name, std::string_view cpu_plan) {
  if (backend_name == "cpu") return "cpu:" + std::string(cpu_plan);
  return std::string(backend_name);
}

Hash128 cache_fingerprint(const Hash128& model_fingerprint, std::string_view numerics) {
  static constexpr std::string_view kTag = "prefixd-cache-identity-v1";
  std::vector<uint8_t> bytes(kTag.begin(), kTag.end());
  for (uint64_t word : {model_fingerprint.lo, model_fingerprint.hi}) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(word >> (8 * i)));
  }
  bytes.insert(bytes.end(), numerics.begin(), numerics.end());
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Hash128{h.low64, h.high64};
}

}  // namespace prefixd
