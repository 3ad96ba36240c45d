// Metrics: the daemon's own counters and latency histograms, and the
// Prometheus text exposition (format 0.0.4) of them together with a
// StatsSnapshot of the engine and tiers for GET /metrics.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/monitoring/stats_snapshot.h"
#include "kernels/fast_path_report.h"

namespace prefixd {

// How an HTTP generation request ended (the `status` label of
// prefixd_requests_total).
enum class RequestOutcome : uint8_t {
  kCompleted,  // finished with stop or length
  kCancelled,  // the client went away, or shutdown cancelled it
  kError,      // the engine reported an error
  kRejected,   // 429: queue full, or 503 while shutting down
  kInvalid,    // 4xx: the request failed validation or auth
};
const char* request_outcome_name(RequestOutcome o);

// Which per-tenant limit refused a request (the `limit` label of
// prefixd_tenant_limited_total; daemon/auth/tenant_limits.h).
enum class TenantLimit : uint8_t { kMaxConcurrent, kRequestsPerMinute, kMaxPinnedBlocks };
const char* tenant_limit_name(TenantLimit l);

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds_s);
  void observe(double value_s);
  // Appends `name`_bucket/_sum/_count lines (HELP/TYPE are written by the
  // caller); `labels` (e.g. `cache="hit"`) go on every line.
  void render(const std::string& name, std::string* out, const std::string& labels = "") const;

 private:
  std::vector<double> bounds_s_;  // (n_buckets) ascending upper bounds, +Inf implicit
  std::vector<uint64_t> counts_;  // (n_buckets + 1) per-bucket (non-cumulative) counts
  double sum_s_ = 0;
  uint64_t count_ = 0;
};

// How this daemon runs: the labels of prefixd_build_info, also in GET /health.
struct BuildInfo {
  std::string backend_name = "cpu";  // "cpu" | "cuda"
  std::string cpu_isa_name;          // the CPU backend's instruction set, e.g. "avx2"
};

// The backend's attention paths in the exposition (appended to `out`):
//   prefixd_attention_path_info{family,path="cudnn 9.19.0"|"none: ..."} 1
//   prefixd_attention_calls_total{path}            calls of each path
//   prefixd_fast_path_enabled{path}                1 while a path may serve
//   prefixd_fast_path_self_checks{result="passed"|"failed"}
// Nothing for an empty report (the CPU backend's).
void render_fast_paths(const FastPathReport& report, std::string* out);

class Metrics {
 public:
  Metrics();

  // The tenants of an --api-keys file, by Tenant::index (daemon/auth/api_keys.h);
  // set before serving. With tenants the exposition adds the
  // prefixd_tenant_* families, one series per tenant and label value: no
  // other tenant label values can appear.
  void set_tenants(std::vector<std::string> names);
  // `tenant` >= 0 also counts the request for that tenant (ignored without
  // tenants).
  void count_request(RequestOutcome outcome, int32_t tenant = -1);
  // A finished generation request's tokens, for its tenant.
  void count_tenant_tokens(int32_t tenant, int64_t prompt_tokens, int64_t cached_tokens,
                           int64_t generated_tokens);
  void count_tenant_limited(int32_t tenant, TenantLimit limit);
  // Every request's TTFT, observed when its first token arrives.
  void observe_ttft(double seconds);
  // A completed request's TTFT again, split by cache hit (cached_tokens > 0)
  // and miss: known only when the request ends.
  void observe_ttft_by_cache(double seconds, bool cache_hit);
  void observe_inter_token(double seconds);
  void observe_queue(double seconds);

  uint64_t requests(RequestOutcome outcome) const;

  // The whole exposition: HELP and TYPE lines, then samples, per metric.
  // Host and disk series are written only for the tiers `stats` has.
  std::string render(const StatsSnapshot& stats, const BuildInfo& build) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, 5> requests_{};  // by RequestOutcome
  Histogram ttft_;
  Histogram ttft_hit_;
  Histogram ttft_miss_;
  Histogram inter_token_;
  Histogram queue_;
  struct TenantCounters {
    std::string name;
    std::array<uint64_t, 5> requests{};  // by RequestOutcome
    uint64_t prompt_tokens = 0;
    uint64_t cached_tokens = 0;
    uint64_t generated_tokens = 0;
    std::array<uint64_t, 3> limited{};  // by TenantLimit
  };
  std::vector<TenantCounters> tenants_;  // by Tenant::index; empty without an --api-keys file
  TenantCounters* tenant_locked(int32_t tenant);  // null when out of range; mu_ held
  void render_tenants(std::string* out) const;    // mu_ held
};

}  // namespace prefixd
