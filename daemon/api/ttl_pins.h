// TtlPins: prefixes pinned for a time (cache breakpoints' `cache_control.ttl`,
// OpenAI's `prompt_cache_retention`). Each entry holds one Engine::pin of a
// block-aligned prefix in one namespace (cache salt); a hit on the prefix
// moves its expiry to now + TTL; a sweeper thread unpins it once expired, and
// its blocks become evictable again. Pins count against the tenant's
// max_pinned_blocks (tenant_limits.h) and the engine's --max-pinned-blocks:
// a full budget leaves the prefix unpinned and says so (PinStatus), never an
// error. Pinned device blocks are never evicted, so a pinned prefix stays in
// the device pool while its pin lives.
//
// With a disk tier a pin is durable: its record (storage/pin_record.h) is
// written beside the KV blocks when it is made or refreshed and erased when
// it ends, and its chain is marked in the host and disk tiers, which evict it
// only after every unpinned block. restore() at start takes the stored pins
// back with their remaining TTL (the blocks are on disk; the device pin is
// taken again when a request next reads the prefix); expired pins, pins of
// another model or configuration, of a tenant no longer in the key file, and
// damaged records are dropped and reported.
//
// Thread-safety: every method may be called from any thread (one mutex; the
// engine calls are made under it, and the engine never calls back).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/hash128.h"
#include "storage/pin_record.h"
#include "daemon/validation/cache_breakpoints.h"

namespace prefixd {

class Engine;
class TenantLimits;
class TierManager;

struct TtlPinOptions {
  int32_t block_size = 16;          // the engine's tokens per block
  int32_t min_cache_tokens = 1024;  // --min-cache-tokens: shorter prefixes are not pinned
  double ttl_scale = 1.0;           // --cache-ttl-scale: every TTL is multiplied by it (tests)
  double sweep_interval_s = 0.1;    // how often the sweeper looks for expired pins
};

// What restore() found among the stored pins.
struct PinRestoreReport {
  int32_t restored = 0;
  int32_t expired = 0;              // dropped: past their expiry
  std::vector<std::string> dropped;  // other model or configuration, tenant gone, budget: why
  std::vector<std::string> damaged;  // records that did not decode: key and why
  std::string error;                 // reading the stored pins failed (none restored)
};

// One TTL pin as /v1/cache/prefixes and the dashboard list it.
struct TtlPinView {
  std::string cache_salt;       // the engine salt (namespace) it is pinned under
  std::vector<int32_t> tokens;  // the pinned prefix (pinned_tokens long)
  CacheTtl ttl = CacheTtl::k5m;
  int32_t tenant = -1;      // Tenant::index; -1 without --api-keys
  double expires_in_s = 0;  // from now
  int64_t hits = 0;         // refreshes since it was pinned
};

class TtlPins {
 public:
  // `engine` must outlive this object; `tenant_limits` may be null (no
  // --api-keys file); `tiers` may be null (pins live in memory only).
  // `tenant_names`: by Tenant::index (pin records name their tenant). Starts
  // the sweeper.
  TtlPins(Engine* engine, TenantLimits* tenant_limits, TtlPinOptions options, TierManager* tiers = nullptr,
          std::vector<std::string> tenant_names = {});
  ~TtlPins();  // stops the sweeper; the pins stay (the engine goes next)
  TtlPins(const TtlPins&) = delete;
  TtlPins& operator=(const TtlPins&) = delete;

  const TtlPinOptions& options() const { return options_; }

  // Pins prompt[0, position) rounded down to whole blocks under `salt` for
  // `ttl`, or refreshes the pin of that prefix (its TTL becomes the longer
  // of the two). `tenant` is a Tenant::index or -1. Call after the request
  // that computed the prefix finished (its blocks are in the pool).
  BreakpointOutcome pin(const std::string& salt, const std::vector<int32_t>& prompt,
                        const CacheBreakpoint& breakpoint, int32_t tenant);

  // A request of `salt` read its first `cached_tokens` tokens from the
  // cache: every pin of that namespace whose prefix lies within them is
  // refreshed (expiry = now + its TTL).
  void refresh_hits(const std::string& salt, const std::vector<int32_t>& prompt,
                    int32_t cached_tokens);

  // Takes back the pins stored by an earlier run (call once, before serving).
  PinRestoreReport restore();

  // Unpins every pin expired at `now`; returns how many. The sweeper calls it.
  int32_t sweep(std::chrono::steady_clock::time_point now);

  std::vector<TtlPinView> list() const;
  // Pins and pinned blocks by TTL (the /metrics gauges).
  struct Counts {
    int64_t pins[kCacheTtlCount] = {};
    int64_t blocks[kCacheTtlCount] = {};
  };
  Counts counts() const;

  // Breakpoints answered: a hit when the request read its whole prefix
  // (block-aligned) from the cache, a miss otherwise (the /metrics counters).
  void count_breakpoint(bool hit) { (hit ? breakpoint_hits_ : breakpoint_misses_).fetch_add(1); }
  int64_t breakpoint_hits() const { return breakpoint_hits_.load(); }
  int64_t breakpoint_misses() const { return breakpoint_misses_.load(); }

  // Prometheus text: prefixd_ttl_pins{ttl}, prefixd_ttl_pinned_blocks{ttl}
  // (gauges) and prefixd_cache_breakpoints_total{result="hit"|"miss"}.
  void render_metrics(std::string* out) const;

 private:
  struct Entry {
    CacheTtl ttl = CacheTtl::k5m;
    int32_t tenant = -1;
    int32_t pinned_blocks = 0;
    std::chrono::steady_clock::time_point expires;
    int64_t hits = 0;
    uint64_t namespace_seed = 0;
    std::vector<Hash128> block_hashes;  // [pinned_blocks]
    // False for a pin restored at start until a request reads its prefix
    // again (its blocks were on disk, not in the device pool).
    bool engine_pinned = true;
  };
  using Key = std::pair<std::string, std::vector<int32_t>>;  // salt, block-aligned prefix

  std::chrono::steady_clock::duration ttl_duration(CacheTtl ttl) const;
  void unpin(const Key& key, const Entry& e);  // mu_ held
  // mu_ held: writes the pin's record (with its expiry) when tiers_ is set;
  // marks or unmarks its chain in host and disk.
  void store(const Key& key, const Entry& e);
  void mark(const Entry& e, bool pinned);
  // mu_ held: takes the device pin of a restored entry whose prefix a request
  // just read (its blocks are in the pool now).
  void repin(const Key& key, Entry& e);
  // Why a stored pin cannot be taken back ("" when it can; then *tenant is
  // its Tenant::index or -1, and its blocks are reserved against the tenant).
  std::string restore_refusal(const PinRecord& p, int32_t* tenant) const;
  void sweeper_loop();

  Engine* engine_;
  TenantLimits* tenant_limits_;
  TierManager* tiers_;
  const std::vector<std::string> tenant_names_;
  const TtlPinOptions options_;
  mutable std::mutex mu_;
  std::map<Key, Entry> pins_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread sweeper_;
  std::atomic<int64_t> breakpoint_hits_{0};
  std::atomic<int64_t> breakpoint_misses_{0};
};

}  // namespace prefixd
