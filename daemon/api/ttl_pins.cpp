// TTL pins over Engine::pin: pin or refresh, refresh on hits, the sweeper
// that unpins expired prefixes, the per-TTL counts, and the pin records that
// carry them across a restart.
#include "daemon/api/ttl_pins.h"

#include <algorithm>

#include "daemon/auth/tenant_limits.h"
#include "engine/engine.h"
#include "storage/tier_manager.h"

namespace prefixd {

using SteadyClock = std::chrono::steady_clock;
using SystemClock = std::chrono::system_clock;

namespace {

int64_t ms_of(SteadyClock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// A steady-clock expiry as wall-clock milliseconds since 1970, and back.
int64_t unix_ms_of(SteadyClock::time_point t) {
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(SystemClock::now().time_since_epoch()).count();
  return now_unix + ms_of(t - SteadyClock::now());
}
SteadyClock::time_point steady_of(int64_t unix_ms) {
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(SystemClock::now().time_since_epoch()).count();
  return SteadyClock::now() + std::chrono::milliseconds(unix_ms - now_unix);
}

std::vector<BlockKey> block_keys(uint64_t namespace_seed, const std::vector<Hash128>& hashes) {
  std::vector<BlockKey> keys;
  keys.reserve(hashes.size());
  for (const Hash128& h : hashes) keys.push_back(BlockKey{namespace_seed, h});
  return keys;
}

}  // namespace

TtlPins::TtlPins(Engine* engine, TenantLimits* tenant_limits, TtlPinOptions options, TierManager* tiers,
                 std::vector<std::string> tenant_names)
    : engine_(engine),
      tenant_limits_(tenant_limits),
      tiers_(tiers),
      tenant_names_(std::move(tenant_names)),
      options_(options) {
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
    repin(it->first, e);
    store(it->first, e);
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
  Entry e{breakpoint.ttl, tenant, pinned, now + ttl_duration(breakpoint.ttl), 0, r->namespace_seed,
          r->block_hashes, true};
  auto [it, inserted] = pins_.emplace(key, e);
  if (!inserted) {
    // A shorter prefix already pinned: one pin per prefix, so this one is let go.
    engine_->pin(key.second, salt, /*pin=*/false);
    if (tenant >= 0 && tenant_limits_) tenant_limits_->unpinned(tenant, pinned);
    it->second.expires = std::max(it->second.expires, e.expires);
    repin(it->first, it->second);
    store(it->first, it->second);
    out.status = PinStatus::kRefreshed;
  } else {
    mark(it->second, true);
    store(it->first, it->second);
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
    repin(key, e);
    store(key, e);
  }
}

void TtlPins::store(const Key& key, const Entry& e) {
  if (tiers_ == nullptr) return;
  PinRecord rec;
  rec.model_fingerprint = tiers_->model_fingerprint();
  rec.namespace_seed = e.namespace_seed;
  rec.cache_salt = key.first;
  if (e.tenant >= 0 && static_cast<size_t>(e.tenant) < tenant_names_.size())
    rec.tenant = tenant_names_[static_cast<size_t>(e.tenant)];
  rec.ttl_ms = std::max<int64_t>(1, ms_of(ttl_duration(e.ttl)));
  rec.ttl_class = static_cast<int32_t>(e.ttl);
  rec.expires_unix_ms = unix_ms_of(e.expires);
  rec.tokens = key.second;
  rec.block_hashes = e.block_hashes;
  // A failed write leaves the pin in memory only (the disk tier counts and
  // logs its write errors); serving goes on.
  (void)tiers_->store_pin(rec);
}

void TtlPins::mark(const Entry& e, bool pinned) {
  if (tiers_ == nullptr) return;
  const std::vector<BlockKey> keys = block_keys(e.namespace_seed, e.block_hashes);
  tiers_->mark_pinned(keys, pinned);
}

void TtlPins::repin(const Key& key, Entry& e) {
  if (e.engine_pinned) return;
  Result<PinResult> r = engine_->pin(key.second, key.first, /*pin=*/true);
  if (!r.ok()) return;  // the pin budget is full: the tiers keep the prefix marked
  if (r->pinned_blocks == e.pinned_blocks) {
    e.engine_pinned = true;
  } else if (r->pinned_blocks > 0) {
    (void)engine_->pin(key.second, key.first, /*pin=*/false);  // part of the prefix: not a pin
  }
}

std::string TtlPins::restore_refusal(const PinRecord& p, int32_t* tenant) const {
  if (p.model_fingerprint != tiers_->model_fingerprint())
    return "stored for another model or CPU plan (cache identity " + p.model_fingerprint.hex() + ")";
  const ChainKeys keys = engine_->chain_keys(p.tokens, p.cache_salt);
  if (keys.namespace_seed != p.namespace_seed || keys.block_hashes != p.block_hashes ||
      p.tokens.size() != p.block_hashes.size() * static_cast<size_t>(options_.block_size))
    return "its blocks hash differently here (another block size, KV dtype or deployment secret)";
  if (p.ttl_class < 0 || p.ttl_class >= kCacheTtlCount) return "TTL class " + std::to_string(p.ttl_class);
  *tenant = -1;
  if (p.tenant.empty()) return "";
  auto it = std::find(tenant_names_.begin(), tenant_names_.end(), p.tenant);
  if (it == tenant_names_.end() || tenant_limits_ == nullptr) return "tenant '" + p.tenant + "' is not in the key file";
  *tenant = static_cast<int32_t>(it - tenant_names_.begin());
  const int32_t n_blocks = static_cast<int32_t>(p.block_hashes.size());
  if (!tenant_limits_->reserve_pins(*tenant, n_blocks)) return "tenant '" + p.tenant + "' is at its pinned-block limit";
  tenant_limits_->settle_pins(*tenant, n_blocks, n_blocks);
  return "";
}

PinRestoreReport TtlPins::restore() {
  PinRestoreReport report;
  if (tiers_ == nullptr) return report;
  Result<TierManager::StoredPins> stored = tiers_->stored_pins();
  if (!stored.ok()) {
    report.error = stored.message();
    return report;
  }
  report.damaged = stored->damaged;
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(SystemClock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  for (PinRecord& p : stored->pins) {
    if (p.expires_unix_ms <= now_unix) {
      ++report.expired;
      (void)tiers_->erase_pin(p.namespace_seed, p.block_hashes.back());
      continue;
    }
    int32_t tenant = -1;
    Key key{p.cache_salt, p.tokens};
    const std::string refusal = pins_.count(key) != 0 ? "a pin of the same prefix came first" : restore_refusal(p, &tenant);
    if (!refusal.empty()) {
      report.dropped.push_back("pin of " + std::to_string(p.tokens.size()) + " tokens (salt '" + p.cache_salt +
                               "'): " + refusal);
      (void)tiers_->erase_pin(p.namespace_seed, p.block_hashes.back());
      continue;
    }
    Entry e{static_cast<CacheTtl>(p.ttl_class), tenant, static_cast<int32_t>(p.block_hashes.size()),
            steady_of(p.expires_unix_ms), 0, p.namespace_seed, p.block_hashes, /*engine_pinned=*/false};
    mark(e, true);
    pins_.emplace(std::move(key), std::move(e));
    ++report.restored;
  }
  return report;
}

void TtlPins::unpin(const Key& key, const Entry& e) {
  mark(e, false);
  if (tiers_ != nullptr && !e.block_hashes.empty()) (void)tiers_->erase_pin(e.namespace_seed, e.block_hashes.back());
  if (!e.engine_pinned) {
    // Restored and never read again: no device pin; its blocks were reserved.
    if (e.tenant >= 0 && tenant_limits_) tenant_limits_->unpinned(e.tenant, e.pinned_blocks);
    return;
  }
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
