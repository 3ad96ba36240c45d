// TenantLimits: the per-tenant limits of daemon/auth/api_keys.h as accounting —
// generation requests in flight (max_concurrent), a token bucket of
// requests_per_minute, and pinned blocks (max_pinned_blocks). A plain object:
// no I/O, no threads; time is a parameter, so tests can step it.
// TenantTicket holds one in-flight slot until it is destroyed.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "daemon/auth/api_keys.h"

namespace prefixd {

class TenantLimits;

// One generation/prefetch request in flight for a tenant; released when it
// is destroyed (moved into a stream's state, it lives as long as the stream).
class TenantTicket {
 public:
  TenantTicket() = default;
  TenantTicket(TenantLimits* limits, int32_t tenant) : limits_(limits), tenant_(tenant) {}
  TenantTicket(TenantTicket&& o) noexcept : limits_(o.limits_), tenant_(o.tenant_) {
    o.limits_ = nullptr;
  }
  TenantTicket& operator=(TenantTicket&& o) noexcept;
  TenantTicket(const TenantTicket&) = delete;
  TenantTicket& operator=(const TenantTicket&) = delete;
  ~TenantTicket();

 private:
  TenantLimits* limits_ = nullptr;
  int32_t tenant_ = -1;
};

class TenantLimits {
 public:
  // `tenants` as ApiKeys::tenants(): one slot per tenant, by Tenant::index.
  explicit TenantLimits(const std::vector<Tenant>& tenants);

  // requests_per_minute: takes one token from the tenant's bucket (it holds
  // up to requests_per_minute tokens and gains requests_per_minute per 60 s)
  // and returns nullopt, or, when the bucket is empty, takes nothing and
  // returns the whole seconds until a token is there (1..60): Retry-After.
  // `now_s`: a monotonic clock in seconds.
  std::optional<int32_t> take_request(int32_t tenant, double now_s);

  // max_concurrent: a ticket, or nullopt when the tenant has that many
  // requests in flight already.
  std::optional<TenantTicket> try_begin(int32_t tenant);
  int64_t in_flight(int32_t tenant) const;

  // max_pinned_blocks, around Engine::pin: reserve the blocks a pin may take
  // (false, nothing reserved, when they would take the tenant over its
  // limit), then settle with the number it pinned (0 when it failed).
  bool reserve_pins(int32_t tenant, int64_t n_blocks);
  void settle_pins(int32_t tenant, int64_t reserved, int64_t pinned);
  // A successful unpin of `n_blocks`. Another key of the same namespace may
  // unpin what this tenant did not pin: the count stops at zero then.
  void unpinned(int32_t tenant, int64_t n_blocks);
  int64_t pinned_blocks(int32_t tenant) const;

  const TenantLimitSettings& limits(int32_t tenant) const;

 private:
  friend class TenantTicket;
  void end(int32_t tenant);

  struct Slot {
    TenantLimitSettings limits;
    int64_t in_flight = 0;
    int64_t pinned_blocks = 0;  // pins (with reservations) minus unpins
    double tokens = 0;          // requests_per_minute bucket
    double last_refill_s = -1;  // < 0: never used (the bucket starts full)
  };
  mutable std::mutex mu_;
  std::vector<Slot> slots_;  // by Tenant::index
};

}  // namespace prefixd
