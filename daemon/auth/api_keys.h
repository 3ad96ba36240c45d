// ApiKeys: the keys a daemon accepts, each naming a tenant with a role
// (user or admin), optional limits and a cache namespace. Built from the
// --api-keys JSON file (parse/load_file: strict, every refusal names the
// entry and the field) or from the one key of --api-key / --api-key-file /
// PREFIXD_API_KEY (single_key). Keys are kept only as SHA-256 digests; find()
// compares the presented key's digest with every configured one in constant
// time, so neither which key nor how much of one matched shows in its timing.
//
// Thread-safety: immutable after construction; any thread may call find().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace prefixd {

enum class Role : uint8_t {
  kUser,   // generation, models, (de)tokenize, cache lookup and prefetch
  kAdmin,  // also pin/unpin, DELETE /v1/cache, cache stats, prefixes, history, /metrics, dashboard
};
const char* role_name(Role r);

// A tenant's limits; 0 = no limit.
struct TenantLimitSettings {
  int64_t max_concurrent = 0;       // generation and prefetch requests in flight
  int64_t max_pinned_blocks = 0;    // blocks pinned through /v1/cache/pin, less those unpinned
  int64_t requests_per_minute = 0;  // every request the tenant's keys make (token bucket)
  bool operator==(const TenantLimitSettings&) const = default;
};

// Largest value a limit may take in the key file.
inline constexpr int64_t kMaxTenantLimit = 1'000'000'000;
// Tenant and namespace names: 1..64 of [A-Za-z0-9._-].
inline constexpr size_t kMaxTenantNameBytes = 64;
// Largest --api-keys file.
inline constexpr size_t kMaxApiKeysFileBytes = 1 << 20;

struct Tenant {
  int32_t index = 0;  // position in ApiKeys::tenants() (metrics and limit slots)
  std::string name;
  Role role = Role::kUser;
  // Cache namespace (key file: "namespace", default the tenant name). Empty
  // only for the single-key shorthand: its cache_salt reaches the engine as
  // it is, so its block hashes are those of a daemon without keys.
  std::string cache_namespace;
  TenantLimitSettings limits;
};

class ApiKeys {
 public:
  // {"keys": [{"key", "tenant", "role", "limits"?, "namespace"?}, ...]}.
  // Several keys may name one tenant (key rotation); they must then agree
  // on role, limits and namespace.
  static Result<ApiKeys> parse(std::string_view json_text);
  // Reads `path` as a private file (daemon/auth/secret_file.h), then parse().
  static Result<ApiKeys> load_file(const std::string& path);
  // One admin key, tenant "default", no namespace and no limits.
  static ApiKeys single_key(std::string_view key);

  // The tenant whose key `presented` is; null when none is.
  const Tenant* find(std::string_view presented) const;
  // The same for an Authorization header value "Bearer KEY".
  const Tenant* find_bearer(std::string_view authorization) const;

  const std::vector<Tenant>& tenants() const { return tenants_; }
  bool from_file() const { return from_file_; }

 private:
  using Digest = std::array<uint8_t, 32>;  // SHA-256 of a key
  struct KeyEntry {
    Digest digest;
    int32_t tenant = 0;
  };
  std::vector<Tenant> tenants_;
  std::vector<KeyEntry> keys_;
  bool from_file_ = false;
};

// The salt the engine hashes a request's blocks under (engine/kv/block_hash.h):
// `cache_salt` itself without a namespace (no keys, or the single key), else
// the byte 0xFF, "ns", the namespace's length in decimal, ':', the namespace,
// then cache_salt. The engine takes a request's cache_salt only from JSON
// text, which is UTF-8 and so never holds 0xFF: no cache_salt sent by a
// client equals a namespaced salt, and two namespaces never share one.
std::string engine_salt(const Tenant* tenant, const std::string& cache_salt);

}  // namespace prefixd
