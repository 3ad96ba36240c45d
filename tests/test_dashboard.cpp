// Unit tests of the dashboard's data structures: the prefix tracker (keys,
// shared-prefix shrinking, hit counting, LRU bound, ordering) and the metrics
// history ring buffer (deltas, bound, ordering, TTFT percentiles).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

#include "daemon/monitoring/dashboard.h"
#include "daemon/monitoring/dashboard_assets.h"
#include "daemon/monitoring/metrics_history.h"
#include "daemon/monitoring/prefix_tracker.h"

using namespace prefixd;

namespace {

// n tokens: base, base+1, ...
std::vector<int32_t> seq(int32_t base, size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), base);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PrefixUse hit_on(const char* tier, int32_t n) {
  PrefixUse u;
  u.cached_tokens = n;
  if (std::string(tier) == "device") u.device_tokens = n;
  if (std::string(tier) == "host") u.host_tokens = n;
  if (std::string(tier) == "disk") u.disk_tokens = n;
  return u;
}

uint64_t id_of(const std::vector<int32_t>& prompt, const std::string& salt = "") {
  return PrefixTracker::prefix_id(std::span<const int32_t>(prompt).first(16), salt);
}

}  // namespace

TEST_CASE("prefix tracker: prompts shorter than one block are not tracked") {
  PrefixTracker t(16, 8, 4096);
  t.record(seq(1, 15), "", PrefixUse{}, 1000);
  CHECK(t.size() == 0);
  CHECK(t.hottest(10).empty());
}

TEST_CASE("prefix tracker: the entry keeps the block-aligned prefix all its requests shared") {
  PrefixTracker t(16, 8, 4096);
  const std::vector<int32_t> system = seq(100, 40);  // 2.5 blocks of system prompt
  const auto q1 = concat(system, seq(1000, 30));
  const auto q2 = concat(system, seq(2000, 30));

  t.record(q1, "", PrefixUse{}, 1000);
  auto e = t.find(id_of(q1));
  REQUIRE(e.has_value());
  CHECK(e->tokens.size() == 64);  // 70 tokens -> 4 full blocks
  CHECK(e->tokens == std::vector<int32_t>(q1.begin(), q1.begin() + 64));
  CHECK(e->requests == 1);
  CHECK(e->hits == 0);
  CHECK(e->last_hit_tier.empty());
  CHECK(e->first_seen_ms == 1000);

  t.record(q2, "", hit_on("device", 32), 2000);
  e = t.find(id_of(q1));
  REQUIRE(e.has_value());
  CHECK(t.size() == 1);
  CHECK(e->tokens == std::vector<int32_t>(system.begin(), system.begin() + 32));  // 40 -> 2 blocks
  CHECK(e->requests == 2);
  CHECK(e->hits == 1);
  CHECK(e->cached_tokens == 32);
  CHECK(e->last_hit_tier == "device");
  CHECK(e->last_use_ms == 2000);
  CHECK(e->first_seen_ms == 1000);

  t.record(q1, "", hit_on("host", 16), 3000);
  e = t.find(id_of(q1));
  CHECK(e->tokens.size() == 32);  // never grows back
  CHECK(e->hits == 2);
  CHECK(e->cached_tokens == 48);
  CHECK(e->last_hit_tier == "host");
  CHECK(e->last_use_ms == 3000);
}

TEST_CASE("prefix tracker: a different cache salt is a different prefix") {
  PrefixTracker t(16, 8, 4096);
  const auto p = seq(5, 32);
  t.record(p, "tenant-a", PrefixUse{}, 1);
  t.record(p, "tenant-b", hit_on("disk", 16), 2);
  CHECK(t.size() == 2);
  CHECK(id_of(p, "tenant-a") != id_of(p, "tenant-b"));
  auto a = t.find(id_of(p, "tenant-a"));
  auto b = t.find(id_of(p, "tenant-b"));
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK(a->cache_salt == "tenant-a");
  CHECK(a->hits == 0);
  CHECK(b->hits == 1);
  CHECK(b->last_hit_tier == "disk");
}

TEST_CASE("prefix tracker: tokens per entry are capped at whole blocks") {
  PrefixTracker t(16, 8, 40);  // 40 -> 32 tokens kept
  const auto p = seq(1, 100);
  t.record(p, "", PrefixUse{}, 1);
  auto e = t.find(id_of(p));
  REQUIRE(e.has_value());
  CHECK(e->tokens == seq(1, 32));
}

TEST_CASE("prefix tracker: bounded size drops the least recently used unpinned entry") {
  PrefixTracker t(16, 3, 4096);
  const auto a = seq(0, 16), b = seq(100, 16), c = seq(200, 16), d = seq(300, 16), e = seq(400, 16);
  t.record(a, "", PrefixUse{}, 10);
  t.record(b, "", PrefixUse{}, 20);
  t.record(c, "", PrefixUse{}, 30);
  t.record(a, "", PrefixUse{}, 40);  // a is now the most recent
  CHECK(t.size() == 3);
  t.record(d, "", PrefixUse{}, 50);  // drops b (last use 20)
  CHECK(t.size() == 3);
  CHECK_FALSE(t.find(id_of(b)).has_value());
  CHECK(t.find(id_of(a)).has_value());
  CHECK(t.find(id_of(c)).has_value());
  CHECK(t.find(id_of(d)).has_value());

  CHECK(t.set_pinned(id_of(c), true));  // c is the oldest now, but pinned
  t.record(e, "", PrefixUse{}, 60);     // drops a (40), not c (30)
  CHECK(t.size() == 3);
  CHECK(t.find(id_of(c)).has_value());
  CHECK(t.find(id_of(c))->pinned);
  CHECK_FALSE(t.find(id_of(a)).has_value());
  CHECK(t.find(id_of(e)).has_value());
  CHECK_FALSE(t.set_pinned(id_of(b), true));  // not tracked any more
}

TEST_CASE(
    "prefix tracker: hottest orders by hits, then requests, then recency, and honours the limit") {
  PrefixTracker t(16, 16, 4096);
  const auto a = seq(0, 16), b = seq(100, 16), c = seq(200, 16), d = seq(300, 16);
  // a: 1 request, 1 hit; b: 3 requests, 2 hits; c: 3 requests, 2 hits, used later; d: 4 requests, 0
  // hits.
  t.record(a, "", hit_on("device", 16), 5);
  for (int i = 0; i < 3; ++i) t.record(b, "", i == 0 ? PrefixUse{} : hit_on("device", 16), 10 + i);
  for (int i = 0; i < 3; ++i) t.record(c, "", i == 0 ? PrefixUse{} : hit_on("device", 16), 20 + i);
  for (int i = 0; i < 4; ++i) t.record(d, "", PrefixUse{}, 30 + i);
  auto hot = t.hottest(10);
  REQUIRE(hot.size() == 4);
  CHECK(hot[0].id == id_of(c));
  CHECK(hot[1].id == id_of(b));
  CHECK(hot[2].id == id_of(a));
  CHECK(hot[3].id == id_of(d));
  CHECK(hot[0].hits == 2);
  CHECK(hot[0].requests == 3);
  CHECK(hot[3].hits == 0);
  CHECK(hot[3].requests == 4);
  auto top2 = t.hottest(2);
  REQUIRE(top2.size() == 2);
  CHECK(top2[0].id == id_of(c));
  CHECK(top2[1].id == id_of(b));
}

TEST_CASE("prefix tracker: pins, unpins and prefetches are recorded without counting requests") {
  PrefixTracker t(16, 8, 4096);
  const auto prompt = seq(100, 40);
  t.record_cache_call(prompt, "", CacheCall::kPrefetch, 1000);
  t.record_cache_call(prompt, "", CacheCall::kPrefetch, 1500);
  t.record_cache_call(prompt, "", CacheCall::kPin, 2000);
  std::optional<PrefixEntry> e = t.find(id_of(prompt));
  REQUIRE(e);
  CHECK(e->requests == 0);
  CHECK(e->prefetches == 2);
  CHECK(e->pinned);
  CHECK(e->tokens.size() == 32);
  CHECK(e->first_seen_ms == 1000);
  CHECK(e->last_use_ms == 2000);
  t.record(concat(seq(100, 20), seq(5000, 30)), "", hit_on("device", 16), 3000);
  e = t.find(id_of(prompt));
  CHECK(e->requests == 1);
  CHECK(e->tokens.size() == 16);  // shrunk to what the request shared
  t.record_cache_call(prompt, "", CacheCall::kUnpin, 4000);
  CHECK_FALSE(t.find(id_of(prompt))->pinned);
  t.record_cache_call(seq(1, 15), "", CacheCall::kPin, 5000);  // shorter than a block
  CHECK(t.size() == 1);
}

TEST_CASE("prefix tracker: ids print as 16 hex digits and parse back") {
  const uint64_t id = id_of(seq(7, 16));
  const std::string hex = PrefixTracker::id_hex(id);
  CHECK(hex.size() == 16);
  CHECK(PrefixTracker::parse_id_hex(hex) == id);
  CHECK(PrefixTracker::id_hex(0x1f) == "000000000000001f");
  CHECK(PrefixTracker::parse_id_hex("1F") == 0x1fu);
  CHECK_FALSE(PrefixTracker::parse_id_hex("").has_value());
  CHECK_FALSE(PrefixTracker::parse_id_hex("xyz").has_value());
  CHECK_FALSE(PrefixTracker::parse_id_hex("00000000000000000").has_value());  // 17 digits
}

TEST_CASE("nearest-rank percentiles") {
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  CHECK(nearest_rank_percentile(v, 50) == 10.0);
  CHECK(nearest_rank_percentile(v, 95) == 19.0);
  CHECK(nearest_rank_percentile(v, 100) == 20.0);
  CHECK(nearest_rank_percentile({42.0}, 95) == 42.0);
  CHECK_FALSE(nearest_rank_percentile({}, 50).has_value());
}

TEST_CASE("metrics history: the first sample sets the base, later ones carry deltas and gauges") {
  MetricsHistory h(8, 10000);
  StatsSnapshot c;
  c.prompt_tokens = 100;
  c.device.cached_tokens = 40;
  c.running = 2;
  c.device.used_bytes = 4096;
  HistorySample s0 = h.record(1000, c);
  CHECK(s0.interval_ms == 0);
  CHECK(s0.delta.prompt_tokens == 0);
  CHECK(s0.delta.device.cached_tokens == 0);
  CHECK(s0.delta.running == 2);
  CHECK(s0.delta.device.used_bytes == 4096);

  c.prompt_tokens = 250;
  c.device.cached_tokens = 100;
  c.host.cached_tokens = 30;
  c.device.evictions = 3;
  c.running = 1;
  c.waiting = 4;
  HistorySample s1 = h.record(2000, c);
  CHECK(s1.interval_ms == 1000);
  CHECK(s1.delta.prompt_tokens == 150);
  CHECK(s1.delta.device.cached_tokens == 60);
  CHECK(s1.delta.host.cached_tokens == 30);
  CHECK(s1.delta.device.evictions == 3);
  CHECK(s1.delta.running == 1);
  CHECK(s1.delta.waiting == 4);

  c.prompt_tokens = 10;  // a counter that went backwards (never expected) reads as 0
  HistorySample s2 = h.record(3000, c);
  CHECK(s2.delta.prompt_tokens == 0);
  CHECK(h.last_stats()->prompt_tokens == 10);
}

TEST_CASE("metrics history: bounded ring keeps the newest samples, oldest first") {
  MetricsHistory h(3, 10000);
  StatsSnapshot c;
  for (int i = 1; i <= 5; ++i) {
    c.prompt_tokens = i * 10;
    h.record(i * 1000, c);
  }
  CHECK(h.size() == 3);
  CHECK(h.capacity() == 3);
  auto all = h.since(0);
  REQUIRE(all.size() == 3);
  CHECK(all[0].t_ms == 3000);
  CHECK(all[1].t_ms == 4000);
  CHECK(all[2].t_ms == 5000);
  CHECK(all[2].delta.prompt_tokens == 10);
  auto newer = h.since(4000);
  REQUIRE(newer.size() == 1);
  CHECK(newer[0].t_ms == 5000);
  CHECK(h.since(5000).empty());
  CHECK(h.latest()->t_ms == 5000);
}

TEST_CASE(
    "metrics history: TTFT percentiles by hit and miss over the window, requests per interval") {
  MetricsHistory h(16, 10000);
  StatsSnapshot c;
  h.record(1000, c);
  for (int i = 1; i <= 20; ++i) h.observe_request(1500, i, /*hit=*/true);
  h.observe_request(1600, 300, /*hit=*/false);
  h.observe_request(1700, 500, /*hit=*/false);
  HistorySample s = h.record(2000, c);
  CHECK(s.requests_hit == 20);
  CHECK(s.requests_miss == 2);
  CHECK(s.ttft_hit_p50_ms == 10.0);
  CHECK(s.ttft_hit_p95_ms == 19.0);
  CHECK(s.ttft_miss_p50_ms == 300.0);
  CHECK(s.ttft_miss_p95_ms == 500.0);
  CHECK(h.requests_hit_total() == 20);
  CHECK(h.requests_miss_total() == 2);

  // Next interval: no new requests, the window still holds the old ones.
  HistorySample s2 = h.record(3000, c);
  CHECK(s2.requests_hit == 0);
  CHECK(s2.requests_miss == 0);
  CHECK(s2.ttft_hit_p50_ms == 10.0);

  // 10 s after them they have left the window.
  HistorySample s3 = h.record(11700, c);
  CHECK_FALSE(s3.ttft_hit_p50_ms.has_value());
  CHECK_FALSE(s3.ttft_miss_p95_ms.has_value());
}

TEST_CASE("history sample JSON: hit ratio by tier from token deltas, null without prompt tokens") {
  HistorySample s;
  s.t_ms = 5000;
  s.interval_ms = 1000;
  CHECK(history_sample_json(s)["hit_ratio"].is_null());
  s.delta.prompt_tokens = 200;
  s.delta.device.cached_tokens = 100;
  s.delta.host.cached_tokens = 50;
  s.delta.disk.cached_tokens = 10;
  s.ttft_hit_p50_ms = 12.5;
  auto j = history_sample_json(s);
  CHECK(j["hit_ratio"]["device"].get<double>() == doctest::Approx(0.5));
  CHECK(j["hit_ratio"]["host"].get<double>() == doctest::Approx(0.25));
  CHECK(j["hit_ratio"]["disk"].get<double>() == doctest::Approx(0.05));
  CHECK(j["hit_ratio"]["miss"].get<double>() == doctest::Approx(0.2));
  CHECK(j["ttft_ms"]["hit_p50"].get<double>() == 12.5);
  CHECK(j["ttft_ms"]["miss_p50"].is_null());
}

TEST_CASE("the embedded page inlines its script and styles") {
  const std::string& html = dashboard_page_html();
  CHECK(html.find("<!doctype html>") == 0);
  CHECK(html.find("/*@DASHBOARD_JS@*/") == std::string::npos);
  CHECK(html.find("/*@DASHBOARD_CSS@*/") == std::string::npos);
  CHECK(html.find("/v1/cache/history") != std::string::npos);
  CHECK(html.find("prefix-table") != std::string::npos);
  if (dashboard_has_charts()) CHECK(html.find("uPlot") != std::string::npos);
}
