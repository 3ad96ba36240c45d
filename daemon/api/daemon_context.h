// DaemonContext: what every HTTP handler needs (engine, model facts, metrics,
// admission gate, shutdown state), owned by the Server and shared by its
// worker threads. AdmissionGate bounds the generation requests in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/monitoring/metrics.h"
#include "daemon/validation/model_info.h"
#include "kernels/fast_path_report.h"

namespace prefixd {

class ApiKeys;
class Dashboard;
class Engine;
class TenantLimits;
class TierManager;
class TtlPins;

// Counts generation/prefetch requests between submit and their end; refuses
// beyond `limit` (-> 429). Thread-safe.
class AdmissionGate {
 public:
  explicit AdmissionGate(int32_t limit) : limit_(limit) {}
  bool try_acquire() {
    int32_t cur = in_flight_.load();
    while (cur < limit_) {
      if (in_flight_.compare_exchange_weak(cur, cur + 1)) return true;
    }
    return false;
  }
  void release() { in_flight_.fetch_sub(1); }
  int32_t in_flight() const { return in_flight_.load(); }
  int32_t limit() const { return limit_; }

 private:
  const int32_t limit_;
  std::atomic<int32_t> in_flight_{0};
};

// Releases an acquired gate slot when it goes out of scope (or is moved into
// a streaming state object that outlives the handler).
class AdmissionTicket {
 public:
  AdmissionTicket() = default;
  explicit AdmissionTicket(AdmissionGate* gate) : gate_(gate) {}
  AdmissionTicket(AdmissionTicket&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
  AdmissionTicket& operator=(AdmissionTicket&& o) noexcept {
    if (this != &o) {
      if (gate_) gate_->release();
      gate_ = o.gate_;
      o.gate_ = nullptr;
    }
    return *this;
  }
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;
  ~AdmissionTicket() {
    if (gate_) gate_->release();
  }

 private:
  AdmissionGate* gate_ = nullptr;
};

struct DaemonContext {
  Engine* engine = nullptr;  // not owned
  ModelInfo model;
  BuildInfo build;                     // backend and CPU instruction set (/health, /metrics)
  // The backend's attention paths, call counts and self-check verdicts
  // (/health, /metrics); any thread. Null: nothing to report.
  std::function<FastPathReport()> fast_paths;
  Metrics* metrics = nullptr;          // not owned
  AdmissionGate* admission = nullptr;  // not owned
  int32_t retry_after_s = 1;           // Retry-After of 429 answers
  // Set when shutdown begins: new generation requests get 503.
  std::atomic<bool> draining{false};
  // Set when the drain grace period is over: in-flight requests are cancelled.
  std::atomic<bool> cancel_all{false};
  TierManager* tiers = nullptr;  // not owned; null when no host/disk tier is configured
  // The keys (daemon/auth/api_keys.h; null = no auth) and the per-tenant limit
  // accounting (set with keys); not owned. The routes resolve each request's
  // caller once and hand it to the handler (Call::caller, daemon/api/call.h).
  const ApiKeys* api_keys = nullptr;
  TenantLimits* tenant_limits = nullptr;
  // The prefixes pinned for a TTL by cache breakpoints and
  // prompt_cache_retention (daemon/api/ttl_pins.h); set by Server::create().
  // Its sweeper unpins through `engine`, which outlives the context.
  std::shared_ptr<TtlPins> ttl_pins;
  // The dashboard's history sampler and prefix tracker (daemon/monitoring/dashboard.h);
  // set by Server::create(). Last member: destroyed first, so its sampler
  // stops while everything it reads is still alive.
  std::shared_ptr<Dashboard> dashboard;
};

// How often an HTTP worker waiting on a RequestChannel wakes to check for
// shutdown; also the SSE keep-alive granularity.
inline constexpr std::chrono::milliseconds kChannelPoll{50};

}  // namespace prefixd
