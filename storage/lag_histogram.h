// LagHistogram: how long queued tier writes waited from being queued to being
// stored, as counts in log-spaced buckets (four per doubling, 0.25 ms to about
// 70 minutes), so its quantiles are exact to one bucket (19 %) in constant
// memory. Not thread-safe: its owner locks.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace prefixd {

struct LagSummary {
  uint64_t count = 0;  // writes measured
  double p50_ms = 0;   // upper bounds of the buckets holding the quantiles
  double p99_ms = 0;
  double max_ms = 0;   // exact
};

class LagHistogram {
 public:
  static constexpr int kBucketsPerDoubling = 4;
  static constexpr int kBuckets = 96;          // 24 doublings above kFirstBoundMs
  static constexpr double kFirstBoundMs = 0.25;

  // The upper bound of bucket i in ms (the last bucket also takes any larger value).
  static double bound_ms(int i) { return kFirstBoundMs * std::exp2(static_cast<double>(i) / kBucketsPerDoubling); }

  void add(double lag_ms) {
    int i = 0;
    if (lag_ms > kFirstBoundMs) {
      i = static_cast<int>(std::ceil(std::log2(lag_ms / kFirstBoundMs) * kBucketsPerDoubling - 1e-9));
      if (i >= kBuckets) i = kBuckets - 1;
      while (i > 0 && bound_ms(i - 1) >= lag_ms) --i;  // rounding of log2 at a bound
      while (i < kBuckets - 1 && bound_ms(i) < lag_ms) ++i;
    }
    ++counts_[static_cast<size_t>(i)];
    ++count_;
    if (lag_ms > max_ms_) max_ms_ = lag_ms;
  }

  LagSummary summary() const {
    LagSummary s;
    s.count = count_;
    s.max_ms = max_ms_;
    s.p50_ms = quantile(0.50);
    s.p99_ms = quantile(0.99);
    return s;
  }

 private:
  // The upper bound of the bucket holding the q-quantile, capped by the max.
  double quantile(double q) const {
    if (count_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[static_cast<size_t>(i)];
      if (seen >= rank && seen > 0) return bound_ms(i) < max_ms_ ? bound_ms(i) : max_ms_;
    }
    return max_ms_;
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  double max_ms_ = 0;
};

}  // namespace prefixd
