// The API key file: strict parsing and validation, and the constant-time key
// lookup (see api_keys.h).
#include "daemon/auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/private_files.h"

namespace prefixd {
namespace {

using nlohmann::json;

std::array<uint8_t, 32> sha256(std::string_view bytes) {
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  const int ok = EVP_Digest(bytes.data(), bytes.size(), out.data(), &n, EVP_sha256(), nullptr);
  PREFIXD_CHECK(ok == 1 && n == out.size(), "SHA-256 of an API key failed");
  return out;
}

// "entry 2 (keys[2]): field 'role': " and the rest.
Status entry_error(size_t i, const std::string& field, const std::string& what) {
  return Status::error("entry " + std::to_string(i) + " (keys[" + std::to_string(i) + "])" +
                       (field.empty() ? "" : ": field '" + field + "'") + ": " + what);
}

std::string json_type(const json& v) { return v.type_name(); }

// A tenant or namespace name: 1..64 of [A-Za-z0-9._-].
std::optional<std::string> name_problem(const std::string& name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > kMaxTenantNameBytes)
    return "is " + std::to_string(name.size()) + " bytes, above the limit of " +
           std::to_string(kMaxTenantNameBytes);
  for (unsigned char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return "'" + name + "' holds a character outside [A-Za-z0-9._-]";
  }
  return std::nullopt;
}

Result<TenantLimitSettings> parse_limits(size_t i, const json& v) {
  if (!v.is_object()) return entry_error(i, "limits", "must be an object, not " + json_type(v));
  TenantLimitSettings l;
  for (const auto& [name, value] : v.items()) {
    int64_t* slot = name == "max_concurrent"        ? &l.max_concurrent
                    : name == "max_pinned_blocks"   ? &l.max_pinned_blocks
                    : name == "requests_per_minute" ? &l.requests_per_minute
                                                    : nullptr;
    const std::string field = "limits." + name;
    if (slot == nullptr)
      return entry_error(i, field,
                         "unknown field (known: max_concurrent, max_pinned_blocks, "
                         "requests_per_minute)");
    if (!value.is_number_integer())
      return entry_error(i, field, "must be an integer, not " + json_type(value));
    const bool in_range =
        value.is_number_unsigned()
            ? value.get<uint64_t>() >= 1 &&
                  value.get<uint64_t>() <= static_cast<uint64_t>(kMaxTenantLimit)
            : value.get<int64_t>() >= 1 && value.get<int64_t>() <= kMaxTenantLimit;
    if (!in_range)
      return entry_error(
          i, field, value.dump() + " is out of range (1.." + std::to_string(kMaxTenantLimit) + ")");
    *slot = value.get<int64_t>();
  }
  return l;
}

// One entry of "keys": its key and tenant (index not yet set).
struct ParsedEntry {
  std::string key;
  Tenant tenant;
};

Result<ParsedEntry> parse_entry(size_t i, const json& e) {
  if (!e.is_object()) return entry_error(i, "", "must be an object, not " + json_type(e));
  for (const auto& [name, value] : e.items()) {
    if (name != "key" && name != "tenant" && name != "role" && name != "limits" &&
        name != "namespace")
      return entry_error(i, name, "unknown field (known: key, tenant, role, limits, namespace)");
  }
  for (const char* required : {"key", "tenant", "role"}) {
    if (!e.contains(required)) return entry_error(i, required, "is required");
  }
  for (const char* text : {"key", "tenant", "role", "namespace"}) {
    if (e.contains(text) && !e[text].is_string())
      return entry_error(i, text, std::string("must be a string, not ") + json_type(e[text]));
  }
  ParsedEntry p;
  p.key = e["key"].get<std::string>();
  if (p.key.empty()) return entry_error(i, "key", "must not be empty");
  if (p.key.size() > 4096)
    return entry_error(i, "key",
                       "is " + std::to_string(p.key.size()) + " bytes, above the limit of 4096");
  for (unsigned char c : p.key) {
    if (c <= ' ' || c == 0x7f)
      return entry_error(i, "key",
                         "holds whitespace or control characters (not sendable in a header)");
  }
  p.tenant.name = e["tenant"].get<std::string>();
  if (auto problem = name_problem(p.tenant.name)) return entry_error(i, "tenant", *problem);
  const std::string role = e["role"].get<std::string>();
  if (role == "user") {
    p.tenant.role = Role::kUser;
  } else if (role == "admin") {
    p.tenant.role = Role::kAdmin;
  } else {
    return entry_error(i, "role", "'" + role + "' is not one of user, admin");
  }
  p.tenant.cache_namespace = p.tenant.name;
  if (e.contains("namespace")) {
    p.tenant.cache_namespace = e["namespace"].get<std::string>();
    if (auto problem = name_problem(p.tenant.cache_namespace))
      return entry_error(i, "namespace", *problem);
  }
  if (e.contains("limits")) {
    Result<TenantLimitSettings> l = parse_limits(i, e["limits"]);
    if (!l.ok()) return l.status();
    p.tenant.limits = l.value();
  }
  return p;
}

}  // namespace

const char* role_name(Role r) { return r == Role::kAdmin ? "admin" : "user"; }

Result<ApiKeys> ApiKeys::parse(std::string_view json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::error("not valid JSON");
  if (!doc.is_object())
    return Status::error("must be a JSON object {\"keys\": [...]}, not " + json_type(doc));
  for (const auto& [name, value] : doc.items()) {
    if (name != "keys")
      return Status::error("unknown top-level field '" + name + "' (known: keys)");
  }
  if (!doc.contains("keys")) return Status::error("field 'keys' is required");
  const json& entries = doc["keys"];
  if (!entries.is_array())
    return Status::error("field 'keys' must be an array, not " + json_type(entries));
  if (entries.empty()) return Status::error("field 'keys' is empty: name at least one key");

  ApiKeys out;
  out.from_file_ = true;
  std::map<std::string, size_t> entry_of_tenant;  // tenant name -> first entry naming it
  std::map<Digest, size_t> entry_of_key;
  for (size_t i = 0; i < entries.size(); ++i) {
    Result<ParsedEntry> p = parse_entry(i, entries[i]);
    if (!p.ok()) return p.status();
    const Digest digest = sha256(p->key);
    if (auto it = entry_of_key.find(digest); it != entry_of_key.end())
      return entry_error(i, "key", "is the same key as entry " + std::to_string(it->second));
    entry_of_key.emplace(digest, i);
    auto [it, fresh] = entry_of_tenant.emplace(p->tenant.name, i);
    int32_t index = 0;
    if (fresh) {
      index = static_cast<int32_t>(out.tenants_.size());
      p->tenant.index = index;
      out.tenants_.push_back(p->tenant);
    } else {
      // Another key of a tenant seen before: it must say the same about it.
      const Tenant* first = nullptr;
      for (const Tenant& t : out.tenants_) {
        if (t.name == p->tenant.name) first = &t;
      }
      const std::string same = "tenant '" + p->tenant.name + "' is also entry " +
                               std::to_string(it->second) + ", which gives it a different ";
      if (first->role != p->tenant.role) return entry_error(i, "role", same + "role");
      if (first->cache_namespace != p->tenant.cache_namespace)
        return entry_error(i, "namespace", same + "namespace");
      if (!(first->limits == p->tenant.limits)) return entry_error(i, "limits", same + "limits");
      index = first->index;
    }
    out.keys_.push_back(KeyEntry{digest, index});
  }
  return out;
}

Result<ApiKeys> ApiKeys::load_file(const std::string& path) {
  Result<std::string> text =
      read_private_file(path, kMaxApiKeysFileBytes, "the key file", FileAccess::kOwnerOnly);
  if (!text.ok()) return text.status();
  Result<ApiKeys> keys = parse(text.value());
  if (!keys.ok()) return Status::error(path + ": " + keys.message());
  return keys;
}

ApiKeys ApiKeys::single_key(std::string_view key) {
  ApiKeys out;
  Tenant t;
  t.name = "default";
  t.role = Role::kAdmin;
  out.tenants_.push_back(t);
  out.keys_.push_back(KeyEntry{sha256(key), 0});
  return out;
}

const Tenant* ApiKeys::find(std::string_view presented) const {
  const Digest d = sha256(presented);
  // Every key is compared, whatever matched before: the time depends on
  // the number of keys only.
  int32_t found = -1;
  for (const KeyEntry& k : keys_) {
    const int32_t equal = CRYPTO_memcmp(d.data(), k.digest.data(), d.size()) == 0 ? 1 : 0;
    const int32_t mask = -equal;  // all ones when equal
    found = (found & ~mask) | (k.tenant & mask);
  }
  return found < 0 ? nullptr : &tenants_[static_cast<size_t>(found)];
}

const Tenant* ApiKeys::find_bearer(std::string_view authorization) const {
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() <= kPrefix.size() || authorization.substr(0, kPrefix.size()) != kPrefix)
    return nullptr;
  return find(authorization.substr(kPrefix.size()));
}

std::string engine_salt(const Tenant* tenant, const std::string& cache_salt) {
  if (tenant == nullptr || tenant->cache_namespace.empty()) return cache_salt;
  const std::string& ns = tenant->cache_namespace;
  std::string out = "\xff";
  out += "ns" + std::to_string(ns.size()) + ":" + ns;
  out += cache_salt;
  return out;
}

}  // namespace prefixd
