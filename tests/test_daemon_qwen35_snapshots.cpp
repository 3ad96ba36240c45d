// qwen35 (Gated DeltaNet hybrid) prefix reuse through device state snapshots
// (engine/state_snapshots.h), through the real daemon: a ~700-token prefix
// computed cold leaves snapshots at every 8th block and at the last block
// boundary before the prompt's end; the same prefix with new suffixes resumes from the longest
// matched prefix that ends at one, and answers exactly what the uncached
// prompt answers (ids and logprobs, bit for bit); the hits are counted in
// /metrics and cached_tokens. A prompt shorter than one block still runs.
// Without --max-concurrent and --state-snapshots the state slots are sized
// from the pool (daemon/state_budget.h). A conversation's next turn, which
// repeats the answer, resumes from the snapshot at the answer's last block
// boundary.
// (The path without snapshots, --state-snapshots 0: test_daemon_qwen35.)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/greedy_answers.h"
#include "tests/qwen35_snapshot_daemon.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

double metric_now(httplib::Client& c, const std::string& sample) {
  auto r = c.Get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return metric(r->body, sample);
}

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("qwen35: a cached prefix resumes from its state snapshot and answers as uncached, bit for bit") {
  auto d = start_or_fail({"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "2",
                          "--block-size", "16", "--kv-dtype", "f32", "--snapshot-interval-blocks", "8"});
  auto c = d->client();
  const std::vector<int32_t> prefix = tokens(1, 680, true);  // 42 full blocks and 8 tokens
  const std::vector<int32_t> p1 = joined(prefix, tokens(5, 40, false));  // 720 tokens: 45 blocks
  const std::vector<int32_t> p2 = joined(prefix, tokens(9, 30, false));  // 710 tokens
  REQUIRE(p1[680] != p2[680]);

  const Answer a1 = ask(*c, p1);
  CHECK(a1.prefix_cache["cached_tokens"] == 0);
  CHECK(metric_now(*c, "prefixd_state_snapshot_hits_total") == 0);
  // Snapshots at blocks 8, 16, 24, 32, 40, 44 (the last boundary before its
  // end) and 45 (its end: where a next turn repeating it would resume).
  CHECK(metric_now(*c, "prefixd_state_snapshots_stored") == 7);

  // p2 matches p1's 42 full blocks; the longest that ends at a snapshot is 40.
  const Answer a2 = ask(*c, p2);
  CHECK(a2.prefix_cache["cached_tokens"] == 640);
  // p1 again: 44 of its 45 blocks (its last token is always computed).
  const Answer a1b = ask(*c, p1);
  CHECK(a1b.prefix_cache["cached_tokens"] == 704);
  CHECK(a1b.ids == a1.ids);
  CHECK(a1b.logprobs == a1.logprobs);
  CHECK(metric_now(*c, "prefixd_state_snapshot_hits_total") == 2);
  CHECK(metric_now(*c, "prefixd_cached_tokens_total{tier=\"device\"}") == 640 + 704);
  CHECK(metric_now(*c, "prefixd_state_snapshot_bytes_total{direction=\"restored\"}") > 0);

  // The uncached answer to p2: the pool emptied, nothing to resume.
  REQUIRE(c->Delete("/v1/cache")->status == 200);
  const Answer a2_cold = ask(*c, p2);
  CHECK(a2_cold.prefix_cache["cached_tokens"] == 0);
  CHECK(a2.ids == a2_cold.ids);
  CHECK(a2.logprobs == a2_cold.logprobs);
  // ... and p2's own last full block (44) now has a snapshot: p2 again hits it.
  const Answer a2b = ask(*c, p2);
  CHECK(a2b.prefix_cache["cached_tokens"] == 704);
  CHECK(a2b.ids == a2_cold.ids);
  CHECK(a2b.logprobs == a2_cold.logprobs);

  // Shorter than one block: no snapshot, no hit, no error; the same twice.
  const std::vector<int32_t> tiny = tokens(3, 10, true);
  const Answer t1 = ask(*c, tiny);
  const Answer t2 = ask(*c, tiny);
  CHECK(t1.prefix_cache["cached_tokens"] == 0);
  CHECK(t2.prefix_cache["cached_tokens"] == 0);
  CHECK(t1.ids == t2.ids);
  CHECK(t1.logprobs == t2.logprobs);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35: a snapshot evicted from the device is restored from the host tier, bit for bit") {
  // One device snapshot slot: the prompt's earlier snapshots leave the
  // device as later ones come, but went to the host tier when taken.
  TempDir dir;
  auto d = start_or_fail(qwen35_one_snapshot_slot_args(dir.path + "/disk"));
  auto c = d->client();
  const std::vector<int32_t> prefix = tokens(1, 680, true);
  const std::vector<int32_t> p1 = joined(prefix, tokens(5, 40, false));
  const std::vector<int32_t> p2 = joined(prefix, tokens(9, 30, false));
  const Answer a1 = ask(*c, p1);
  CHECK(a1.prefix_cache["cached_tokens"] == 0);
  CHECK(metric_now(*c, "prefixd_state_snapshots_stored") == 1);
  // The six prompt snapshots when taken, the one at its end (45) when it finished.
  CHECK(metric_now(*c, "prefixd_state_snapshots_offloaded_total") == 7);
  const Answer a2 = ask(*c, p2);  // its snapshot at block 40 is in the host tier only
  CHECK(a2.prefix_cache["cached_tokens"] == 640);
  CHECK(metric_now(*c, "prefixd_state_snapshot_tier_hits_total") == 1);
  CHECK(metric_now(*c, "prefixd_state_snapshot_hits_total") == 1);
  REQUIRE(c->Delete("/v1/cache")->status == 200);
  const Answer a2_cold = ask(*c, p2);
  CHECK(a2_cold.prefix_cache["cached_tokens"] == 0);
  CHECK(a2.ids == a2_cold.ids);
  CHECK(a2.logprobs == a2_cold.logprobs);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35: without --max-concurrent and --state-snapshots, the state slots fit half of the pool") {
  // rand-qwen35's slot is 58368 bytes: half of a 1 MiB pool holds 8, so 2
  // run sequences (a third) and 6 hold snapshots (state_budget.h).
  auto d = start_or_fail({"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "1",
                          "--block-size", "16", "--kv-dtype", "f32", "--kv-pool-mib", "1"});
  auto c = d->client();
  CHECK(metric_now(*c, "prefixd_state_snapshot_slots") == 6);
  const Answer a = ask(*c, tokens(1, 100, true));
  CHECK(a.ids.size() == 8);
  CHECK(d->stop() == 0);
  // Given, they are kept: 3 running and 2 snapshots.
  d = start_or_fail({"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "1", "--block-size", "16",
                     "--kv-dtype", "f32", "--kv-pool-mib", "1", "--max-concurrent", "3", "--state-snapshots", "2"});
  c = d->client();
  CHECK(metric_now(*c, "prefixd_state_snapshot_slots") == 2);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35: the next turn of a conversation resumes after the previous answer, bit for bit") {
  auto d = start_or_fail({"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "1",
                          "--block-size", "16", "--kv-dtype", "f32"});
  auto c = d->client();
  // 100 prompt tokens and 40 generated: 139 computed (the last generated
  // token is sampled, not computed), so snapshots at blocks 6 (the prompt's
  // last), 7 and 8 (generated; 8 replaces 7).
  const std::vector<int32_t> turn1 = tokens(1, 100, true);
  const Answer a1 = ask(*c, turn1, 40);
  REQUIRE(a1.ids.size() == 40);
  CHECK(metric_now(*c, "prefixd_state_snapshots_stored") == 2);
  const std::vector<int32_t> turn2 = joined(joined(turn1, a1.ids), tokens(9, 20, false));  // 160 tokens
  const Answer a2 = ask(*c, turn2, 8);
  CHECK(a2.prefix_cache["cached_tokens"] == 128);
  REQUIRE(c->Delete("/v1/cache")->status == 200);
  const Answer a2_cold = ask(*c, turn2, 8);
  CHECK(a2_cold.prefix_cache["cached_tokens"] == 0);
  CHECK(a2.ids == a2_cold.ids);
  CHECK(a2.logprobs == a2_cold.logprobs);
  CHECK(d->stop() == 0);
}
