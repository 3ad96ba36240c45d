// Tests for OnboardPolicy: onboard when it is faster than recompute, learning
// tier bandwidth and prefill speed from observations.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "storage/onboard_policy.h"

using namespace prefixd;

namespace {
// Round numbers so the estimates are exact: 1 MB blocks, 1 GB/s host,
// 100 MB/s disk, 1000 tokens/s prefill, no fixed overhead.
OnboardPolicyOptions round_options() {
  OnboardPolicyOptions o;
  o.block_bytes = 1000000;
  o.host_bytes_per_s = 1e9;
  o.disk_bytes_per_s = 1e8;
  o.prefill_tokens_per_s = 1000;
  o.onboard_overhead_s = 0;
  o.ema_weight = 0.5;
  return o;
}
}  // namespace

TEST_CASE("onboard_from_host_beats_recompute_for_a_long_prefix") {
  const OnboardPolicy policy(round_options());
  // 125 blocks of 16 tokens: 0.125 s onboard vs 2 s prefill.
  const OnboardDecision d = policy.choose(125, StorageTier::kHost, 2000);
  CHECK(d.choice == OnboardChoice::kOnboard);
  CHECK(d.onboard_s == doctest::Approx(0.125).epsilon(1e-12));
  CHECK(d.recompute_s == doctest::Approx(2.0).epsilon(1e-12));
  CHECK(d.bytes_per_s == doctest::Approx(1e9).epsilon(1e-12));
  CHECK(d.prefill_tokens_per_s == 1000);
}

TEST_CASE("recompute_wins_for_a_short_chain_on_a_slow_disk") {
  const OnboardPolicy policy(round_options());
  // 2 blocks from disk: 0.02 s; 32 tokens: 0.032 s -> onboard.
  CHECK(policy.choose(2, StorageTier::kDisk, 32).choice == OnboardChoice::kOnboard);
  // 2 blocks of 4 tokens: 0.02 s onboard vs 0.008 s prefill -> recompute.
  const OnboardDecision d = policy.choose(2, StorageTier::kDisk, 8);
  CHECK(d.choice == OnboardChoice::kRecompute);
  CHECK(d.onboard_s == doctest::Approx(0.02).epsilon(1e-12));
  CHECK(d.recompute_s == doctest::Approx(0.008).epsilon(1e-12));
}

TEST_CASE("fixed_overhead_counts_against_restoring") {
  OnboardPolicyOptions o = round_options();
  o.onboard_overhead_s = 0.01;
  const OnboardPolicy policy(o);
  // 1 host block: 0.001 + 0.01 = 0.011 s vs 10 tokens = 0.01 s.
  CHECK(policy.choose(1, StorageTier::kHost, 10).choice == OnboardChoice::kRecompute);
  CHECK(policy.choose(1, StorageTier::kHost, 11).choice == OnboardChoice::kOnboard);  // tie onboards
}

TEST_CASE("observed_bandwidth_is_exponentially_averaged_per_tier") {
  OnboardPolicy policy(round_options());
  policy.observe_onboard(StorageTier::kDisk, 10000000, 1.0);  // 1e7 B/s sample
  CHECK(policy.bytes_per_s(StorageTier::kDisk) == doctest::Approx(5.5e7).epsilon(1e-12));
  CHECK(policy.bytes_per_s(StorageTier::kHost) == 1e9);
  policy.observe_onboard(StorageTier::kDisk, 10000000, 1.0);
  CHECK(policy.bytes_per_s(StorageTier::kDisk) == doctest::Approx(3.25e7).epsilon(1e-12));
  // Tiny or instant transfers are ignored.
  policy.observe_onboard(StorageTier::kDisk, 1000, 1e-9);
  policy.observe_onboard(StorageTier::kDisk, 10000000, 0.0);
  CHECK(policy.bytes_per_s(StorageTier::kDisk) == doctest::Approx(3.25e7).epsilon(1e-12));
}

TEST_CASE("a_slower_measured_disk_flips_the_decision_to_recompute") {
  OnboardPolicy policy(round_options());
  // 10 disk blocks: 0.1 s vs 160 tokens: 0.16 s -> onboard.
  CHECK(policy.choose(10, StorageTier::kDisk, 160).choice == OnboardChoice::kOnboard);
  for (int i = 0; i < 10; ++i) policy.observe_onboard(StorageTier::kDisk, 1000000, 0.1);  // 1e7 B/s
  CHECK(policy.bytes_per_s(StorageTier::kDisk) < 1.1e7);
  CHECK(policy.choose(10, StorageTier::kDisk, 160).choice == OnboardChoice::kRecompute);
}

TEST_CASE("faster_measured_prefill_makes_recompute_win_sooner") {
  OnboardPolicy policy(round_options());
  CHECK(policy.choose(10, StorageTier::kDisk, 160).choice == OnboardChoice::kOnboard);
  policy.observe_prefill(3000, 1.0);  // 3000 tok/s sample -> 2000
  CHECK(policy.prefill_tokens_per_s() == doctest::Approx(2000).epsilon(1e-12));
  policy.observe_prefill(8, 1.0);  // too few tokens to learn from
  CHECK(policy.prefill_tokens_per_s() == doctest::Approx(2000).epsilon(1e-12));
  // 0.1 s onboard vs 160 / 2000 = 0.08 s.
  CHECK(policy.choose(10, StorageTier::kDisk, 160).choice == OnboardChoice::kRecompute);
}

TEST_CASE("mixed_chain_adds_host_and_disk_times") {
  const OnboardPolicy policy(round_options());
  const OnboardDecision d = policy.choose_chain(ChainTiers{10, 5, 0}, 1000);
  CHECK(d.onboard_s == doctest::Approx(0.01 + 0.05).epsilon(1e-12));
  CHECK(d.bytes_per_s == doctest::Approx(15e6 / 0.06).epsilon(1e-12));
  CHECK(d.choice == OnboardChoice::kOnboard);
  const OnboardDecision none = policy.choose_chain(ChainTiers{}, 1000);
  CHECK(none.choice == OnboardChoice::kRecompute);
  CHECK(std::string(storage_tier_name(StorageTier::kDisk)) == "disk");
}

TEST_CASE("remote_blocks_add_one_round_trip_and_learn_bandwidth_apart_from_it") {
  OnboardPolicyOptions o = round_options();
  o.remote_bytes_per_s = 5e8;
  o.remote_round_trip_s = 0.002;
  OnboardPolicy policy(o);
  // 4 host blocks (4 ms) then 10 remote blocks (20 ms) and one 2 ms round trip.
  const OnboardDecision d = policy.choose_chain(ChainTiers{4, 0, 10}, 224);
  CHECK(d.onboard_s == doctest::Approx(0.004 + 0.020 + 0.002).epsilon(1e-12));
  CHECK(d.choice == OnboardChoice::kOnboard);
  // 1 remote block (2 ms) and a round trip (2 ms) against 3 tokens (3 ms): recompute.
  CHECK(policy.choose(1, StorageTier::kRemote, 3).choice == OnboardChoice::kRecompute);
  // A 10 MB transfer in 12 ms with a 2 ms round trip: 1e9 B/s sample, blended 0.5.
  policy.observe_onboard(StorageTier::kRemote, 10000000, 0.012);
  CHECK(policy.bytes_per_s(StorageTier::kRemote) == doctest::Approx(7.5e8).epsilon(1e-12));
  CHECK(policy.bytes_per_s(StorageTier::kDisk) == 1e8);
  policy.observe_remote_round_trip(0.004);
  CHECK(policy.remote_round_trip_s() == doctest::Approx(0.003).epsilon(1e-12));
  CHECK(std::string(storage_tier_name(StorageTier::kRemote)) == "remote");
}
