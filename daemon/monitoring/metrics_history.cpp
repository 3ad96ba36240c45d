// MetricsHistory: counter deltas, TTFT percentiles and the ring buffer.
#include "daemon/monitoring/metrics_history.h"

#include <algorithm>
#include <cmath>

namespace prefixd {

std::optional<double> nearest_rank_percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size())));
  return values[i - 1];
}

MetricsHistory::MetricsHistory(size_t capacity_samples, int64_t ttft_window_ms)
    : capacity_(capacity_samples > 0 ? capacity_samples : 1), ttft_window_ms_(ttft_window_ms) {
  ring_.reserve(capacity_);
}

void MetricsHistory::observe_request(int64_t now_ms, double ttft_ms, bool hit) {
  std::lock_guard<std::mutex> lock(mu_);
  observations_.push_back(Observation{now_ms, ttft_ms, hit});
  ++(hit ? requests_hit_total_ : requests_miss_total_);
  if (observations_.size() > kMaxObservations) observations_.pop_front();
}

HistorySample MetricsHistory::record(int64_t now_ms, const StatsSnapshot& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  HistorySample s;
  s.t_ms = now_ms;
  // The first sample is the baseline: its counter deltas are zero.
  s.delta = stats_delta(stats, previous_ ? *previous_ : stats);
  if (previous_) s.interval_ms = std::max<int64_t>(0, now_ms - previous_t_ms_);
  // Requests finished in (previous sample, now]; percentiles over the window.
  while (!observations_.empty() && observations_.front().t_ms <= now_ms - ttft_window_ms_) {
    observations_.pop_front();
  }
  std::vector<double> hit_ms, miss_ms;
  for (const Observation& o : observations_) {
    if (o.t_ms > now_ms) continue;
    (o.hit ? hit_ms : miss_ms).push_back(o.ttft_ms);
    if (previous_ && o.t_ms > previous_t_ms_) ++(o.hit ? s.requests_hit : s.requests_miss);
  }
  s.ttft_hit_p50_ms = nearest_rank_percentile(hit_ms, 50);
  s.ttft_hit_p95_ms = nearest_rank_percentile(hit_ms, 95);
  s.ttft_miss_p50_ms = nearest_rank_percentile(miss_ms, 50);
  s.ttft_miss_p95_ms = nearest_rank_percentile(std::move(miss_ms), 95);

  previous_ = stats;
  previous_t_ms_ = now_ms;
  if (ring_.size() < capacity_) {
    ring_.push_back(s);
  } else {
    ring_[head_] = s;
    head_ = (head_ + 1) % capacity_;
  }
  return s;
}

std::vector<HistorySample> MetricsHistory::since(int64_t after_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HistorySample> out;
  for (size_t i = 0; i < ring_.size(); ++i) {
    const HistorySample& s = ring_[(head_ + i) % ring_.size()];
    if (s.t_ms > after_ms) out.push_back(s);
  }
  return out;
}

std::optional<HistorySample> MetricsHistory::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return std::nullopt;
  return ring_[(head_ + ring_.size() - 1) % ring_.size()];
}

std::optional<StatsSnapshot> MetricsHistory::last_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return previous_;
}

int64_t MetricsHistory::requests_hit_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_hit_total_;
}

int64_t MetricsHistory::requests_miss_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_miss_total_;
}

size_t MetricsHistory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.size();
}

}  // namespace prefixd
