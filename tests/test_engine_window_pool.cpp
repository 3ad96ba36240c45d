// The window space of a sliding-window model's pool through the engine
// (rand-gemma3-bf16: window 64 on 6 of its 7 layers): the same budget caches
// more tokens than one space for every layer, and answers equal those of an
// engine without a window space whatever the window parts evicted (hits
// shortened to the parts present, duplicates given their parts back), with
// the block and window invariants checked after every step.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "storage/tier_manager.h"
#include "tests/cpu_isa_under_test.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

std::string model_path() { return shared_path("models/rand-gemma3-bf16.gguf"); }

// Token ids in [3, 1003) (the model's vocabulary is 1024), BOS first.
std::vector<int32_t> tokens(int seed, int32_t n) {
  std::vector<int32_t> t{1};
  for (int32_t i = 1; i < n; ++i) t.push_back(3 + (seed * 7919 + i * 613 + (i * i) % 11) % 1000);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// F32 KV, 16-token blocks, 64-token passes; `window_blocks` window blocks
// when window_share is 0.5 (and the same budget with window_share 0).
EngineOptions options(int32_t window_blocks, double window_share) {
  EngineOptions o = f32_engine_options();
  o.max_batch_tokens = 64;
  const KvGeometry g = o.pool_geometry(model_config_of(model_path()), /*window_group=*/true);
  o.kv_pool_bytes = 2 * static_cast<size_t>(window_blocks) * g.window_block_bytes();
  o.window_share = window_share;
  o.check_invariants_each_step = true;
  return o;
}

}  // namespace

TEST_CASE("the window space: the pool geometry and the smallest window space") {
  const ModelConfig c = model_config_of(model_path());
  REQUIRE(c.sliding_window == 64);
  const EngineOptions o = options(16, 0.5);
  const KvGeometry g = o.pool_geometry(c, true);
  CHECK(g.n_window_layers() == 6);
  CHECK(g.n_window_blocks == 16);
  CHECK(g.window_block_bytes() == 6 * g.global_block_bytes());
  CHECK(g.n_blocks == 16 * 6);  // the other half of the budget, global layers only
  CHECK(g.block_bytes() == g.global_block_bytes() + g.window_block_bytes());  // records: every layer
  // Without backend support, or at share 0: one space, as for any model.
  CHECK_FALSE(o.pool_geometry(c, false).has_window_group());
  CHECK_FALSE(options(16, 0).pool_geometry(c, true).has_window_group());
  // A window space smaller than one sequence's needs is refused, named.
  CHECK(o.min_window_blocks(c) == (63 + 64) / 16 + 5);
  const Status s = options(o.min_window_blocks(c) - 1, 0.5).validate(c, true);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("window blocks") != std::string::npos);
  CHECK(options(o.min_window_blocks(c), 0.5).validate(c, true).ok());
  EngineOptions bad = o;
  bad.window_share = 0.99;
  CHECK_FALSE(bad.validate(c, true).ok());
}

TEST_CASE("the same budget serves and caches a long prompt with a window space, not without") {
  const std::vector<int32_t> prompt = tokens(1, 1000);  // 62 full blocks
  EngineOptions ref_opts = f32_engine_options();
  ref_opts.window_share = 0;
  EngineUnderTest reference(model_path(), ref_opts);
  EngineUnderTest one_space(model_path(), options(16, 0));
  EngineUnderTest windowed(model_path(), options(16, 0.5));
  Request r = greedy_request(prompt, 2);
  r.return_logits = true;
  const Collected want = reference.run(r);
  const Collected a = one_space.run(r);
  const Collected b = windowed.run(r);
  REQUIRE(want.finish == FinishReason::kLength);
  // One space: 7/7 of a block per 16 tokens, 16 * 12 / 7 = 27 blocks in
  // all, short of the prompt's 63.
  CHECK(a.finish == FinishReason::kError);
  CHECK(a.error.find("more KV blocks than the pool holds") != std::string::npos);
  REQUIRE(b.finish == FinishReason::kLength);
  CHECK(b.ids == want.ids);
  CHECK(b.logits == want.logits);
  const EngineStats sa = one_space.engine->stats();
  const EngineStats sb = windowed.engine->stats();
  // The same budget (one space rounds down to whole 7-layer blocks).
  const int64_t budget = static_cast<int64_t>(options(16, 0).kv_pool_bytes);
  CHECK(sb.pool_capacity_bytes == budget);
  CHECK(sa.pool_capacity_bytes == 27 * 7 * budget / (16 * 12));
  CHECK(sa.pool_blocks_total == 27);
  CHECK(sa.pool_window_blocks_total == 0);
  CHECK(sb.pool_window_blocks_total == 16);
  // Windowed: every block's global layers, and the last window's parts.
  CHECK(windowed.engine->lookup(prompt, "").device_tokens == 62 * 16);
  CHECK(sb.pool_blocks_cached == 62);
  CHECK(sb.pool_window_blocks_referenced_or_pinned == 0);
  // 15 usable window blocks: the last, partial block's part was freed (never
  // published); the other 14 hold the newest published blocks' parts.
  CHECK(sb.pool_window_blocks_cached == 14);
  CHECK(sb.pool_window_evictions > 0);
  // A new suffix after the whole prefix: resumed from the pool.
  Request again = greedy_request(concat(prompt, tokens(9, 20)), 2);
  again.return_logits = true;
  const Collected c = windowed.run(again);
  CHECK(c.usage.device_tokens == 62 * 16);
  reference.engine->clear_cache();
  const Collected want_c = reference.run(again);
  CHECK(c.ids == want_c.ids);
  CHECK(c.logits == want_c.logits);
}

TEST_CASE("answers equal an engine without a window space while window parts come and go") {
  const std::vector<int32_t> prefix = tokens(2, 300);
  const std::vector<int32_t> whole = tokens(2, 304);  // 19 blocks: the last token is recomputed
  std::vector<std::vector<int32_t>> prompts = {
      concat(prefix, tokens(3, 40)), concat(prefix, tokens(4, 9)), tokens(5, 400), tokens(6, 350),
      concat(prefix, tokens(7, 30)), whole, whole, concat(prefix, tokens(3, 40)), tokens(5, 400)};
  EngineOptions ref_opts = f32_engine_options();
  ref_opts.window_share = 0;
  EngineUnderTest reference(model_path(), ref_opts);
  EngineUnderTest windowed(model_path(), options(14, 0.5));
  int32_t n_cached = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    Request r = greedy_request(prompts[i], 6);
    r.return_logits = true;
    reference.engine->clear_cache();
    const Collected want = reference.run(r);
    const Collected got = windowed.run(r);
    REQUIRE(got.finish == FinishReason::kLength);
    CHECK(got.ids == want.ids);
    CHECK(got.logits == want.logits);
    CHECK(got.usage.cached_tokens + got.usage.prefill_tokens == static_cast<int32_t>(prompts[i].size()));
    n_cached += got.usage.cached_tokens;
  }
  const EngineStats s = windowed.engine->stats();
  CHECK(n_cached > 0);
  CHECK(s.pool_window_evictions > 0);
  CHECK(s.pool_window_blocks_referenced_or_pinned == 0);
  CHECK(s.pool_blocks_referenced == 0);
}

TEST_CASE("evict-only tiers get a block whose window part goes first, whole, and onboard it exactly") {
  TierManagerOptions to;
  to.n_io_threads = 1;
  to.model_fingerprint = Hash128{0x1234, 0x5678};
  to.geometry = f32_engine_options().record_geometry(model_config_of(model_path()));
  to.host_capacity_bytes = 256ull << 20;
  to.write_policy = WritePolicy::kEvictOnly;
  auto tm = TierManager::create(to);
  REQUIRE_MESSAGE(tm.ok(), tm.message());
  std::unique_ptr<TierManager> tiers = std::move(tm).value();
  EngineOptions o = options(14, 0.5);
  o.model_fingerprint = tiers->model_fingerprint();
  o.deployment_secret = tiers->deployment_secret();
  o.onboard_mode = EngineOptions::OnboardMode::kAlways;
  EngineUnderTest windowed(model_path(), o, tiers.get());
  EngineOptions ref_opts = f32_engine_options();
  ref_opts.window_share = 0;
  EngineUnderTest reference(model_path(), ref_opts);
  const std::vector<int32_t> a = concat(tokens(11, 300), tokens(12, 20));
  const std::vector<int32_t> b = tokens(13, 400);
  Request ra = greedy_request(a, 6);
  ra.return_logits = true;
  const Collected want = reference.run(ra);
  const Collected a1 = windowed.run(ra);
  // Evict-only: nothing goes down on publish, only what the pool evicts: the
  // window parts a long prompt moved past (its 20 blocks need more than the 13
  // usable window blocks), each block sent whole as its part goes.
  const EngineStats s1 = windowed.engine->stats();
  CHECK(s1.pool_window_evictions > 0);
  CHECK(s1.device_evictions == 0);
  CHECK(tiers->stats().offload_host_blocks > 0);
  CHECK(tiers->stats().offload_host_blocks <= static_cast<uint64_t>(s1.pool_window_evictions));
  (void)windowed.run(greedy_request(b, 6));          // passes over its window parts
  CHECK(windowed.engine->stats().pool_window_evictions > 0);
  const Collected a2 = windowed.run(ra);
  CHECK(a2.usage.cached_tokens == a2.usage.device_tokens + a2.usage.host_tokens);
  CHECK(a2.usage.prefill_tokens == static_cast<int32_t>(a.size()) - a2.usage.cached_tokens);
  CHECK(a1.ids == want.ids);
  CHECK(a1.logits == want.logits);
  CHECK(a2.ids == want.ids);
  CHECK(a2.logits == want.logits);
}

// PREFIXD_CPU_ISA may name a set or a mixed plan (tests/CMakeLists.txt runs both).
int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
