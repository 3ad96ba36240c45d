// Prometheus text exposition of the daemon's counters and histograms and of a
// StatsSnapshot (engine and tiers).
#include "daemon/monitoring/metrics.h"

#include <charconv>
#include <cstdio>

namespace prefixd {
namespace {

// Prometheus float formatting: the shortest form that round-trips.
std::string fmt(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

void header(std::string* out, const char* name, const char* type, const char* help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void sample(std::string* out, const std::string& name, const std::string& labels, int64_t v) {
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += ' ';
  *out += std::to_string(v);
  *out += '\n';
}

void sample_real(std::string* out, const std::string& name, const std::string& labels, double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += ' ';
  *out += text;
  *out += '\n';
}

// The tiers a per-tier family samples (a bit set).
enum TierBit : unsigned { kDeviceTier = 1, kHostTier = 2, kDiskTier = 4, kRemoteTier = 8 };

// A family with one sample of `field` per tier, labelled tier="...": each of
// `tiers` that is configured (the device always is), in the order device,
// host, disk, remote.
void tier_family(std::string* out, const char* name, const char* type, const char* help,
                 const StatsSnapshot& s, int64_t TierFigures::*field, unsigned tiers) {
  header(out, name, type, help);
  if (tiers & kDeviceTier) sample(out, name, "tier=\"device\"", s.device.*field);
  if ((tiers & kHostTier) && s.has_host_tier) sample(out, name, "tier=\"host\"", s.host.*field);
  if ((tiers & kDiskTier) && s.has_disk_tier) sample(out, name, "tier=\"disk\"", s.disk.*field);
  if ((tiers & kRemoteTier) && s.has_remote_tier)
    sample(out, name, "tier=\"remote\"", s.remote.*field);
}

std::vector<double> latency_buckets_s() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

// The build, and the token and eviction counters of the engine.
void render_tokens(const StatsSnapshot& s, const BuildInfo& build, std::string* out) {
  header(out, "prefixd_build_info", "gauge",
         "Always 1; the labels say how this daemon runs (backend, CPU instruction set).");
  sample(out, "prefixd_build_info",
         "cpu_isa=\"" + build.cpu_isa_name + "\",backend=\"" + build.backend_name + "\"", 1);
  header(out, "prefixd_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  sample(out, "prefixd_prompt_tokens_total", "", s.prompt_tokens);
  header(out, "prefixd_cached_tokens_total", "counter",
         "Prompt tokens reused from the cache, by tier.");
  sample(out, "prefixd_cached_tokens_total", "tier=\"device\"", s.device.cached_tokens);
  sample(out, "prefixd_cached_tokens_total", "tier=\"host\"", s.host.cached_tokens);
  sample(out, "prefixd_cached_tokens_total", "tier=\"disk\"", s.disk.cached_tokens);
  if (s.has_remote_tier)
    sample(out, "prefixd_cached_tokens_total", "tier=\"remote\"", s.remote.cached_tokens);
  header(out, "prefixd_prefill_tokens_total", "counter", "Prompt tokens computed by prefill.");
  sample(out, "prefixd_prefill_tokens_total", "", s.prefill_tokens);
  header(out, "prefixd_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "prefixd_generated_tokens_total", "", s.generated_tokens);
  tier_family(out, "prefixd_evictions_total", "counter", "Blocks evicted, by tier.", s,
              &TierFigures::evictions, kDeviceTier | kHostTier | kDiskTier);
  if (s.snapshot_slots > 0) {
    // Recurrent models only: their state snapshots in the device pool.
    header(out, "prefixd_state_snapshot_slots", "gauge", "Device state snapshot slots.");
    sample(out, "prefixd_state_snapshot_slots", "", s.snapshot_slots);
    header(out, "prefixd_state_snapshots_stored", "gauge", "Device state snapshots held.");
    sample(out, "prefixd_state_snapshots_stored", "", s.snapshots_stored);
    header(out, "prefixd_state_snapshot_size_bytes", "gauge",
           "Bytes of one state snapshot (the recurrent layers' state of one sequence, F32).");
    sample(out, "prefixd_state_snapshot_size_bytes", "", s.snapshot_bytes);
    header(out, "prefixd_state_snapshot_hits_total", "counter",
           "Requests resumed from a state snapshot at the end of their cached prefix.");
    sample(out, "prefixd_state_snapshot_hits_total", "", s.snapshot_hits);
    header(out, "prefixd_state_snapshot_misses_total", "counter",
           "Requests with cached blocks but no state snapshot at any of their boundaries.");
    sample(out, "prefixd_state_snapshot_misses_total", "", s.snapshot_misses);
    header(out, "prefixd_state_snapshots_taken_total", "counter", "State snapshots stored.");
    sample(out, "prefixd_state_snapshots_taken_total", "", s.snapshots_taken);
    header(out, "prefixd_state_snapshot_evictions_total", "counter",
           "State snapshots evicted, by reason (lru: for a newer one; block: with their block).");
    sample(out, "prefixd_state_snapshot_evictions_total", "reason=\"lru\"", s.snapshot_evictions);
    sample(out, "prefixd_state_snapshot_evictions_total", "reason=\"block\"", s.snapshots_dropped);
    header(out, "prefixd_state_snapshot_bytes_total", "counter",
           "State bytes copied into snapshots (taken) and out of them (restored).");
    sample(out, "prefixd_state_snapshot_bytes_total", "direction=\"taken\"", s.snapshot_bytes_taken);
    sample(out, "prefixd_state_snapshot_bytes_total", "direction=\"restored\"", s.snapshot_bytes_restored);
    header(out, "prefixd_state_snapshot_tier_hits_total", "counter",
           "State snapshot hits restored from the tiers below the device (host, disk, remote).");
    sample(out, "prefixd_state_snapshot_tier_hits_total", "", s.snapshot_tier_hits);
    header(out, "prefixd_state_snapshot_tier_rejected_total", "counter",
           "State snapshots found in the tiers but refused by a check (counted as misses).");
    sample(out, "prefixd_state_snapshot_tier_rejected_total", "", s.snapshot_tier_rejected);
    header(out, "prefixd_state_snapshots_offloaded_total", "counter", "State snapshots handed to the tiers.");
    sample(out, "prefixd_state_snapshots_offloaded_total", "", s.snapshots_offloaded);
  }
}

// What moves between the device and the tiers below it, and their sizes.
void render_tier_movement(const StatsSnapshot& s, std::string* out) {
  if (s.has_host_tier) {
    const unsigned below = kHostTier | kDiskTier | kRemoteTier;
    tier_family(out, "prefixd_offload_blocks_total", "counter",
                "Blocks written down to a tier (host RAM, disk).", s, &TierFigures::offload_blocks,
                below);
    // "restored": the help text /metrics has always published, kept as it is.
    tier_family(out, "prefixd_onboard_blocks_total", "counter",
                "Blocks restored from a tier into the device pool.", s,
                &TierFigures::onboard_blocks, below);
    tier_family(out, "prefixd_tier_used_bytes", "gauge", "Bytes held by a tier below the device.",
                s, &TierFigures::used_bytes, kHostTier | kDiskTier);
    tier_family(out, "prefixd_tier_capacity_bytes", "gauge", "Capacity of a tier below the device.",
                s, &TierFigures::capacity_bytes, kHostTier | kDiskTier);
  }
}

// Records that failed a check on the disk and remote tiers.
void render_record_checks(const StatsSnapshot& s, std::string* out) {
  if (s.has_disk_tier || s.has_remote_tier) {
    header(
        out, "prefixd_corrupt_records_total", "counter",
        "Records that failed a check (MAC, checksums, key, model): deleted and treated as misses.");
    if (s.has_disk_tier)
      sample(out, "prefixd_corrupt_records_total", "tier=\"disk\"", s.corrupt_records);
    if (s.has_remote_tier)
      sample(out, "prefixd_corrupt_records_total", "tier=\"remote\"", s.remote_io.corrupt_records);
    header(out, "prefixd_unauthenticated_records_total", "counter",
           "Of the corrupt records, those whose keyed MAC did not verify (forged or damaged).");
    if (s.has_disk_tier)
      sample(out, "prefixd_unauthenticated_records_total", "tier=\"disk\"",
             s.unauthenticated_records);
    if (s.has_remote_tier) {
      sample(out, "prefixd_unauthenticated_records_total", "tier=\"remote\"",
             s.remote_io.unauthenticated_records);
    }
  }
}

// The remote tier's I/O.
void render_remote_tier(const StatsSnapshot& s, std::string* out) {
  if (s.has_remote_tier) {
    const RemoteFigures& r = s.remote_io;
    header(out, "prefixd_tier_hits_total", "counter",
           "Blocks a tier returned (remote: the memcached pool shared by replicas).");
    sample(out, "prefixd_tier_hits_total", "tier=\"remote\"", s.remote.hits);
    header(out, "prefixd_tier_misses_total", "counter",
           "Blocks asked of a tier and not returned (absent, or failed a check).");
    sample(out, "prefixd_tier_misses_total", "tier=\"remote\"", s.remote.misses);
    header(out, "prefixd_tier_read_bytes_total", "counter", "Bytes read from a tier.");
    sample(out, "prefixd_tier_read_bytes_total", "tier=\"remote\"", r.read_bytes);
    header(out, "prefixd_tier_written_bytes_total", "counter", "Bytes written to a tier.");
    sample(out, "prefixd_tier_written_bytes_total", "tier=\"remote\"", r.written_bytes);
    header(out, "prefixd_tier_errors_total", "counter",
           "Failed tier operations (remote: server down, protocol error), timeouts included.");
    sample(out, "prefixd_tier_errors_total", "tier=\"remote\"", r.errors);
    header(out, "prefixd_tier_timeouts_total", "counter", "Tier operations that timed out.");
    sample(out, "prefixd_tier_timeouts_total", "tier=\"remote\"", r.timeouts);
    header(out, "prefixd_tier_writes_dropped_total", "counter",
           "Writes dropped because the tier's write queue was over its byte bound.");
    sample(out, "prefixd_tier_writes_dropped_total", "tier=\"remote\"", r.writes_dropped);
    header(out, "prefixd_remote_servers", "gauge",
           "memcached servers configured for the remote tier.");
    sample(out, "prefixd_remote_servers", "", r.servers);
    header(out, "prefixd_remote_servers_in_ring", "gauge",
           "memcached servers in the ketama ring now (not taken out for refused connects or "
           "timeouts).");
    sample(out, "prefixd_remote_servers_in_ring", "", r.servers_in_ring);
    header(out, "prefixd_remote_server_ejections_total", "counter",
           "Times a memcached server was taken out of the ring (refused connects, timeouts in a "
           "row, or no answer at start); it is tried again after the retry interval.");
    sample(out, "prefixd_remote_server_ejections_total", "", r.server_ejections);
    header(out, "prefixd_remote_lookup_blocks_total", "counter",
           "Blocks /v1/cache/lookup and the dashboard asked the remote tier about (existence "
           "checks), by result.");
    sample(out, "prefixd_remote_lookup_blocks_total", "result=\"hit\"", r.lookup_hits);
    sample(out, "prefixd_remote_lookup_blocks_total", "result=\"miss\"", r.lookup_misses);
  }
}

// The disk tier's errors and its write stop.
void render_disk_errors(const StatsSnapshot& s, std::string* out) {
  if (s.has_disk_tier) {
    header(out, "prefixd_disk_write_errors_total", "counter",
           "Records not written to disk: the write failed (no space left, I/O error), or writes "
           "were stopped after such a failure (retried every few seconds).");
    sample(out, "prefixd_disk_write_errors_total", "", s.disk_write_errors);
    header(out, "prefixd_disk_io_errors_total", "counter",
           "RocksDB errors other than not-found, reads (treated as misses) and writes together.");
    sample(out, "prefixd_disk_io_errors_total", "", s.disk_io_errors);
    header(out, "prefixd_disk_writes_stopped", "gauge",
           "1 while the disk tier refuses writes after a failed one (e.g. the disk is full).");
    sample(out, "prefixd_disk_writes_stopped", "", s.disk_writes_stopped ? 1 : 0);
    header(out, "prefixd_disk_writes_dropped_total", "counter",
           "Disk writes dropped because the write queue was over its byte bound (the writer fell behind).");
    sample(out, "prefixd_disk_writes_dropped_total", "", s.disk_writes_dropped);
    header(out, "prefixd_disk_write_lag_seconds", "gauge",
           "Since start: from a block's disk write being queued to its record being stored; quantile 1 "
           "is the largest (0.5 and 0.99 are bucket bounds, within 19 %).");
    const LagSummary& lag = s.disk_write_lag;
    sample_real(out, "prefixd_disk_write_lag_seconds", "quantile=\"0.5\"", lag.p50_ms / 1000.0);
    sample_real(out, "prefixd_disk_write_lag_seconds", "quantile=\"0.99\"", lag.p99_ms / 1000.0);
    sample_real(out, "prefixd_disk_write_lag_seconds", "quantile=\"1\"", lag.max_ms / 1000.0);
  }
}

}  // namespace

const char* request_outcome_name(RequestOutcome o) {
  switch (o) {
    case RequestOutcome::kCompleted:
      return "completed";
    case RequestOutcome::kCancelled:
      return "cancelled";
    case RequestOutcome::kError:
      return "error";
    case RequestOutcome::kRejected:
      return "rejected";
    case RequestOutcome::kInvalid:
      return "invalid";
  }
  return "error";
}

const char* tenant_limit_name(TenantLimit l) {
  switch (l) {
    case TenantLimit::kMaxConcurrent:
      return "max_concurrent";
    case TenantLimit::kRequestsPerMinute:
      return "requests_per_minute";
    case TenantLimit::kMaxPinnedBlocks:
      return "max_pinned_blocks";
  }
  return "max_concurrent";
}

Histogram::Histogram(std::vector<double> upper_bounds_s)
    : bounds_s_(std::move(upper_bounds_s)), counts_(bounds_s_.size() + 1, 0) {}

void Histogram::observe(double value_s) {
  size_t i = 0;
  while (i < bounds_s_.size() && value_s > bounds_s_[i]) ++i;
  ++counts_[i];
  sum_s_ += value_s;
  ++count_;
}

void Histogram::render(const std::string& name, std::string* out, const std::string& labels) const {
  const std::string bucket_labels = labels.empty() ? "" : labels + ",";
  const std::string series_labels = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_s_.size(); ++i) {
    cumulative += counts_[i];
    *out += name + "_bucket{" + bucket_labels + "le=\"" + fmt(bounds_s_[i]) + "\"} " +
            std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  *out += name + "_bucket{" + bucket_labels + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  *out += name + "_sum" + series_labels + " " + fmt(sum_s_) + "\n";
  *out += name + "_count" + series_labels + " " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_(latency_buckets_s()),
      ttft_hit_(latency_buckets_s()),
      ttft_miss_(latency_buckets_s()),
      inter_token_(latency_buckets_s()),
      queue_(latency_buckets_s()) {}

void Metrics::set_tenants(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  tenants_.clear();
  for (std::string& n : names) tenants_.push_back(TenantCounters{std::move(n)});
}

Metrics::TenantCounters* Metrics::tenant_locked(int32_t tenant) {
  if (tenant < 0 || static_cast<size_t>(tenant) >= tenants_.size()) return nullptr;
  return &tenants_[static_cast<size_t>(tenant)];
}

void Metrics::count_request(RequestOutcome outcome, int32_t tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[static_cast<size_t>(outcome)];
  if (TenantCounters* t = tenant_locked(tenant)) ++t->requests[static_cast<size_t>(outcome)];
}

void Metrics::count_tenant_tokens(int32_t tenant, int64_t prompt_tokens, int64_t cached_tokens,
                                  int64_t generated_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  TenantCounters* t = tenant_locked(tenant);
  if (t == nullptr) return;
  t->prompt_tokens += static_cast<uint64_t>(prompt_tokens);
  t->cached_tokens += static_cast<uint64_t>(cached_tokens);
  t->generated_tokens += static_cast<uint64_t>(generated_tokens);
}

void Metrics::count_tenant_limited(int32_t tenant, TenantLimit limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (TenantCounters* t = tenant_locked(tenant)) ++t->limited[static_cast<size_t>(limit)];
}

void Metrics::render_tenants(std::string* out) const {
  if (tenants_.empty()) return;
  auto label = [](const TenantCounters& t) { return "tenant=\"" + t.name + "\""; };
  header(out, "prefixd_tenant_requests_total", "counter",
         "Generation requests by tenant (--api-keys) and how they ended; those refused before "
         "their key was known count only in prefixd_requests_total.");
  for (const TenantCounters& t : tenants_) {
    for (size_t i = 0; i < t.requests.size(); ++i) {
      sample(out, "prefixd_tenant_requests_total",
             label(t) + ",status=\"" + request_outcome_name(static_cast<RequestOutcome>(i)) + "\"",
             static_cast<int64_t>(t.requests[i]));
    }
  }
  header(out, "prefixd_tenant_prompt_tokens_total", "counter",
         "Prompt tokens of finished generation requests, by tenant.");
  for (const TenantCounters& t : tenants_)
    sample(out, "prefixd_tenant_prompt_tokens_total", label(t),
           static_cast<int64_t>(t.prompt_tokens));
  header(out, "prefixd_tenant_cached_tokens_total", "counter",
         "Prompt tokens of finished generation requests reused from the cache, by tenant.");
  for (const TenantCounters& t : tenants_)
    sample(out, "prefixd_tenant_cached_tokens_total", label(t),
           static_cast<int64_t>(t.cached_tokens));
  header(out, "prefixd_tenant_generated_tokens_total", "counter",
         "Tokens generated for finished generation requests, by tenant.");
  for (const TenantCounters& t : tenants_)
    sample(out, "prefixd_tenant_generated_tokens_total", label(t),
           static_cast<int64_t>(t.generated_tokens));
  header(out, "prefixd_tenant_limited_total", "counter",
         "Requests refused with 429 by a tenant's limit, by tenant and limit.");
  for (const TenantCounters& t : tenants_) {
    for (size_t i = 0; i < t.limited.size(); ++i) {
      sample(out, "prefixd_tenant_limited_total",
             label(t) + ",limit=\"" + tenant_limit_name(static_cast<TenantLimit>(i)) + "\"",
             static_cast<int64_t>(t.limited[i]));
    }
  }
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_ttft_by_cache(double seconds, bool cache_hit) {
  std::lock_guard<std::mutex> lock(mu_);
  (cache_hit ? ttft_hit_ : ttft_miss_).observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  inter_token_.observe(seconds);
}

void Metrics::observe_queue(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.observe(seconds);
}

uint64_t Metrics::requests(RequestOutcome outcome) const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_[static_cast<size_t>(outcome)];
}

namespace {

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void render_fast_paths(const FastPathReport& r, std::string* out) {
  if (r.empty()) return;
  header(out, "prefixd_attention_path_info", "gauge",
         "Always 1; the labels say which attention implementation serves each operation family "
         "(a library and its version, or none and why).");
  for (const auto& [family, line] : r.summary)
    sample(out, "prefixd_attention_path_info",
           "family=\"" + label_value(family) + "\",path=\"" + label_value(line) + "\"", 1);
  header(out, "prefixd_attention_calls_total", "counter",
         "Attention calls served by each path (a library execution or a kernel launch for one layer).");
  for (const FastPathState& p : r.paths)
    sample(out, "prefixd_attention_calls_total", "path=\"" + label_value(p.name) + "\"", p.calls);
  header(out, "prefixd_fast_path_enabled", "gauge",
         "1 while a path may serve; 0 when unavailable or switched off by a failed self-check.");
  for (const FastPathState& p : r.paths)
    sample(out, "prefixd_fast_path_enabled", "path=\"" + label_value(p.name) + "\"", p.enabled ? 1 : 0);
  int64_t passed = 0, failed = 0;
  for (const SelfCheckVerdict& v : r.self_checks) (v.passed ? passed : failed) += 1;
  header(out, "prefixd_fast_path_self_checks", "gauge",
         "Start-up self-checks of fast paths against the simple kernels, by result.");
  sample(out, "prefixd_fast_path_self_checks", "result=\"passed\"", passed);
  sample(out, "prefixd_fast_path_self_checks", "result=\"failed\"", failed);
}

std::string Metrics::render(const StatsSnapshot& s, const BuildInfo& build) const {
  std::string out;
  out.reserve(8192);
  render_tokens(s, build, &out);
  render_tier_movement(s, &out);
  render_record_checks(s, &out);
  render_remote_tier(s, &out);
  render_disk_errors(s, &out);

  std::lock_guard<std::mutex> lock(mu_);
  header(&out, "prefixd_requests_total", "counter", "Generation requests by how they ended.");
  for (size_t i = 0; i < requests_.size(); ++i) {
    sample(&out, "prefixd_requests_total",
           std::string("status=\"") + request_outcome_name(static_cast<RequestOutcome>(i)) + "\"",
           static_cast<int64_t>(requests_[i]));
  }
  header(&out, "prefixd_pool_used_bytes", "gauge", "Device KV pool bytes referenced or cached.");
  sample(&out, "prefixd_pool_used_bytes", "", s.device.used_bytes);
  header(&out, "prefixd_pool_capacity_bytes", "gauge", "Device KV pool capacity in bytes.");
  sample(&out, "prefixd_pool_capacity_bytes", "", s.device.capacity_bytes);
  if (const std::optional<double> per_token = pool_bytes_per_cached_token(s)) {
    header(&out, "prefixd_pool_bytes_per_cached_token", "gauge",
           "Device pool bytes per token its blocks hold: the blocks holding data plus the stored "
           "state snapshots, over those blocks' tokens (absent while no block holds data).");
    sample_real(&out, "prefixd_pool_bytes_per_cached_token", "", *per_token);
  }
  header(&out, "prefixd_requests_running", "gauge", "Requests running in the engine.");
  sample(&out, "prefixd_requests_running", "", s.running);
  header(&out, "prefixd_requests_waiting", "gauge",
         "Requests waiting for admission or for tier onboarding.");
  sample(&out, "prefixd_requests_waiting", "", s.waiting);
  header(&out, "prefixd_ttft_seconds", "histogram",
         "Time from request arrival to the first token.");
  ttft_.render("prefixd_ttft_seconds", &out);
  header(&out, "prefixd_ttft_by_cache_seconds", "histogram",
         "Time to first token of completed requests, by whether any prompt token came from the "
         "prefix cache (cache=\"hit\") or none did (cache=\"miss\").");
  ttft_hit_.render("prefixd_ttft_by_cache_seconds", &out, "cache=\"hit\"");
  ttft_miss_.render("prefixd_ttft_by_cache_seconds", &out, "cache=\"miss\"");
  header(&out, "prefixd_inter_token_latency_seconds", "histogram",
         "Time between consecutive tokens of a request, as seen by its HTTP worker.");
  inter_token_.render("prefixd_inter_token_latency_seconds", &out);
  header(&out, "prefixd_queue_time_seconds", "histogram",
         "Time from submission to admission by the engine.");
  queue_.render("prefixd_queue_time_seconds", &out);
  render_tenants(&out);
  return out;
}

}  // namespace prefixd
