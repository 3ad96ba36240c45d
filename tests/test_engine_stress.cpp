// Randomized engine test: thousands of submits, cancels, lookups, pins and
// cache clears on a small pool (so blocks are evicted and sequences
// preempted), with the engine checking after every step that ref counts equal
// the live block-table references and that index, LRU and free list agree.
// Every request that is not cancelled must produce the reference output; with
// tiers below the pool, some prompt tokens must really come back from them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "storage/tier_manager.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

// Prompts that share prefixes: 4 "system prompts" of 20..100 tokens, each
// followed by one of 6 questions of 1..40 tokens.
std::vector<std::vector<int32_t>> make_prompts(uint32_t seed) {
  std::mt19937 rng(seed);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(3 + static_cast<int32_t>(rng() % 500));
    return t;
  };
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> system = tokens(20 + static_cast<int>(rng() % 81));
    system.insert(system.begin(), 1);
    for (int q = 0; q < 6; ++q) {
      std::vector<int32_t> p = system;
      std::vector<int32_t> question = tokens(1 + static_cast<int>(rng() % 40));
      p.insert(p.end(), question.begin(), question.end());
      out.push_back(p);
    }
  }
  return out;
}

void run_stress(TierManager* tiers, uint32_t seed, int n_rounds) {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  const std::vector<std::vector<int32_t>> prompts = make_prompts(seed);
  const int32_t n_out = 6;

  // References: one request at a time on a large pool, nothing shared.
  std::vector<std::vector<int32_t>> reference;
  {
    EngineUnderTest e(g.model_file, f32_engine_options());
    for (const auto& p : prompts) {
      e.engine->clear_cache();
      reference.push_back(e.run(greedy_request(p, n_out)).ids);
    }
  }

  // 24 blocks (384 tokens): far less than the working set.
  EngineOptions small = f32_engine_options(f32_block_bytes(g.model_file) * 24);
  small.max_batch_tokens = 64;
  small.max_pinned_blocks = 4;
  small.check_invariants_each_step = true;
  if (tiers != nullptr) {
    small.model_fingerprint = tiers->model_fingerprint();
    small.deployment_secret = tiers->deployment_secret();
    small.onboard_mode = EngineOptions::OnboardMode::kAlways;
  }
  EngineUnderTest e(g.model_file, small, tiers);

  std::mt19937 rng(seed * 7 + 1);
  int64_t n_ops = 0, n_checked = 0, n_cancelled = 0;
  int64_t n_host_tokens = 0, n_disk_tokens = 0;  // onboarded, over the checked requests
  for (int round = 0; round < n_rounds; ++round) {
    struct Live {
      size_t prompt;
      std::shared_ptr<RequestChannel> channel;
      bool cancel;
    };
    std::vector<Live> live;
    const int n_submit = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n_submit; ++i) {
      const size_t p = rng() % prompts.size();
      live.push_back(Live{p, e.engine->submit(greedy_request(prompts[p], n_out)), rng() % 5 == 0});
      ++n_ops;
    }
    switch (rng() % 8) {
      case 0: e.engine->lookup(prompts[rng() % prompts.size()], ""); ++n_ops; break;
      case 1: (void)e.engine->pin(prompts[rng() % prompts.size()], "", true); ++n_ops; break;
      case 2: (void)e.engine->pin(prompts[rng() % prompts.size()], "", false); ++n_ops; break;
      case 3: if (rng() % 4 == 0) { e.engine->clear_cache(); ++n_ops; } break;
      default: break;
    }
    for (Live& l : live) {
      if (l.cancel) {
        l.channel->cancel();
        ++n_ops;
      }
    }
    for (Live& l : live) {
      Collected c = collect(l.channel);
      REQUIRE_MESSAGE(c.error.empty(), c.error);
      if (c.finish == FinishReason::kCancelled) {
        ++n_cancelled;
        continue;
      }
      CHECK(c.finish == FinishReason::kLength);
      CHECK_MESSAGE(c.ids == reference[l.prompt],
                    "prompt " << l.prompt << " (" << prompts[l.prompt].size() << " tokens): cached "
                              << c.usage.cached_tokens << " (device " << c.usage.device_tokens << ", host "
                              << c.usage.host_tokens << ", disk " << c.usage.disk_tokens << "), prefilled "
                              << c.usage.prefill_tokens << ", path " << c.usage.onboard_path);
      CHECK(c.usage.prefill_tokens + c.usage.cached_tokens >= static_cast<int32_t>(prompts[l.prompt].size()));
      n_host_tokens += c.usage.host_tokens;
      n_disk_tokens += c.usage.disk_tokens;
      ++n_checked;
    }
  }
  EngineStats s = e.engine->stats();
  CHECK(s.pool_blocks_referenced == 0);  // no leaks: nothing referenced once all requests ended
  CHECK(s.running == 0);
  CHECK(s.waiting == 0);
  CHECK(s.device_evictions > 0);   // the pool really was too small
  if (tiers != nullptr) {
    // The tiers were exercised: outputs were checked with blocks onboarded from them.
    CHECK(n_host_tokens + n_disk_tokens > 0);
    CHECK(s.cached_tokens_host + s.cached_tokens_disk >= n_host_tokens + n_disk_tokens);
  } else {
    CHECK(n_host_tokens + n_disk_tokens == 0);
  }
  MESSAGE("operations " << n_ops << ", outputs checked " << n_checked << ", cancelled " << n_cancelled
                        << ", evictions " << s.device_evictions << ", preemptions " << s.preemptions
                        << ", cached tokens device " << s.cached_tokens_device << ", host "
                        << s.cached_tokens_host << ", disk " << s.cached_tokens_disk
                        << "; onboarded in checked outputs: host " << n_host_tokens << ", disk "
                        << n_disk_tokens);
}

}  // namespace

TEST_CASE("randomized submits, cancels, pins and clears keep the engine's invariants and outputs") {
  run_stress(nullptr, 11, 300);
}

TEST_CASE("the same with host and disk tiers below a small pool") {
  TempDir dir;
  GoldenModel g = load_golden("stories260K", 1e-3f);
  TierManagerOptions o;
  o.geometry = f32_engine_options().record_geometry(model_config_of(g.model_file));
  o.host_capacity_bytes = f32_block_bytes(g.model_file) * 40;  // small: host evicts to disk too
  DiskTierOptions d;
  d.path = dir.path;
  d.capacity_bytes = 64ull << 20;
  o.disk = d;
  o.write_policy = WritePolicy::kEvictOnly;
  auto tiers = TierManager::create(o);
  REQUIRE_MESSAGE(tiers.ok(), tiers.message());
  run_stress(tiers.value().get(), 23, 300);
}
