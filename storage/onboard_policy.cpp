// OnboardPolicy: exponentially averaged rates and a time comparison.
#include "storage/onboard_policy.h"

#include <algorithm>

#include "common/result.h"

namespace prefixd {
namespace {
double blend(double old_value, double sample, double weight) {
  return (1.0 - weight) * old_value + weight * sample;
}
}  // namespace

const char* storage_tier_name(StorageTier tier) {
  switch (tier) {
    case StorageTier::kHost: return "host";
    case StorageTier::kDisk: return "disk";
    case StorageTier::kRemote: return "remote";
  }
  return "?";
}

OnboardPolicy::OnboardPolicy(const OnboardPolicyOptions& options)
    : options_(options),
      host_bytes_per_s_(options.host_bytes_per_s),
      disk_bytes_per_s_(options.disk_bytes_per_s),
      remote_bytes_per_s_(options.remote_bytes_per_s),
      remote_round_trip_s_(options.remote_round_trip_s),
      prefill_tokens_per_s_(options.prefill_tokens_per_s) {
  PREFIXD_CHECK(options.block_bytes > 0, "OnboardPolicy needs block_bytes");
  PREFIXD_CHECK(options.host_bytes_per_s > 0 && options.disk_bytes_per_s > 0 &&
                    options.remote_bytes_per_s > 0 && options.remote_round_trip_s >= 0 &&
                    options.prefill_tokens_per_s > 0,
                "OnboardPolicy seeds must be positive");
  PREFIXD_CHECK(options.ema_weight > 0 && options.ema_weight <= 1, "ema_weight in (0, 1]");
}

void OnboardPolicy::observe_onboard(StorageTier tier, uint64_t n_bytes, double seconds) {
  if (n_bytes < options_.min_observed_bytes || !(seconds > 0)) return;
  // A remote transfer's time includes its round trip, learned apart.
  const double transfer_s =
      tier == StorageTier::kRemote ? std::max(seconds - remote_round_trip_s_, seconds * 0.1) : seconds;
  const double rate = static_cast<double>(n_bytes) / transfer_s;
  double& target = tier == StorageTier::kHost   ? host_bytes_per_s_
                   : tier == StorageTier::kDisk ? disk_bytes_per_s_
                                                : remote_bytes_per_s_;
  target = blend(target, rate, options_.ema_weight);
}

void OnboardPolicy::observe_remote_round_trip(double seconds) {
  if (!(seconds > 0)) return;
  remote_round_trip_s_ = blend(remote_round_trip_s_, seconds, options_.ema_weight);
}

void OnboardPolicy::observe_prefill(int64_t n_tokens, double seconds) {
  if (n_tokens < options_.min_observed_tokens || !(seconds > 0)) return;
  prefill_tokens_per_s_ =
      blend(prefill_tokens_per_s_, static_cast<double>(n_tokens) / seconds, options_.ema_weight);
}

double OnboardPolicy::bytes_per_s(StorageTier tier) const {
  return tier == StorageTier::kHost   ? host_bytes_per_s_
         : tier == StorageTier::kDisk ? disk_bytes_per_s_
                                      : remote_bytes_per_s_;
}

OnboardDecision OnboardPolicy::choose(int64_t n_blocks, StorageTier tier,
                                      int64_t n_tokens) const {
  ChainTiers blocks;
  (tier == StorageTier::kHost ? blocks.host : tier == StorageTier::kDisk ? blocks.disk : blocks.remote) =
      n_blocks;
  return choose_chain(blocks, n_tokens);
}

OnboardDecision OnboardPolicy::choose_chain(const ChainTiers& blocks, int64_t n_tokens) const {
  OnboardDecision d;
  d.prefill_tokens_per_s = prefill_tokens_per_s_;
  const double block_bytes = static_cast<double>(options_.block_bytes);
  const double host_s = static_cast<double>(blocks.host) * block_bytes / host_bytes_per_s_;
  const double disk_s = static_cast<double>(blocks.disk) * block_bytes / disk_bytes_per_s_;
  const double remote_s = static_cast<double>(blocks.remote) * block_bytes / remote_bytes_per_s_;
  const int64_t n_blocks = blocks.host + blocks.disk + blocks.remote;
  if (n_blocks <= 0) {
    d.choice = OnboardChoice::kRecompute;
    d.recompute_s = static_cast<double>(n_tokens) / prefill_tokens_per_s_;
    return d;
  }
  const double transfer_s = host_s + disk_s + remote_s;
  d.onboard_s = options_.onboard_overhead_s + transfer_s + (blocks.remote > 0 ? remote_round_trip_s_ : 0);
  d.bytes_per_s = transfer_s > 0 ? static_cast<double>(n_blocks) * block_bytes / transfer_s : 0;
  d.recompute_s = static_cast<double>(n_tokens) / prefill_tokens_per_s_;
  d.choice = d.onboard_s <= d.recompute_s ? OnboardChoice::kOnboard : OnboardChoice::kRecompute;
  return d;
}

}  // namespace prefixd
