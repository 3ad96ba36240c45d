// The dashboard: sampler thread, JSON documents of the history and the hot
// prefixes, the pin-by-id endpoints and the embedded page.
#include "daemon/dashboard.h"

#include <chrono>
#include <future>

#include "daemon/daemon_context.h"
#include "daemon/dashboard_assets.h"
#include "daemon/http_util.h"
#include "daemon/request_validation.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "storage/tier_manager.h"

namespace prefixd {
namespace {

using nlohmann::json;

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

CounterSnapshot read_counters(DaemonContext& ctx) {
  const EngineStats es = ctx.engine->stats();
  CounterSnapshot c;
  c.prompt_tokens = es.prompt_tokens;
  c.cached_tokens_device = es.cached_tokens_device;
  c.cached_tokens_host = es.cached_tokens_host;
  c.cached_tokens_disk = es.cached_tokens_disk;
  c.prefill_tokens = es.prefill_tokens;
  c.generated_tokens = es.generated_tokens;
  c.evictions_device = es.device_evictions;
  c.device_used_bytes = es.pool_used_bytes;
  c.device_capacity_bytes = es.pool_capacity_bytes;
  c.pinned_blocks = es.pool_blocks_pinned;
  c.running = es.running;
  c.waiting = es.waiting;
  if (ctx.tiers) {
    const TierManagerStats ts = ctx.tiers->stats();
    c.evictions_host = static_cast<int64_t>(ts.host.evictions);
    c.host_used_bytes = static_cast<int64_t>(ts.host.used_bytes);
    c.host_capacity_bytes = static_cast<int64_t>(ts.host.capacity_bytes);
    if (ts.has_disk) {
      c.evictions_disk = static_cast<int64_t>(ts.disk.evictions);
      c.disk_used_bytes = static_cast<int64_t>(ts.disk.used_bytes);
      c.disk_capacity_bytes = static_cast<int64_t>(ts.disk.capacity_bytes);
    }
    c.onboard_blocks = static_cast<int64_t>(ts.onboard_host_blocks + ts.onboard_disk_blocks);
    c.onboard_bytes = static_cast<int64_t>(ts.onboard_bytes);
    c.offload_blocks = static_cast<int64_t>(ts.offload_host_blocks + ts.offload_disk_blocks);
    c.offload_bytes = static_cast<int64_t>(ts.offload_host_bytes + ts.offload_disk_bytes);
  }
  return c;
}

json counters_json(const CounterSnapshot& c) {
  return json{
      {"prompt_tokens", c.prompt_tokens},
      {"cached_tokens",
       {{"device", c.cached_tokens_device},
        {"host", c.cached_tokens_host},
        {"disk", c.cached_tokens_disk}}},
      {"prefill_tokens", c.prefill_tokens},
      {"generated_tokens", c.generated_tokens},
      {"evictions",
       {{"device", c.evictions_device}, {"host", c.evictions_host}, {"disk", c.evictions_disk}}},
      {"onboard_blocks", c.onboard_blocks},
      {"onboard_bytes", c.onboard_bytes},
      {"offload_blocks", c.offload_blocks},
      {"offload_bytes", c.offload_bytes}};
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

// No fetches beyond this origin; everything the page needs is inline.
const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

void send_html(httplib::Response& res, const std::string& html, int status) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_content(html, "text/html; charset=utf-8");
}

// Parses a non-negative integer query parameter; nullopt (and an answered
// 400) when it is malformed.
std::optional<int64_t> int_param(const httplib::Request& req, httplib::Response& res,
                                 const char* name, int64_t fallback, int64_t min, int64_t max) {
  if (!req.has_param(name)) return fallback;
  const std::string v = req.get_param_value(name);
  int64_t out = 0;
  bool ok = !v.empty() && v.size() <= 18;
  for (char ch : v) {
    if (ch < '0' || ch > '9') {
      ok = false;
      break;
    }
    out = out * 10 + (ch - '0');
  }
  if (!ok || out < min || out > max) {
    send_error(res, ApiError::invalid(std::string("'") + name + "' must be an integer in [" +
                                          std::to_string(min) + ", " + std::to_string(max) + "]",
                                      name, "invalid_parameter"));
    return std::nullopt;
  }
  return out;
}

}  // namespace

json history_sample_json(const HistorySample& s) {
  const CounterSnapshot& d = s.delta;
  json j;
  j["t_ms"] = s.t_ms;
  j["interval_ms"] = s.interval_ms;
  j["prompt_tokens"] = d.prompt_tokens;
  j["cached_tokens"] = {{"device", d.cached_tokens_device},
                        {"host", d.cached_tokens_host},
                        {"disk", d.cached_tokens_disk}};
  j["prefill_tokens"] = d.prefill_tokens;
  j["generated_tokens"] = d.generated_tokens;
  if (d.prompt_tokens > 0) {
    const double p = static_cast<double>(d.prompt_tokens);
    const int64_t cached = d.cached_tokens_device + d.cached_tokens_host + d.cached_tokens_disk;
    j["hit_ratio"] = {
        {"device", static_cast<double>(d.cached_tokens_device) / p},
        {"host", static_cast<double>(d.cached_tokens_host) / p},
        {"disk", static_cast<double>(d.cached_tokens_disk) / p},
        {"miss", static_cast<double>(std::max<int64_t>(0, d.prompt_tokens - cached)) / p}};
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
       {{"used_bytes", d.device_used_bytes}, {"capacity_bytes", d.device_capacity_bytes}}},
      {"host", {{"used_bytes", d.host_used_bytes}, {"capacity_bytes", d.host_capacity_bytes}}},
      {"disk", {{"used_bytes", d.disk_used_bytes}, {"capacity_bytes", d.disk_capacity_bytes}}}};
  j["evictions"] = {
      {"device", d.evictions_device}, {"host", d.evictions_host}, {"disk", d.evictions_disk}};
  j["onboard_blocks"] = d.onboard_blocks;
  j["onboard_bytes"] = d.onboard_bytes;
  j["offload_blocks"] = d.offload_blocks;
  j["offload_bytes"] = d.offload_bytes;
  j["pinned_blocks"] = d.pinned_blocks;
  j["running"] = d.running;
  j["waiting"] = d.waiting;
  return j;
}

Dashboard::Dashboard(DaemonContext* ctx, const DashboardOptions& options)
    : ctx_(ctx),
      options_(options),
      prefixes_(ctx->engine->options().block_size, options.max_prefixes, options.max_prefix_tokens),
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

void Dashboard::sample_now() { history_.record(unix_now_ms(), read_counters(*ctx_)); }

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
  prefixes_.record(prompt, cache_salt, use, now_ms);
  history_.observe_request(now_ms, usage.ttft_ms, usage.cached_tokens > 0);
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
  json totals = counters_json(history_.last_counters().value_or(CounterSnapshot{}));
  totals["requests_hit"] = history_.requests_hit_total();
  totals["requests_miss"] = history_.requests_miss_total();
  out["totals"] = std::move(totals);
  return out;
}

json Dashboard::prefixes_json(size_t limit) {
  std::vector<PrefixEntry> hot = prefixes_.hottest(limit);
  // Where each prefix lives now. The lookups go out together so that the
  // engine answers them between the same two steps.
  std::vector<std::future<LookupResult>> residency;
  residency.reserve(hot.size());
  for (const PrefixEntry& e : hot) {
    residency.push_back(std::async(
        std::launch::async, [this, &e] { return ctx_->engine->lookup(e.tokens, e.cache_salt); }));
  }
  const int64_t now_ms = unix_now_ms();
  json rows = json::array();
  for (size_t i = 0; i < hot.size(); ++i) {
    const PrefixEntry& e = hot[i];
    const LookupResult r = residency[i].get();
    const char* tier = "none";
    if (r.cached_tokens() > 0) {
      tier = r.device_tokens >= r.host_tokens && r.device_tokens >= r.disk_tokens ? "device"
             : r.host_tokens >= r.disk_tokens                                     ? "host"
                                                                                  : "disk";
    }
    json row;
    row["id"] = PrefixTracker::id_hex(e.id);
    row["tokens"] = e.tokens.size();
    row["requests"] = e.requests;
    row["hits"] = e.hits;
    row["cached_tokens"] = e.cached_tokens;
    row["last_hit_tier"] = e.last_hit_tier.empty() ? json(nullptr) : json(e.last_hit_tier);
    row["tier"] = tier;
    row["resident"] = {{"device_tokens", r.device_tokens},
                       {"host_tokens", r.host_tokens},
                       {"disk_tokens", r.disk_tokens}};
    row["pinned"] = e.pinned;
    row["first_seen_ms"] = e.first_seen_ms;
    row["last_use_ms"] = e.last_use_ms;
    row["last_use_age_ms"] = std::max<int64_t>(0, now_ms - e.last_use_ms);
    row["cache_salt"] = e.cache_salt;
    if (ctx_->model.tokenizer) {
      const size_t n_preview = std::min<size_t>(e.tokens.size(), 48);
      row["preview"] = ctx_->model.tokenizer->decode(std::vector<int32_t>(
          e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n_preview)));
    } else {
      row["preview"] = nullptr;
    }
    row["prompt"] = e.tokens;
    rows.push_back(std::move(row));
  }
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

void install_dashboard_routes(httplib::Server& h, DaemonContext* ctx, const ServerOptions* o) {
  ctx->dashboard = std::make_shared<Dashboard>(ctx, DashboardOptions{});
  Dashboard* d = ctx->dashboard.get();

  h.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    send_html(res, dashboard_page_html(), 200);
  });
  if (!o->api_key.empty()) {
    // The auth check answers a GET /dashboard without the key with a JSON
    // 401; a browser cannot send a bearer header on navigation, so that 401
    // carries the small page that asks for the key and loads the dashboard
    // with it instead.
    h.set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.path != "/dashboard" || req.method != "GET" || res.status != 401) return;
      // httplib has sized (and maybe compressed) the JSON body already; the
      // new body goes out as it is, with its own length.
      res.headers.erase("Content-Length");
      res.headers.erase("Content-Encoding");
      send_html(res, std::string(dashboard_asset("login.html")), 401);
      res.set_header("Content-Length", std::to_string(res.body.size()));
    });
  }
  h.Get("/v1/cache/history", [d](const httplib::Request& req, httplib::Response& res) {
    auto since = int_param(req, res, "since", 0, 0, INT64_MAX / 2);
    if (!since) return;
    send_json(res, d->history_json(*since));
  });
  h.Get("/v1/cache/prefixes", [d](const httplib::Request& req, httplib::Response& res) {
    auto limit = int_param(req, res, "limit", 20, 1, 256);
    if (!limit) return;
    send_json(res, d->prefixes_json(static_cast<size_t>(*limit)));
  });
  for (const bool pin : {true, false}) {
    h.Post(pin ? "/v1/cache/prefixes/pin" : "/v1/cache/prefixes/unpin",
           [ctx, d, pin](const httplib::Request& req, httplib::Response& res) {
             auto body = parse_json_body(req.body);
             if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
             const json& b = std::get<json>(body);
             if (!b.contains("id") || !b["id"].is_string()) {
               return send_error(res, ApiError::invalid("'id' (16 hex digits) is required", "id",
                                                        "invalid_parameter"));
             }
             auto id = PrefixTracker::parse_id_hex(b["id"].get<std::string>());
             if (!id) {
               return send_error(res, ApiError::invalid("'id' must be 1 to 16 hex digits", "id",
                                                        "invalid_parameter"));
             }
             std::optional<PrefixEntry> e = d->prefixes().find(*id);
             if (!e) {
               return send_error(res, ApiError{404, "no tracked prefix with this id",
                                               "invalid_request_error", "id", "not_found"});
             }
             Result<PinResult> r = ctx->engine->pin(e->tokens, e->cache_salt, pin);
             if (!r.ok()) {
               return send_error(res, ApiError{409, r.message(), "invalid_request_error", "id",
                                               pin ? "pin_failed" : "unpin_failed"});
             }
             d->prefixes().set_pinned(*id, pin);
             send_json(res, json{{"id", PrefixTracker::id_hex(*id)},
                                 {"pinned", pin},
                                 {"pinned_blocks", r->pinned_blocks},
                                 {"pinned_tokens", r->pinned_tokens}});
           });
  }
}

}  // namespace prefixd
