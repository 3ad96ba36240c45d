// TTL pins over Engine::pin: pin or refresh, refresh on hits, the sweeper
// that unpins expired prefixes, and the per-TTL counts.
#include "daemon/api/ttl_pins.h"

#include <algorithm>

#include "daemon/auth/tenant_limits.h"
#include "engine/engine.h"

namespace prefixd {

using SteadyClock = std::chrono::steady_clock;

TtlPins::TtlPins(Engine* engine, TenantLimits* tenant_limits, TtlPinOptions options)
    : engine_(engine), tenant_limits_(tenant_limits), options_(options) {
  sweeper_ = std::thread([this] { sweeper_loop(); });
}

TtlPins::~TtlPins() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

SteadyClock::duration TtlPins::ttl_duration(CacheTtl ttl) const {
  return std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(ttl_seconds(ttl) * options_.ttl_scale));
}

BreakpointOutcome TtlPins::pin(const std::string& salt, const std::vector<int32_t>& prompt,
                               const CacheBreakpoint& breakpoint, int32_t tenant) {
  BreakpointOutcome out{breakpoint, PinStatus::kBelowMinimum, 0};
  const int32_t position =
      std::min<int32_t>(breakpoint.position_tokens, static_cast<int32_t>(prompt.size()));
  const int32_t n_blocks = position / options_.block_size;
  if (position < options_.min_cache_tokens || n_blocks == 0) return out;
  Key key{salt,
          std::vector<int32_t>(prompt.begin(), prompt.begin() + n_blocks * options_.block_size)};
  const SteadyClock::time_point now = SteadyClock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pins_.find(key); it != pins_.end()) {
    Entry& e = it->second;
    if (ttl_seconds(breakpoint.ttl) > ttl_seconds(e.ttl)) e.ttl = breakpoint.ttl;
    e.expires = std::max(e.expires, now + ttl_duration(breakpoint.ttl));
    ++e.hits;
    out.status = PinStatus::kRefreshed;
    out.pinned_tokens = e.pinned_blocks * options_.block_size;
    return out;
  }
  if (tenant >= 0 && tenant_limits_ && !tenant_limits_->reserve_pins(tenant, n_blocks)) {
    out.status = PinStatus::kTenantPinLimit;
    return out;
  }
  Result<PinResult> r = engine_->pin(key.second, salt, /*pin=*/true);
  const int32_t pinned = r.ok() ? r->pinned_blocks : 0;
  if (tenant >= 0 && tenant_limits_) tenant_limits_->settle_pins(tenant, n_blocks, pinned);
  if (!r.ok()) {
    out.status = PinStatus::kPinBudgetFull;
    return out;
  }
  if (pinned == 0) {
    out.status = PinStatus::kNotInCache;
    return out;
  }
  // Only the blocks found are pinned: the entry holds exactly that prefix.
  key.second.resize(static_cast<size_t>(pinned) * options_.block_size);
  Entry e{breakpoint.ttl, tenant, pinned, now + ttl_duration(breakpoint.ttl), 0};
  auto [it, inserted] = pins_.emplace(key, e);
  if (!inserted) {
    // A shorter prefix already pinned: one pin per prefix, so this one is let go.
    engine_->pin(key.second, salt, /*pin=*/false);
    if (tenant >= 0 && tenant_limits_) tenant_limits_->unpinned(tenant, pinned);
    it->second.expires = std::max(it->second.expires, e.expires);
    out.status = PinStatus::kRefreshed;
  } else {
    out.status = PinStatus::kPinned;
  }
  out.pinned_tokens = pinned * options_.block_size;
  return out;
}

void TtlPins::refresh_hits(const std::string& salt, const std::vector<int32_t>& prompt,
                           int32_t cached_tokens) {
  const SteadyClock::time_point now = SteadyClock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, e] : pins_) {
    if (key.first != salt || static_cast<int32_t>(key.second.size()) > cached_tokens) continue;
    if (!std::equal(key.second.begin(), key.second.end(), prompt.begin())) continue;
    e.expires = std::max(e.expires, now + ttl_duration(e.ttl));
    ++e.hits;
  }
}

void TtlPins::unpin(const Key& key, const Entry& e) {
  // An admin's /v1/cache/unpin may have dropped this pin already: the
  // engine then refuses, and nothing is left to undo.
  Result<PinResult> r = engine_->pin(key.second, key.first, /*pin=*/false);
  if (r.ok() && e.tenant >= 0 && tenant_limits_)
    tenant_limits_->unpinned(e.tenant, e.pinned_blocks);
}

int32_t TtlPins::sweep(SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t n = 0;
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    unpin(it->first, it->second);
    it = pins_.erase(it);
    ++n;
  }
  return n;
}

void TtlPins::sweeper_loop() {
  const auto interval = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(options_.sweep_interval_s));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, interval, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    sweep(SteadyClock::now());
    lock.lock();
  }
}

std::vector<TtlPinView> TtlPins::list() const {
  const SteadyClock::time_point now = SteadyClock::now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TtlPinView> out;
  for (const auto& [key, e] : pins_) {
    out.push_back(TtlPinView{key.first, key.second, e.ttl, e.tenant,
                             std::chrono::duration<double>(e.expires - now).count(), e.hits});
  }
  return out;
}

TtlPins::Counts TtlPins::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c;
  for (const auto& [key, e] : pins_) {
    c.pins[static_cast<int>(e.ttl)] += 1;
    c.blocks[static_cast<int>(e.ttl)] += e.pinned_blocks;
  }
  return c;
}

void TtlPins::render_metrics(std::string* out) const {
  const Counts c = counts();
  *out +=
      "# HELP prefixd_ttl_pins Prefixes pinned for a TTL (cache breakpoints, "
      "prompt_cache_retention).\n";
  *out += "# TYPE prefixd_ttl_pins gauge\n";
  for (int t = 0; t < kCacheTtlCount; ++t)
    *out += "prefixd_ttl_pins{ttl=\"" + std::string(ttl_name(static_cast<CacheTtl>(t))) + "\"} " +
            std::to_string(c.pins[t]) + "\n";
  *out +=
      "# HELP prefixd_ttl_pinned_blocks Blocks held by TTL pins (overlapping pins count each).\n";
  *out += "# TYPE prefixd_ttl_pinned_blocks gauge\n";
  for (int t = 0; t < kCacheTtlCount; ++t)
    *out += "prefixd_ttl_pinned_blocks{ttl=\"" + std::string(ttl_name(static_cast<CacheTtl>(t))) +
            "\"} " + std::to_string(c.blocks[t]) + "\n";
  *out +=
      "# HELP prefixd_cache_breakpoints_total Cache breakpoints answered: hit when the "
      "request read the whole prefix from the cache.\n";
  *out += "# TYPE prefixd_cache_breakpoints_total counter\n";
  *out +=
      "prefixd_cache_breakpoints_total{result=\"hit\"} " + std::to_string(breakpoint_hits()) + "\n";
  *out += "prefixd_cache_breakpoints_total{result=\"miss\"} " +
          std::to_string(breakpoint_misses()) + "\n";
}

}  // namespace prefixd
