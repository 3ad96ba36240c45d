// Unit tests of the daemon's monitoring: histograms and the Prometheus
// exposition, and the one StatsSnapshot behind /metrics, /v1/cache/stats
// and the dashboard.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "daemon/api/cache_handlers.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/monitoring/metrics.h"
#include "daemon/monitoring/stats_snapshot.h"

using nlohmann::json;
using namespace prefixd;

TEST_CASE("Histogram renders cumulative buckets, sum and count") {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // upper bounds are inclusive
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render("x_seconds", &out);
  CHECK(out ==
        "x_seconds_bucket{le=\"0.1\"} 2\n"
        "x_seconds_bucket{le=\"1\"} 3\n"
        "x_seconds_bucket{le=\"+Inf\"} 4\n"
        "x_seconds_sum 7.65\n"
        "x_seconds_count 4\n");
}

TEST_CASE("Metrics exposition carries counters, tier labels and request outcomes") {
  Metrics m;
  m.count_request(RequestOutcome::kCompleted);
  m.count_request(RequestOutcome::kCompleted);
  m.count_request(RequestOutcome::kCancelled);
  StatsSnapshot s;
  s.prompt_tokens = 100;
  s.device.cached_tokens = 32;
  s.host.cached_tokens = 16;
  s.generated_tokens = 9;
  s.device.capacity_bytes = 4096;
  s.running = 2;
  const BuildInfo build;
  const std::string text = m.render(s, build);
  CHECK(
      text.find("# TYPE prefixd_prompt_tokens_total counter\nprefixd_prompt_tokens_total 100\n") !=
      std::string::npos);
  CHECK(text.find("prefixd_cached_tokens_total{tier=\"device\"} 32\n") != std::string::npos);
  CHECK(text.find("prefixd_cached_tokens_total{tier=\"host\"} 16\n") != std::string::npos);
  CHECK(text.find("prefixd_requests_total{status=\"completed\"} 2\n") != std::string::npos);
  CHECK(text.find("prefixd_requests_total{status=\"cancelled\"} 1\n") != std::string::npos);
  CHECK(text.find("prefixd_requests_running 2\n") != std::string::npos);
  CHECK(text.find("# TYPE prefixd_ttft_seconds histogram\n") != std::string::npos);
  CHECK(text.find("prefixd_evictions_total{tier=\"host\"}") == std::string::npos);  // no host tier
  s.has_host_tier = true;
  s.host.evictions = 3;
  CHECK(m.render(s, build).find("prefixd_evictions_total{tier=\"host\"} 3\n") != std::string::npos);
  CHECK(m.requests(RequestOutcome::kCompleted) == 2);
}

TEST_CASE("Metrics exposition carries prefixd_build_info (backend, CPU instruction set)") {
  Metrics m;
  StatsSnapshot s;
  BuildInfo build;
  build.backend_name = "cpu";
  build.cpu_isa_name = "avx2";
  CHECK(m.render(s, build).find("# TYPE prefixd_build_info gauge\n"
                                "prefixd_build_info{cpu_isa=\"avx2\",backend=\"cpu\"} 1\n") !=
        std::string::npos);
  CHECK(m.render(s, build).find("# HELP prefixd_build_info ") != std::string::npos);
}

TEST_CASE("the backend's attention paths in /metrics: which serves, calls, switches, self-checks") {
  std::string out;
  render_fast_paths(FastPathReport{}, &out);
  CHECK(out.empty());  // the CPU backend reports none
  FastPathReport r;
  r.summary = {{"prefill_attention", "none: cuDNN self-check failed on \"bf16\" q<=128"}};
  r.paths = {{"cudnn_prefill", false, "self-check failed", 12}, {"simple_prefill", true, "", 40}};
  r.self_checks = {{"cudnn_prefill", "a", true, 1e-3, 1.6e-2, ""}, {"cudnn_prefill", "b", false, 0.5, 1.6e-2, "off"}};
  render_fast_paths(r, &out);
  CHECK(out.find("# TYPE prefixd_attention_path_info gauge\n") != std::string::npos);
  CHECK(out.find("prefixd_attention_path_info{family=\"prefill_attention\",path=\"none: cuDNN self-check failed "
                 "on \\\"bf16\\\" q<=128\"} 1\n") != std::string::npos);
  CHECK(out.find("prefixd_attention_calls_total{path=\"cudnn_prefill\"} 12\n") != std::string::npos);
  CHECK(out.find("prefixd_attention_calls_total{path=\"simple_prefill\"} 40\n") != std::string::npos);
  CHECK(out.find("prefixd_fast_path_enabled{path=\"cudnn_prefill\"} 0\n") != std::string::npos);
  CHECK(out.find("prefixd_fast_path_enabled{path=\"simple_prefill\"} 1\n") != std::string::npos);
  CHECK(out.find("prefixd_fast_path_self_checks{result=\"passed\"} 1\n") != std::string::npos);
  CHECK(out.find("prefixd_fast_path_self_checks{result=\"failed\"} 1\n") != std::string::npos);
}

TEST_CASE("one StatsSnapshot feeds /metrics, /v1/cache/stats and the dashboard alike") {
  StatsSnapshot s;
  s.has_host_tier = true;
  s.has_disk_tier = true;
  s.device = TierFigures{4096, 1024, 3, 10, 2, 1, 32, 0, 0, 0};
  s.host = TierFigures{8192, 2048, 5, 4, 6, 7, 16, 9, 900, 8};
  s.disk = TierFigures{16384, 512, 1, 1, 3, 2, 8, 11, 1100, 12};
  s.pool_blocks_pinned = 2;
  s.prompt_tokens = 100;
  s.prefill_tokens = 44;
  s.generated_tokens = 9;
  s.onboard_bytes = 2000;
  s.running = 1;
  s.waiting = 2;
  CHECK(s.cached_tokens() == 56);

  const std::string text = Metrics().render(s, BuildInfo{});
  CHECK(text.find("prefixd_evictions_total{tier=\"host\"} 7\n") != std::string::npos);
  CHECK(text.find("prefixd_offload_blocks_total{tier=\"disk\"} 11\n") != std::string::npos);
  CHECK(text.find("prefixd_onboard_blocks_total{tier=\"host\"} 8\n") != std::string::npos);
  CHECK(text.find("prefixd_tier_used_bytes{tier=\"host\"} 2048\n") != std::string::npos);
  CHECK(text.find("prefixd_pool_capacity_bytes 4096\n") != std::string::npos);

  const json stats = cache_stats_json(s, 16);
  CHECK(stats["block_size"] == 16);
  CHECK(stats["tokens_saved"] == 56);
  CHECK(stats["cached_tokens"] == json{{"device", 32}, {"host", 16}, {"disk", 8}, {"remote", 0}});
  CHECK_FALSE(stats["tiers"].contains("remote"));  // only with a remote tier
  CHECK(stats["tiers"]["host"] == json{{"capacity_bytes", 8192},
                                       {"used_bytes", 2048},
                                       {"blocks", 5},
                                       {"hits", 4},
                                       {"misses", 6},
                                       {"evictions", 7}});
  CHECK(stats["tiers"]["device"]["blocks_pinned"] == 2);
  CHECK(stats["requests_waiting"] == 2);

  HistorySample sample;
  sample.delta = s;
  const json row = history_sample_json(sample);
  CHECK(row["evictions"] == json{{"device", 1}, {"host", 7}, {"disk", 2}});
  CHECK(row["occupancy"]["host"] == json{{"used_bytes", 2048}, {"capacity_bytes", 8192}});
  CHECK(row["onboard_blocks"] == 20);
  CHECK(row["offload_blocks"] == 20);
  CHECK(row["offload_bytes"] == 2000);
  CHECK(row["pinned_blocks"] == 2);
}

TEST_CASE("the remote tier's figures in /metrics and /v1/cache/stats, only when it is configured") {
  StatsSnapshot s;
  s.has_host_tier = true;
  s.prompt_tokens = 100;
  s.device.cached_tokens = 16;
  CHECK(Metrics().render(s, BuildInfo{}).find("tier=\"remote\"") == std::string::npos);
  s.has_remote_tier = true;
  s.remote.cached_tokens = 48;
  s.remote.hits = 3;
  s.remote.misses = 2;
  s.remote.offload_blocks = 5;
  s.remote.onboard_blocks = 3;
  s.remote_io.servers = 2;
  s.remote_io.read_bytes = 3000;
  s.remote_io.errors = 4;
  s.remote_io.timeouts = 1;
  s.remote_io.corrupt_records = 2;
  s.remote_io.unauthenticated_records = 1;
  s.remote_io.writes_dropped = 6;
  s.remote_io.servers_in_ring = 1;
  s.remote_io.server_ejections = 7;
  s.remote_io.lookup_hits = 9;
  s.remote_io.lookup_misses = 4;
  s.remote_io.generation = 2;
  s.remote_io.server_states = {
      RemoteServerState{RemoteServer{"10.0.0.1", 11211}, true, 0, "", 0},
      RemoteServerState{RemoteServer{"10.0.0.2", 11211}, false, 1500, "timed out 3 operations in a row", 3}};
  CHECK(s.cached_tokens() == 64);
  const std::string text = Metrics().render(s, BuildInfo{});
  for (const char* line : {"prefixd_cached_tokens_total{tier=\"remote\"} 48\n",
                           "prefixd_onboard_blocks_total{tier=\"remote\"} 3\n",
                           "prefixd_offload_blocks_total{tier=\"remote\"} 5\n",
                           "prefixd_corrupt_records_total{tier=\"remote\"} 2\n",
                           "prefixd_unauthenticated_records_total{tier=\"remote\"} 1\n",
                           "prefixd_tier_hits_total{tier=\"remote\"} 3\n",
                           "prefixd_tier_misses_total{tier=\"remote\"} 2\n",
                           "prefixd_tier_read_bytes_total{tier=\"remote\"} 3000\n",
                           "prefixd_tier_errors_total{tier=\"remote\"} 4\n",
                           "prefixd_tier_timeouts_total{tier=\"remote\"} 1\n",
                           "prefixd_tier_writes_dropped_total{tier=\"remote\"} 6\n",
                           "prefixd_remote_servers 2\n",
                           "prefixd_remote_servers_in_ring 1\n",
                           "prefixd_remote_server_ejections_total 7\n",
                           "prefixd_remote_lookup_blocks_total{result=\"hit\"} 9\n",
                           "prefixd_remote_lookup_blocks_total{result=\"miss\"} 4\n"}) {
    CHECK_MESSAGE(text.find(line) != std::string::npos, line);
  }
  // No disk tier: its corrupt-record sample stays out while the remote one is in.
  CHECK(text.find("prefixd_corrupt_records_total{tier=\"disk\"}") == std::string::npos);
  const json stats = cache_stats_json(s, 16);
  CHECK(stats["cached_tokens"]["remote"] == 48);
  CHECK(stats["tiers"]["remote"]["hits"] == 3);
  CHECK(stats["tiers"]["remote"]["servers"] == 2);
  CHECK(stats["tiers"]["remote"]["unauthenticated_records"] == 1);
  CHECK(stats["tiers"]["remote"]["servers_in_ring"] == 1);
  CHECK(stats["tiers"]["remote"]["server_ejections"] == 7);
  CHECK(stats["tiers"]["remote"]["lookup_hits"] == 9);
  CHECK(stats["tiers"]["remote"]["lookup_misses"] == 4);
  CHECK(stats["tiers"]["remote"]["generation"] == 2);
  CHECK(stats["tiers"]["remote"]["servers_out"] ==
        json::array({json{{"server", "10.0.0.2:11211"},
                          {"reason", "timed out 3 operations in a row"},
                          {"back_in_ms", 1500}}}));
  HistorySample sample;
  sample.delta = s;
  const json row = history_sample_json(sample);
  CHECK(row["hit_ratio"]["remote"].get<double>() == doctest::Approx(0.48));
  CHECK(row["onboard_blocks"] == 3);
}

TEST_CASE("stats_delta: counters become increases (never negative), gauges stay as they are") {
  StatsSnapshot before, now;
  before.prompt_tokens = 100;
  before.host.evictions = 5;
  before.host.used_bytes = 4096;
  before.disk.offload_bytes = 10;
  now.prompt_tokens = 160;
  now.host.evictions = 4;  // went backwards (never expected): reads as 0
  now.host.used_bytes = 1024;
  now.disk.offload_bytes = 30;
  now.running = 3;
  now.has_host_tier = true;
  const StatsSnapshot d = stats_delta(now, before);
  CHECK(d.prompt_tokens == 60);
  CHECK(d.host.evictions == 0);
  CHECK(d.host.used_bytes == 1024);
  CHECK(d.disk.offload_bytes == 20);
  CHECK(d.running == 3);
  CHECK(d.has_host_tier);
}

// A qwen35-like pool: 10 blocks of 16 tokens holding data (4096 bytes each)
// and 3 stored state snapshots of 8192 bytes.
static StatsSnapshot snapshot_model_stats() {
  StatsSnapshot s;
  s.block_size = 16;
  s.pool_blocks_total = 64;
  s.pool_blocks_referenced = 2;
  s.pool_blocks_cached = 8;
  s.device.used_bytes = 10 * 4096;
  s.device.capacity_bytes = 64 * 4096;
  s.snapshot_slots = 4;
  s.snapshots_stored = 3;
  s.snapshot_bytes = 8192;
  s.snapshot_hits = 7;
  s.snapshot_misses = 2;
  s.snapshot_tier_hits = 5;
  return s;
}

TEST_CASE("pool bytes per cached token: block bytes plus stored snapshots over the blocks' tokens") {
  StatsSnapshot s;
  s.block_size = 16;
  CHECK_FALSE(pool_bytes_per_cached_token(s).has_value());  // no block holds data
  const std::string empty = Metrics().render(s, BuildInfo{});
  CHECK(empty.find("prefixd_pool_bytes_per_cached_token") == std::string::npos);

  // A model without snapshots: the bytes of one token's K/V.
  s.pool_blocks_cached = 4;
  s.device.used_bytes = 4 * 4096;
  CHECK(*pool_bytes_per_cached_token(s) == 256.0);
  CHECK(Metrics().render(s, BuildInfo{}).find("# TYPE prefixd_pool_bytes_per_cached_token gauge\n"
                                              "prefixd_pool_bytes_per_cached_token 256\n") !=
        std::string::npos);

  // (10 x 4096 + 3 x 8192) / (10 x 16) = 409.6
  const StatsSnapshot q = snapshot_model_stats();
  CHECK(*pool_bytes_per_cached_token(q) == doctest::Approx(409.6));
  CHECK(Metrics().render(q, BuildInfo{}).find("prefixd_pool_bytes_per_cached_token 409.6\n") !=
        std::string::npos);
}

TEST_CASE("state snapshots in the dashboard's history: counters over the interval, gauges, totals") {
  StatsSnapshot before = snapshot_model_stats();
  StatsSnapshot now = before;
  now.snapshot_hits = 10;
  now.snapshot_misses = 2;
  now.snapshot_tier_hits = 6;
  now.snapshots_stored = 4;
  now.snapshots_taken = 9;
  now.snapshot_bytes_restored = 3 * 8192;
  before.snapshots_taken = 5;
  const StatsSnapshot d = stats_delta(now, before);
  CHECK(d.snapshot_hits == 3);
  CHECK(d.snapshot_misses == 0);
  CHECK(d.snapshot_tier_hits == 1);
  CHECK(d.snapshots_taken == 4);
  CHECK(d.snapshot_bytes_restored == 3 * 8192);
  CHECK(d.snapshots_stored == 4);  // gauges stay
  CHECK(d.snapshot_slots == 4);
  CHECK(d.snapshot_bytes == 8192);

  HistorySample sample;
  sample.delta = d;
  const json row = history_sample_json(sample);
  CHECK(row["snapshots"] ==
        json{{"slots", 4}, {"stored", 4}, {"hits", 3}, {"misses", 0}, {"tier_hits", 1}});
  // (10 x 4096 + 4 x 8192) / 160
  CHECK(row["bytes_per_cached_token"].get<double>() == doctest::Approx(460.8));

  // A model without snapshots: no "snapshots"; bytes per token null while the pool is empty.
  HistorySample plain;
  const json plain_row = history_sample_json(plain);
  CHECK_FALSE(plain_row.contains("snapshots"));
  CHECK(plain_row["bytes_per_cached_token"].is_null());
}
