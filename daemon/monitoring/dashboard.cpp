// The dashboard: sampler thread, JSON documents of the history and the hot
// prefixes, and the embedded page.
#include "daemon/monitoring/dashboard.h"

#include <chrono>
#include <future>

#include "daemon/monitoring/dashboard_assets.h"
#include "daemon/monitoring/stats_snapshot.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"

namespace prefixd {
namespace {

using nlohmann::json;

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// A model with state snapshots: its slots and those holding one (gauges),
// and the admissions resumed from one (hits; tier_hits of them from the
// tiers) or with cached blocks but none at their boundaries (misses).
json snapshots_json(const StatsSnapshot& s) {
  return json{{"slots", s.snapshot_slots},
              {"stored", s.snapshots_stored},
              {"hits", s.snapshot_hits},
              {"misses", s.snapshot_misses},
              {"tier_hits", s.snapshot_tier_hits}};
}

// The cumulative counters of the history's "totals" (with a remote tier,
// "remote": its servers in the ring and the blocks lookups found there).
json counters_json(const StatsSnapshot& c) {
  json j{
      {"prompt_tokens", c.prompt_tokens},
      {"cached_tokens", cached_tokens_json(c)},
      {"prefill_tokens", c.prefill_tokens},
      {"generated_tokens", c.generated_tokens},
      {"evictions",
       {{"device", c.device.evictions}, {"host", c.host.evictions}, {"disk", c.disk.evictions}}},
      {"onboard_blocks", c.host.onboard_blocks + c.disk.onboard_blocks + c.remote.onboard_blocks},
      {"onboard_bytes", c.onboard_bytes},
      {"offload_blocks", c.host.offload_blocks + c.disk.offload_blocks},
      {"offload_bytes", c.host.offload_bytes + c.disk.offload_bytes},
      {"bytes_per_cached_token", opt_json(pool_bytes_per_cached_token(c))}};
  if (c.snapshot_slots > 0) j["snapshots"] = snapshots_json(c);
  if (c.has_remote_tier) {
    const RemoteFigures& r = c.remote_io;
    j["remote"] = {{"servers", r.servers},
                   {"servers_in_ring", r.servers_in_ring},
                   {"server_ejections", r.server_ejections},
                   {"lookup_hits", r.lookup_hits},
                   {"lookup_misses", r.lookup_misses}};
  }
  return j;
}

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

// Script text safe inside <script>...</script>.
std::string script_safe(std::string_view js) {
  std::string s(js);
  replace_all(&s, "</script", "<\\/script");
  return s;
}

}  // namespace

json cached_tokens_json(const StatsSnapshot& s) {
  return json{{"device", s.device.cached_tokens},
              {"host", s.host.cached_tokens},
              {"disk", s.disk.cached_tokens},
              {"remote", s.remote.cached_tokens}};
}

json history_sample_json(const HistorySample& s) {
  const StatsSnapshot& d = s.delta;
  json j;
  j["t_ms"] = s.t_ms;
  j["interval_ms"] = s.interval_ms;
  j["prompt_tokens"] = d.prompt_tokens;
  j["cached_tokens"] = cached_tokens_json(d);
  j["prefill_tokens"] = d.prefill_tokens;
  j["generated_tokens"] = d.generated_tokens;
  if (d.prompt_tokens > 0) {
    const double p = static_cast<double>(d.prompt_tokens);
    j["hit_ratio"] = {
        {"device", static_cast<double>(d.device.cached_tokens) / p},
        {"host", static_cast<double>(d.host.cached_tokens) / p},
        {"disk", static_cast<double>(d.disk.cached_tokens) / p},
        {"remote", static_cast<double>(d.remote.cached_tokens) / p},
        {"miss",
         static_cast<double>(std::max<int64_t>(0, d.prompt_tokens - d.cached_tokens())) / p}};
  } else {
    j["hit_ratio"] = nullptr;
  }
  j["requests_hit"] = s.requests_hit;
  j["requests_miss"] = s.requests_miss;
  j["ttft_ms"] = {{"hit_p50", opt_json(s.ttft_hit_p50_ms)},
                  {"hit_p95", opt_json(s.ttft_hit_p95_ms)},
                  {"miss_p50", opt_json(s.ttft_miss_p50_ms)},
                  {"miss_p95", opt_json(s.ttft_miss_p95_ms)}};
  j["occupancy"] = {
      {"device",
       {{"used_bytes", d.device.used_bytes}, {"capacity_bytes", d.device.capacity_bytes}}},
      {"host", {{"used_bytes", d.host.used_bytes}, {"capacity_bytes", d.host.capacity_bytes}}},
      {"disk", {{"used_bytes", d.disk.used_bytes}, {"capacity_bytes", d.disk.capacity_bytes}}}};
  j["evictions"] = {
      {"device", d.device.evictions}, {"host", d.host.evictions}, {"disk", d.disk.evictions}};
  j["onboard_blocks"] = d.host.onboard_blocks + d.disk.onboard_blocks + d.remote.onboard_blocks;
  j["onboard_bytes"] = d.onboard_bytes;
  j["offload_blocks"] = d.host.offload_blocks + d.disk.offload_blocks;
  j["offload_bytes"] = d.host.offload_bytes + d.disk.offload_bytes;
  j["pinned_blocks"] = d.pool_blocks_pinned;
  j["bytes_per_cached_token"] = opt_json(pool_bytes_per_cached_token(d));
  if (d.snapshot_slots > 0) j["snapshots"] = snapshots_json(d);
  j["running"] = d.running;
  j["waiting"] = d.waiting;
  return j;
}

Dashboard::Dashboard(Engine* engine, const TierManager* tiers, const Tokenizer* tokenizer,
                     const DashboardOptions& options)
    : engine_(engine),
      tiers_(tiers),
      tokenizer_(tokenizer),
      options_(options),
      prefixes_(engine->options().block_size, options.max_prefixes, options.max_prefix_tokens),
      history_(options.history_samples, options.ttft_window_ms) {
  sampler_ = std::thread([this] { sampler_loop(); });
}

Dashboard::~Dashboard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void Dashboard::sample_now() {
  history_.record(unix_now_ms(), read_stats(*engine_, tiers_));
}

void Dashboard::sampler_loop() {
  const auto interval =
      std::chrono::milliseconds(std::max<int64_t>(10, options_.sample_interval_ms));
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    sample_now();
    lock.lock();
    // Fixed cadence: a slow engine query delays one sample, not all later ones.
    next += interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
    cv_.wait_until(lock, next, [this] { return stop_; });
  }
}

void Dashboard::record_request(std::span<const int32_t> prompt, const std::string& cache_salt,
                               const Usage& usage) {
  const int64_t now_ms = unix_now_ms();
  PrefixUse use;
  use.cached_tokens = usage.cached_tokens;
  use.device_tokens = usage.device_tokens;
  use.host_tokens = usage.host_tokens;
  use.disk_tokens = usage.disk_tokens;
  use.remote_tokens = usage.remote_tokens;
  prefixes_.record(prompt, cache_salt, use, now_ms);
  history_.observe_request(now_ms, usage.ttft_ms, usage.cached_tokens > 0);
}

void Dashboard::record_cache_call(std::span<const int32_t> prompt, const std::string& cache_salt,
                                  CacheCall call) {
  prefixes_.record_cache_call(prompt, cache_salt, call, unix_now_ms());
}

json Dashboard::history_json(int64_t since_ms) const {
  json samples = json::array();
  for (const HistorySample& s : history_.since(since_ms)) samples.push_back(history_sample_json(s));
  json out;
  out["now_ms"] = unix_now_ms();
  out["interval_ms"] = options_.sample_interval_ms;
  out["capacity"] = history_.capacity();
  out["ttft_window_ms"] = options_.ttft_window_ms;
  out["charts"] = dashboard_has_charts();
  out["samples"] = std::move(samples);
  // Cumulative figures as of the latest sample (the page's "all time" tiles).
  json totals = counters_json(history_.last_stats().value_or(StatsSnapshot{}));
  totals["requests_hit"] = history_.requests_hit_total();
  totals["requests_miss"] = history_.requests_miss_total();
  out["totals"] = std::move(totals);
  return out;
}

// The tier holding most of a prefix (the first of equals, device first), or "none".
static const char* main_tier(const LookupResult& r) {
  if (r.cached_tokens() <= 0) return "none";
  const std::pair<int32_t, const char*> by_tier[] = {
      {r.device_tokens, "device"}, {r.host_tokens, "host"}, {r.disk_tokens, "disk"}, {r.remote_tokens, "remote"}};
  const char* tier = "none";
  int32_t most = -1;
  for (const auto& [n, name] : by_tier) {
    if (n > most) {
      most = n;
      tier = name;
    }
  }
  return tier;
}

// One row of /v1/cache/prefixes' table: the tracked prefix `e` and where it lives now (`r`).
json Dashboard::prefix_row(const PrefixEntry& e, const LookupResult& r, int64_t now_ms) const {
  json row;
  row["id"] = PrefixTracker::id_hex(e.id);
  row["tokens"] = e.tokens.size();
  row["requests"] = e.requests;
  row["hits"] = e.hits;
  row["cached_tokens"] = e.cached_tokens;
  row["last_hit_tier"] = e.last_hit_tier.empty() ? json(nullptr) : json(e.last_hit_tier);
  row["tier"] = main_tier(r);
  row["resident"] = {{"device_tokens", r.device_tokens},
                     {"host_tokens", r.host_tokens},
                     {"disk_tokens", r.disk_tokens},
                     {"remote_tokens", r.remote_tokens}};
  row["pinned"] = e.pinned;
  row["prefetches"] = e.prefetches;
  row["first_seen_ms"] = e.first_seen_ms;
  row["last_use_ms"] = e.last_use_ms;
  row["last_use_age_ms"] = std::max<int64_t>(0, now_ms - e.last_use_ms);
  row["cache_salt"] = e.cache_salt;
  if (tokenizer_) {
    const size_t n_preview = std::min<size_t>(e.tokens.size(), 48);
    row["preview"] = tokenizer_->decode(std::vector<int32_t>(
        e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n_preview)));
  } else {
    row["preview"] = nullptr;
  }
  row["prompt"] = e.tokens;
  return row;
}

json Dashboard::prefixes_json(size_t limit) {
  std::vector<PrefixEntry> hot = prefixes_.hottest(limit);
  // Where each prefix lives now. The lookups go out together so that the
  // engine answers them between the same two steps; each asks the remote
  // tier (if any) on its own thread, bounded by the tier's timeout.
  std::vector<std::future<LookupResult>> residency;
  residency.reserve(hot.size());
  for (const PrefixEntry& e : hot) {
    residency.push_back(std::async(
        std::launch::async, [this, &e] { return engine_->lookup_all_tiers(e.tokens, e.cache_salt); }));
  }
  const int64_t now_ms = unix_now_ms();
  json rows = json::array();
  for (size_t i = 0; i < hot.size(); ++i) rows.push_back(prefix_row(hot[i], residency[i].get(), now_ms));
  json out;
  out["now_ms"] = now_ms;
  out["block_size"] = prefixes_.block_size();
  out["tracked"] = prefixes_.size();
  out["capacity"] = prefixes_.capacity();
  out["prefixes"] = std::move(rows);
  return out;
}

const std::string& dashboard_page_html() {
  static const std::string page = [] {
    std::string html(dashboard_asset("index.html"));
    // Placeholders are whole comments so that the unexpanded file is valid HTML.
    replace_all(&html, "/*@UPLOT_CSS@*/", std::string(dashboard_asset("uPlot.min.css")));
    replace_all(&html, "/*@DASHBOARD_CSS@*/", std::string(dashboard_asset("dashboard.css")));
    replace_all(&html, "/*@UPLOT_JS@*/", script_safe(dashboard_asset("uPlot.iife.min.js")));
    replace_all(&html, "/*@DASHBOARD_JS@*/", script_safe(dashboard_asset("dashboard.js")));
    replace_all(&html, "@CHARTS_BUNDLED@", dashboard_has_charts() ? "true" : "false");
    return html;
  }();
  return page;
}

}  // namespace prefixd
