// MetricsHistory: a bounded in-memory time series of the cache figures (one
// sample per sampler tick, oldest dropped first) behind the dashboard's
// charts and GET /v1/cache/history.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "daemon/monitoring/stats_snapshot.h"

namespace prefixd {

// One point of the series: counter deltas over [t_ms - interval_ms, t_ms],
// the gauges at t_ms, and TTFT percentiles over the preceding TTFT window.
struct HistorySample {
  int64_t t_ms = 0;           // unix ms
  int64_t interval_ms = 0;    // since the previous sample (0 for the first)
  StatsSnapshot delta;        // stats_delta(): counters over the interval, gauges at t_ms
  int64_t requests_hit = 0;   // requests that finished in the interval with cached tokens
  int64_t requests_miss = 0;  // ... and without
  // Nearest-rank percentiles (ms) of requests finished within the TTFT
  // window before t_ms; nullopt when there were none.
  std::optional<double> ttft_hit_p50_ms, ttft_hit_p95_ms, ttft_miss_p50_ms, ttft_miss_p95_ms;
};

// Nearest-rank percentile (p in (0, 100]) of `values`; nullopt when empty.
std::optional<double> nearest_rank_percentile(std::vector<double> values, double p);

// Thread-safety: every method may be called from any thread (one mutex).
// Time is a parameter; nothing here reads a clock.
class MetricsHistory {
 public:
  // capacity_samples: samples kept (> 0); ttft_window_ms: how far back the
  // TTFT percentiles of a sample look.
  MetricsHistory(size_t capacity_samples, int64_t ttft_window_ms);

  // One finished request: its time to first token and whether it was a hit.
  void observe_request(int64_t now_ms, double ttft_ms, bool hit);
  // Appends the sample for `stats` read at now_ms (dropping the oldest when
  // full) and returns it. The first call has zero deltas (it sets the base).
  HistorySample record(int64_t now_ms, const StatsSnapshot& stats);
  // Samples with t_ms > after_ms, oldest first.
  std::vector<HistorySample> since(int64_t after_ms) const;
  std::optional<HistorySample> latest() const;
  // The stats of the latest record() (cumulative); nullopt before the first.
  std::optional<StatsSnapshot> last_stats() const;
  // Requests observed since construction, with and without cached tokens.
  int64_t requests_hit_total() const;
  int64_t requests_miss_total() const;
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Observation {
    int64_t t_ms;
    double ttft_ms;
    bool hit;
  };
  static constexpr size_t kMaxObservations = 16384;

  const size_t capacity_;
  const int64_t ttft_window_ms_;
  mutable std::mutex mu_;
  std::vector<HistorySample> ring_;  // (<= capacity_) samples; ring_[head_] is the oldest when full
  size_t head_ = 0;
  std::optional<StatsSnapshot> previous_;
  int64_t previous_t_ms_ = 0;
  std::deque<Observation> observations_;  // finished requests, oldest first
  int64_t requests_hit_total_ = 0;
  int64_t requests_miss_total_ = 0;
};

}  // namespace prefixd
