// OnboardPolicy: decides whether onboarding cached blocks from the host, disk
// or remote tier beats recomputing them, from measured tier bandwidth, the
// remote tier's measured round trip and measured prefill speed. A plain
// object: no I/O, no threads, no clock.
#pragma once

#include <cstdint>

namespace prefixd {

enum class StorageTier : uint8_t { kHost = 0, kDisk = 1, kRemote = 2 };
const char* storage_tier_name(StorageTier tier);

struct OnboardPolicyOptions {
  uint64_t block_bytes = 0;               // record bytes of one block (required, > 0)
  double host_bytes_per_s = 5e9;          // seed: host RAM -> pool
  double disk_bytes_per_s = 1e9;          // seed: disk (page cache or NVMe) -> pool
  double remote_bytes_per_s = 1e9;        // seed: memcached pool -> pool (loopback or LAN)
  double remote_round_trip_s = 500e-6;    // seed: one remote request's fixed latency
  double prefill_tokens_per_s = 2000.0;   // seed: small model on 2 CPU cores
  double onboard_overhead_s = 200e-6;     // fixed cost of one onboard (queue hop, wakeups)
  double ema_weight = 0.25;               // weight of each new observation, (0, 1]
  uint64_t min_observed_bytes = 64 << 10;  // smaller transfers are too noisy to learn from
  int64_t min_observed_tokens = 16;
};

enum class OnboardChoice : uint8_t { kOnboard, kRecompute };

// The decision and the estimates it was based on (for logs and responses).
struct OnboardDecision {
  OnboardChoice choice = OnboardChoice::kRecompute;
  double onboard_s = 0;        // estimated time to onboard the blocks
  double recompute_s = 0;      // estimated time to prefill the tokens
  double bytes_per_s = 0;      // tier bandwidth used (for a mixed chain: effective)
  double prefill_tokens_per_s = 0;
};

// How many blocks of a chain each tier is to supply.
struct ChainTiers {
  int64_t host = 0;
  int64_t disk = 0;
  int64_t remote = 0;  // counted once the blocks in host and on disk end
};

// Thread-safety: none; owned by one thread (the engine thread).
class OnboardPolicy {
 public:
  explicit OnboardPolicy(const OnboardPolicyOptions& options);

  // A completed onboard of `n_bytes` from `tier` that took `seconds`.
  void observe_onboard(StorageTier tier, uint64_t n_bytes, double seconds);
  // A remote request that returned nothing: its time is the round trip.
  void observe_remote_round_trip(double seconds);
  // A prefill of `n_tokens` that took `seconds` of forward time.
  void observe_prefill(int64_t n_tokens, double seconds);

  // Onboard `n_blocks` from `tier`, or recompute their `n_tokens`? Ties onboard.
  OnboardDecision choose(int64_t n_blocks, StorageTier tier, int64_t n_tokens) const;
  // A chain whose blocks sit in several tiers: onboard time is the fixed
  // overhead, each tier's bytes over its bandwidth, and one remote round
  // trip when the remote tier supplies any.
  OnboardDecision choose_chain(const ChainTiers& blocks, int64_t n_tokens) const;

  double bytes_per_s(StorageTier tier) const;
  double remote_round_trip_s() const { return remote_round_trip_s_; }
  double prefill_tokens_per_s() const { return prefill_tokens_per_s_; }

 private:
  OnboardPolicyOptions options_;
  double host_bytes_per_s_;
  double disk_bytes_per_s_;
  double remote_bytes_per_s_;
  double remote_round_trip_s_;
  double prefill_tokens_per_s_;
};

}  // namespace prefixd
