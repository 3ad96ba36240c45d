// Per-tenant limit accounting (see tenant_limits.h).
#include "daemon/auth/tenant_limits.h"

#include <algorithm>
#include <cmath>

namespace prefixd {

TenantTicket& TenantTicket::operator=(TenantTicket&& o) noexcept {
  if (this != &o) {
    if (limits_) limits_->end(tenant_);
    limits_ = o.limits_;
    tenant_ = o.tenant_;
    o.limits_ = nullptr;
  }
  return *this;
}

TenantTicket::~TenantTicket() {
  if (limits_) limits_->end(tenant_);
}

TenantLimits::TenantLimits(const std::vector<Tenant>& tenants) {
  slots_.resize(tenants.size());
  for (const Tenant& t : tenants) {
    PREFIXD_CHECK(t.index >= 0 && static_cast<size_t>(t.index) < tenants.size(),
                  "tenant index out of range");
    slots_[static_cast<size_t>(t.index)].limits = t.limits;
  }
}

std::optional<int32_t> TenantLimits::take_request(int32_t tenant, double now_s) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  const int64_t rpm = s.limits.requests_per_minute;
  if (rpm <= 0) return std::nullopt;
  const double capacity = static_cast<double>(rpm);
  const double per_s = capacity / 60.0;
  if (s.last_refill_s < 0) {
    s.tokens = capacity;
  } else if (now_s > s.last_refill_s) {
    s.tokens = std::min(capacity, s.tokens + (now_s - s.last_refill_s) * per_s);
  }
  s.last_refill_s = std::max(now_s, s.last_refill_s);
  // kEpsilon: the refill sums rounding errors; a token short by that much is whole.
  constexpr double kEpsilon = 1e-9;
  if (s.tokens >= 1.0 - kEpsilon) {
    s.tokens = std::max(0.0, s.tokens - 1.0);
    return std::nullopt;
  }
  const double wait_s = (1.0 - s.tokens) / per_s;
  return static_cast<int32_t>(std::clamp(std::ceil(wait_s - kEpsilon), 1.0, 60.0));
}

std::optional<TenantTicket> TenantLimits::try_begin(int32_t tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  if (s.limits.max_concurrent > 0 && s.in_flight >= s.limits.max_concurrent) return std::nullopt;
  ++s.in_flight;
  return std::optional<TenantTicket>(std::in_place, this, tenant);
}

void TenantLimits::end(int32_t tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  PREFIXD_CHECK(s.in_flight > 0, "a tenant ticket ended twice");
  --s.in_flight;
}

int64_t TenantLimits::in_flight(int32_t tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.at(static_cast<size_t>(tenant)).in_flight;
}

bool TenantLimits::reserve_pins(int32_t tenant, int64_t n_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  if (s.limits.max_pinned_blocks > 0 && s.pinned_blocks + n_blocks > s.limits.max_pinned_blocks)
    return false;
  s.pinned_blocks += n_blocks;
  return true;
}

void TenantLimits::settle_pins(int32_t tenant, int64_t reserved, int64_t pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  PREFIXD_CHECK(pinned <= reserved, "a pin took more blocks than it reserved");
  s.pinned_blocks -= reserved - pinned;
}

void TenantLimits::unpinned(int32_t tenant, int64_t n_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(tenant));
  s.pinned_blocks = std::max<int64_t>(0, s.pinned_blocks - n_blocks);
}

int64_t TenantLimits::pinned_blocks(int32_t tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.at(static_cast<size_t>(tenant)).pinned_blocks;
}

const TenantLimitSettings& TenantLimits::limits(int32_t tenant) const {
  return slots_.at(static_cast<size_t>(tenant)).limits;
}

}  // namespace prefixd
