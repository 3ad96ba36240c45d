// The cache-hit dashboard's state: the Dashboard object that samples the
// engine and tiers once per interval and tracks hot prefixes, the JSON
// documents its page reads, and the page itself (assets embedded in the
// binary). Its endpoints are in daemon/api/dashboard_handlers.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>

#include "daemon/monitoring/metrics_history.h"
#include "daemon/monitoring/prefix_tracker.h"

namespace prefixd {

class Engine;
struct LookupResult;
class TierManager;
class Tokenizer;
struct Usage;

struct DashboardOptions {
  int64_t sample_interval_ms = 1000;  // one history sample per interval
  size_t history_samples = 600;       // 10 minutes at one sample per second
  int64_t ttft_window_ms = 10000;     // TTFT percentiles look this far back
  size_t max_prefixes = 256;          // prefixes tracked at most
  size_t max_prefix_tokens = 4096;    // tokens kept per tracked prefix
};

// Owns the history sampler thread and the prefix tracker. Created by
// Server::create() into DaemonContext::dashboard; it must be destroyed
// before the engine and the tier manager it reads (it is: the context goes
// before the engine).
// Thread-safety: every method may be called from any thread.
class Dashboard {
 public:
  // Starts the sampler, which reads the engine and the tiers (null: none
  // configured) every interval. `tokenizer` (may be null: no previews) writes
  // the prefix table's previews. None is owned; all outlive the dashboard.
  Dashboard(Engine* engine, const TierManager* tiers, const Tokenizer* tokenizer,
            const DashboardOptions& options);
  ~Dashboard();  // stops and joins the sampler
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // A generation request finished normally (stop or length): HTTP workers
  // call this with its prompt ids, cache salt and usage.
  void record_request(std::span<const int32_t> prompt, const std::string& cache_salt,
                      const Usage& usage);

  // A pin, unpin or prefetch through the cache API succeeded: the prompt shows
  // in the prefix table (pinned, or with its prefetch count).
  void record_cache_call(std::span<const int32_t> prompt, const std::string& cache_salt,
                         CacheCall call);

  const DashboardOptions& options() const { return options_; }
  PrefixTracker& prefixes() { return prefixes_; }
  MetricsHistory& history() { return history_; }

  // GET /v1/cache/history?since=MS and GET /v1/cache/prefixes?limit=N documents.
  nlohmann::json history_json(int64_t since_ms) const;
  nlohmann::json prefixes_json(size_t limit);

 private:
  void sampler_loop();
  void sample_now();
  nlohmann::json prefix_row(const PrefixEntry& e, const LookupResult& r, int64_t now_ms) const;

  Engine* engine_;
  const TierManager* tiers_;
  const Tokenizer* tokenizer_;
  DashboardOptions options_;
  PrefixTracker prefixes_;
  MetricsHistory history_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread sampler_;
};

// {"device", "host", "disk", "remote"}: the prompt tokens `s` counts as
// reused from each tier (/v1/cache/stats, the history's rows and totals).
nlohmann::json cached_tokens_json(const StatsSnapshot& s);

// JSON of one history sample (the rows of GET /v1/cache/history).
nlohmann::json history_sample_json(const HistorySample& s);

// The page as served: index.html with the CSS and JS (and uPlot, if bundled)
// inlined, so that it is one self-contained document.
const std::string& dashboard_page_html();

}  // namespace prefixd
