// PinRecord: a TTL pin as the disk tier stores it, so a pin outlives a
// restart: which prefix (tokens, cache salt, chain keys), for whom (tenant),
// for how long (TTL, wall-clock expiry) and for which model. Encoded as
// little-endian fields behind a magic and a version, closed by an XXH3-64 of
// everything before it; decode refuses a damaged or truncated record,
// naming what is wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/hash128.h"
#include "common/result.h"

namespace prefixd {

struct PinRecord {
  Hash128 model_fingerprint;
  uint64_t namespace_seed = 0;       // BlockKey::namespace_seed of every block
  std::string cache_salt;            // the engine salt (tenant namespace applied)
  std::string tenant;                // the tenant's name; empty without --api-keys
  int64_t ttl_ms = 0;                // the pin's TTL (a hit moves the expiry to now + ttl)
  int32_t ttl_class = 0;             // the daemon's TTL name as its enum value (5m, 1h, 24h)
  int64_t expires_unix_ms = 0;       // wall clock (system_clock), milliseconds since 1970
  std::vector<int32_t> tokens;       // [n_blocks * block_size] the pinned prefix
  std::vector<Hash128> block_hashes;  // [n_blocks] the chain's block hashes
};

// Bounds decode enforces (a record is a few KB; these stop a damaged length).
inline constexpr size_t kPinRecordMaxTokens = 1u << 22;
inline constexpr size_t kPinRecordMaxStringBytes = 4096;

std::vector<uint8_t> encode_pin_record(const PinRecord& pin);
// Fails naming the field, the offset or the checksum that is wrong.
Result<PinRecord> decode_pin_record(std::span<const uint8_t> bytes);

// The record's key in the disk tier: namespace seed (8 bytes big-endian) ||
// the last block's hash (hi, lo; 8 bytes big-endian each). One pin per prefix.
std::vector<uint8_t> pin_record_key(uint64_t namespace_seed, const Hash128& last_block_hash);

}  // namespace prefixd
