// How a request's recurrent state was resumed, and the pool's bytes per
// cached token, through the real daemon: prefix_cache.state_resumed_tokens
// and state_from of a qwen35 answer (cold: 0 and "none"; warm: the
// snapshot's position, from the device or from the host tier), the gauge
// prefixd_pool_bytes_per_cached_token and the dashboard's history (snapshot
// hits, misses, tier hits, slots; bytes per cached token), each checked
// against the figure worked out here from the model file's geometry and the
// daemon's block and snapshot counts. A llama model (stories260K) has the
// gauge too, and nothing about snapshots anywhere.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <thread>

#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
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

ModelConfig config_of(const std::string& path) {
  Result<std::shared_ptr<GgufFile>> f = GgufFile::open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().message());
  Result<ModelConfig> c = load_model_config(**f);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  return *c;
}

std::string metrics_text(httplib::Client& c) {
  auto r = c.Get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

// The text of `sample`'s value in the exposition ("" when absent).
std::string metric_text(const std::string& text, const std::string& sample) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(sample + " ", 0) == 0) return line.substr(sample.size() + 1);
  }
  return "";
}

// How /metrics writes a real-valued gauge.
std::string as_metric(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// The pool's figures now: blocks holding data, their bytes, the block size.
struct PoolNow {
  int64_t blocks = 0;
  int64_t used_bytes = 0;
  int32_t block_size = 0;
};

PoolNow pool_now(httplib::Client& c) {
  const json s = stats(c);
  const json& dev = s["tiers"]["device"];
  return PoolNow{dev["blocks_referenced"].get<int64_t>() + dev["blocks_cached"].get<int64_t>(),
                 dev["used_bytes"].get<int64_t>(), s["block_size"].get<int32_t>()};
}

// Bytes per cached token from the model's geometry (F32 K/V): `blocks`
// blocks of its attention layers' K and V, plus `snapshots` recurrent states.
double expected_bytes_per_token(const ModelConfig& m, int64_t blocks, int64_t snapshots, int32_t block_size) {
  const int64_t block_bytes = 2LL * m.n_kv_layers() * block_size * m.n_kv_heads * m.head_dim * 4;
  const int64_t bytes = blocks * block_bytes + snapshots * m.state_floats() * 4;
  return static_cast<double>(bytes) / static_cast<double>(blocks * block_size);
}

// GET /v1/cache/history once its totals satisfy `done` (the sampler runs
// once a second), or after 15 s as it is then.
json history_when(httplib::Client& c, const std::function<bool(const json&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    HttpAnswer h = get(c, "/v1/cache/history");
    REQUIRE(h.status == 200);
    if (done(h.body["totals"]) || std::chrono::steady_clock::now() > deadline) return h.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The sum of the history samples' snapshots.`field` (increases per interval).
int64_t sum_samples(const json& history, const char* field) {
  int64_t n = 0;
  for (const json& s : history["samples"]) {
    if (s.contains("snapshots")) n += s["snapshots"][field].get<int64_t>();
  }
  return n;
}

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("qwen35 usage: a warm answer says it resumed at its snapshot on the device; the pool's bytes per token") {
  const std::string model = shared_path("models/rand-qwen35-bf16.gguf");
  const ModelConfig m = config_of(model);
  REQUIRE(m.state_floats() > 0);
  auto d = start_or_fail({"--model", model, "--threads", "2", "--block-size", "16", "--kv-dtype", "f32",
                          "--snapshot-interval-blocks", "8"});
  auto c = d->client();
  const std::vector<int32_t> prefix = tokens(1, 680, true);              // 42 full blocks and 8 tokens
  const std::vector<int32_t> p1 = joined(prefix, tokens(5, 40, false));  // 720 tokens: 45 blocks
  const std::vector<int32_t> p2 = joined(prefix, tokens(9, 30, false));  // 710 tokens

  const Answer cold = ask(*c, p1);
  CHECK(cold.prefix_cache["cached_tokens"] == 0);
  CHECK(cold.prefix_cache["state_resumed_tokens"] == 0);
  CHECK(cold.prefix_cache["state_from"] == "none");

  // p2 matches p1's 42 full blocks; the longest that ends at a snapshot is 40.
  const Answer warm = ask(*c, p2);
  CHECK(warm.prefix_cache["cached_tokens"] == 640);
  CHECK(warm.prefix_cache["device_tokens"] == 640);
  CHECK(warm.prefix_cache["state_resumed_tokens"] == 640);
  CHECK(warm.prefix_cache["state_from"] == "device");

  // The gauge: the blocks the pool holds and its stored snapshots, per token.
  const std::string text = metrics_text(*c);
  const int64_t stored = static_cast<int64_t>(metric(text, "prefixd_state_snapshots_stored"));
  const int64_t slots = static_cast<int64_t>(metric(text, "prefixd_state_snapshot_slots"));
  CHECK(metric(text, "prefixd_state_snapshot_size_bytes") == static_cast<double>(m.state_floats() * 4));
  const PoolNow pool = pool_now(*c);
  REQUIRE(pool.block_size == 16);
  REQUIRE(pool.blocks > 0);
  REQUIRE(stored > 0);
  CHECK(pool.used_bytes == pool.blocks * 2LL * m.n_kv_layers() * 16 * m.n_kv_heads * m.head_dim * 4);
  const double expected = expected_bytes_per_token(m, pool.blocks, stored, 16);
  CHECK(metric_text(text, "prefixd_pool_bytes_per_cached_token") == as_metric(expected));

  // The dashboard: the same figure, and the snapshot counters (all time and per interval).
  const json h = history_when(*c, [&](const json& t) {
    return t.contains("snapshots") && t["snapshots"]["hits"] == 1 && t["bytes_per_cached_token"] == expected;
  });
  const json& totals = h["totals"];
  REQUIRE(totals.contains("snapshots"));
  CHECK(totals["snapshots"] == json{{"slots", slots}, {"stored", stored}, {"hits", 1}, {"misses", 0}, {"tier_hits", 0}});
  CHECK(totals["bytes_per_cached_token"].get<double>() == expected);
  CHECK(sum_samples(h, "hits") == 1);
  CHECK(sum_samples(h, "tier_hits") == 0);
  const json& last = h["samples"].back();
  CHECK(last["snapshots"]["slots"] == slots);
  CHECK(last["snapshots"]["stored"] == stored);
  CHECK(last["bytes_per_cached_token"].get<double>() == expected);
  CHECK(d->stop() == 0);
}

TEST_CASE("qwen35 usage: a snapshot restored from the host tier says state_from tiers") {
  // One device snapshot slot: p1's snapshot at block 40 leaves the device as
  // later ones come, but went to the host tier when taken (write-through).
  TempDir dir;
  auto d = start_or_fail(qwen35_one_snapshot_slot_args(dir.path + "/disk"));
  auto c = d->client();
  const std::vector<int32_t> prefix = tokens(1, 680, true);
  const Answer cold = ask(*c, joined(prefix, tokens(5, 40, false)));
  CHECK(cold.prefix_cache["state_resumed_tokens"] == 0);
  CHECK(cold.prefix_cache["state_from"] == "none");
  const Answer warm = ask(*c, joined(prefix, tokens(9, 30, false)));
  CHECK(warm.prefix_cache["cached_tokens"] == 640);
  CHECK(warm.prefix_cache["state_resumed_tokens"] == 640);
  CHECK(warm.prefix_cache["state_from"] == "tiers");
  const json h = history_when(*c, [](const json& t) {
    return t.contains("snapshots") && t["snapshots"]["tier_hits"] == 1;
  });
  REQUIRE(h["totals"].contains("snapshots"));
  CHECK(h["totals"]["snapshots"]["hits"] == 1);
  CHECK(h["totals"]["snapshots"]["tier_hits"] == 1);
  CHECK(h["totals"]["snapshots"]["slots"] == 1);
  CHECK(sum_samples(h, "tier_hits") == 1);

  // Shorter than one block: nothing to resume, nothing to snapshot.
  const Answer tiny = ask(*c, tokens(3, 10, true));
  CHECK(tiny.prefix_cache["state_resumed_tokens"] == 0);
  CHECK(tiny.prefix_cache["state_from"] == "none");
  CHECK(d->stop() == 0);
}

TEST_CASE("llama usage: bytes per cached token are one token's K/V; nothing about state snapshots") {
  const ModelConfig m = config_of(stories_model_path());
  REQUIRE(m.state_floats() == 0);
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  // An empty pool: no figure yet.
  CHECK(metric_text(metrics_text(*c), "prefixd_pool_bytes_per_cached_token").empty());
  const Answer a = ask(*c, tokens(1, 100, true, 200));
  CHECK_FALSE(a.prefix_cache.contains("state_resumed_tokens"));
  CHECK_FALSE(a.prefix_cache.contains("state_from"));
  const Answer b = ask(*c, tokens(1, 100, true, 200));
  CHECK(b.prefix_cache["cached_tokens"].get<int32_t>() > 0);
  CHECK_FALSE(b.prefix_cache.contains("state_from"));

  const std::string text = metrics_text(*c);
  CHECK(text.find("prefixd_state_snapshot") == std::string::npos);
  const PoolNow pool = pool_now(*c);
  REQUIRE(pool.blocks > 0);
  const double expected = expected_bytes_per_token(m, pool.blocks, 0, pool.block_size);
  CHECK(expected == static_cast<double>(2 * m.n_layers * m.n_kv_heads * m.head_dim * 4));
  CHECK(metric_text(text, "prefixd_pool_bytes_per_cached_token") == as_metric(expected));
  const json h = history_when(*c, [&](const json& t) { return t["bytes_per_cached_token"] == expected; });
  CHECK(h["totals"]["bytes_per_cached_token"].get<double>() == expected);
  CHECK_FALSE(h["totals"].contains("snapshots"));
  for (const json& s : h["samples"]) CHECK_FALSE(s.contains("snapshots"));
  CHECK(d->stop() == 0);
}
