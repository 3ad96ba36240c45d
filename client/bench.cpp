// RAG load generator: workload construction from a seeded RNG, the threaded streaming run,
// statistics, and the JSON / table reports of `prefixctl bench`.
#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

namespace prefixd::client {

using nlohmann::json;

namespace {

// SplitMix64: a small, portable generator (std distributions differ between standard libraries,
// and the workload must be the same everywhere for a given seed).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (multiply-shift; bias below 2^-32 for n < 2^32).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

// Independent streams per (seed, purpose, index).
enum StreamTag : uint64_t { kSystemStream = 1, kQuestionStream = 2, kOrderStream = 3 };

SplitMix64 make_stream(uint64_t seed, uint64_t tag, uint64_t index) {
  SplitMix64 mix(seed);
  uint64_t a = mix.next() ^ (tag * 0xD6E8FEB86659FD93ull);
  SplitMix64 mix2(a);
  return SplitMix64(mix2.next() + index * 0x9E3779B97F4A7C15ull);
}

std::vector<int32_t> draw_ids(SplitMix64* rng, int32_t n, int32_t lo, int32_t hi) {
  std::vector<int32_t> ids(static_cast<size_t>(n));  // [n] int32 token ids in [lo, hi)
  for (int32_t& id : ids)
    id = lo + static_cast<int32_t>(rng->below(static_cast<uint64_t>(hi - lo)));
  return ids;
}

std::string words_of(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += bench_word(ids[i]);
  }
  return text;
}

json or_null(double v) { return v < 0 ? json(nullptr) : json(v); }

json distribution_json(const Distribution& d) {
  if (d.n == 0) {
    return {{"n", 0},         {"mean", nullptr}, {"min", nullptr}, {"max", nullptr},
            {"p50", nullptr}, {"p95", nullptr},  {"p99", nullptr}};
  }
  return {{"n", d.n},     {"mean", d.mean}, {"min", d.min}, {"max", d.max},
          {"p50", d.p50}, {"p95", d.p95},   {"p99", d.p99}};
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Runs one planned request to completion (retrying 429s) on `client`.
// A finished request's figures: the client's timings from the content
// chunks' arrival times (ms since the attempt began), the server's usage and
// prefix_cache (token counts from the prompt and the chunks without usage).
void record_completion(const Completion& c, const BenchPlanEntry& entry,
                       const std::vector<double>& content_ms, BenchRecord* rec) {
  rec->ok = true;
  rec->http_status = 200;
  rec->latency_ms = c.total_ms;
  rec->n_content_chunks = static_cast<int64_t>(content_ms.size());
  if (!content_ms.empty()) rec->ttft_ms = content_ms.front();
  for (size_t i = 1; i < content_ms.size(); ++i)
    rec->itl_ms.push_back(content_ms[i] - content_ms[i - 1]);
  rec->finish_reason = c.finish_reason;
  if (c.usage) {
    rec->prompt_tokens = c.usage->prompt_tokens;
    rec->completion_tokens = c.usage->completion_tokens;
    rec->cached_tokens = c.usage->cached_tokens;
  } else {
    if (const auto* ids = std::get_if<std::vector<int32_t>>(&entry.prompt)) {
      rec->prompt_tokens = static_cast<int64_t>(ids->size());
    }
    rec->completion_tokens =
        c.token_ids.empty() ? rec->n_content_chunks : static_cast<int64_t>(c.token_ids.size());
  }
  if (c.prefix_cache) {
    const PrefixCacheInfo& p = *c.prefix_cache;
    rec->cached_tokens = p.cached_tokens;
    rec->device_tokens = p.device_tokens;
    rec->host_tokens = p.host_tokens;
    rec->disk_tokens = p.disk_tokens;
    rec->remote_tokens = p.remote_tokens;
    rec->prefill_tokens = p.prefill_tokens;
    rec->onboard_path = p.onboard_path;
    rec->server_ttft_ms = p.ttft_ms;
    rec->server_queue_ms = p.queue_ms;
    rec->server_onboard_ms = p.onboard_ms;
    rec->server_prefill_ms = p.prefill_ms;
    rec->server_decode_ms = p.decode_ms;
  }
}

BenchRecord run_one(Client& client, const BenchPlanEntry& entry, int32_t index,
                    const BenchOptions& options, std::chrono::steady_clock::time_point run_start) {
  BenchRecord rec;
  rec.index = index;
  rec.system_prompt = entry.system_prompt;
  CompletionRequest request;
  request.prompt = entry.prompt;
  request.params.max_tokens = options.output_tokens;
  request.params.temperature = options.temperature;
  request.params.cache_salt = options.cache_salt;
  request.params.include_usage = true;

  for (int32_t attempt = 0;; ++attempt) {
    auto attempt_start = std::chrono::steady_clock::now();
    rec.start_ms = ms_between(run_start, attempt_start);
    std::vector<double> content_ms;  // [n_content_chunks] arrival times since attempt start
    Result<Completion> r = client.complete_stream(request, [&](const StreamDelta& d) {
      if (d.has_content()) content_ms.push_back(d.elapsed_ms);
      return true;
    });
    if (!r.ok()) {
      const ApiError& err = client.last_error();
      rec.http_status = err.http_status;
      if (err.http_status == 429 && attempt < options.max_retries) {
        double wait_ms = err.retry_after_s >= 0 ? err.retry_after_s * 1000.0 : 100.0;
        wait_ms = std::max(wait_ms, 10.0);
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms));
        ++rec.retries;
        rec.retry_wait_ms += wait_ms;
        continue;
      }
      rec.ok = false;
      rec.error = r.message();
      return rec;
    }
    record_completion(r.value(), entry, content_ms, &rec);
    return rec;
  }
}

std::string pct(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", ratio * 100.0);
  return buf;
}

void table_row(std::string* out, const char* name, const Distribution& d) {
  char buf[160];
  if (d.n == 0) {
    std::snprintf(buf, sizeof(buf), "  %-20s %6d %10s %10s %10s %10s\n", name, 0, "-", "-", "-",
                  "-");
  } else {
    std::snprintf(buf, sizeof(buf), "  %-20s %6lld %10.2f %10.2f %10.2f %10.2f\n", name,
                  static_cast<long long>(d.n), d.mean, d.p50, d.p95, d.p99);
  }
  *out += buf;
}

}  // namespace

const char* bench_order_name(BenchOrder order) {
  return order == BenchOrder::kRandom ? "random" : "round-robin";
}

Status BenchOptions::validate() const {
  if (n_system_prompts < 1) return Status::error("bench: --system-prompts must be >= 1");
  if (system_tokens < 0) return Status::error("bench: --system-tokens must be >= 0");
  if (question_tokens < 0) return Status::error("bench: --question-tokens must be >= 0");
  if (system_tokens + question_tokens < 1) return Status::error("bench: prompts would be empty");
  if (concurrency < 1) return Status::error("bench: --concurrency must be >= 1");
  if (n_requests < 1) return Status::error("bench: --requests must be >= 1");
  if (output_tokens < 1) return Status::error("bench: --output-tokens must be >= 1");
  if (vocab_lo < 0 || vocab_hi <= vocab_lo) {
    return Status::error("bench: need 0 <= --vocab-lo < --vocab-hi (got " +
                         std::to_string(vocab_lo) + ", " + std::to_string(vocab_hi) + ")");
  }
  if (temperature < 0) return Status::error("bench: --temperature must be >= 0");
  if (max_retries < 0) return Status::error("bench: max_retries must be >= 0");
  if (first_question < 0) return Status::error("bench: --first-question must be >= 0");
  return Status::ok_status();
}

std::string bench_word(int32_t id) {
  static const char kConsonants[] = "bcdfghklmnprstvz";  // 16
  static const char kVowels[] = "aeiou";                 // 5
  uint32_t x = static_cast<uint32_t>(id);
  std::string word;
  do {
    word.push_back(kConsonants[x % 16]);
    x /= 16;
    word.push_back(kVowels[x % 5]);
    x /= 5;
  } while (x > 0);
  return word;
}

BenchWorkload build_workload(const BenchOptions& options) {
  PREFIXD_CHECK(options.validate().ok(), "build_workload needs valid options");
  BenchWorkload w;
  std::vector<std::vector<int32_t>> system_ids;
  for (int32_t k = 0; k < options.n_system_prompts; ++k) {
    SplitMix64 rng = make_stream(options.seed, kSystemStream, static_cast<uint64_t>(k));
    system_ids.push_back(draw_ids(&rng, options.system_tokens, options.vocab_lo, options.vocab_hi));
    if (options.text_prompts) {
      w.system_prompts.emplace_back(words_of(system_ids.back()));
    } else {
      w.system_prompts.emplace_back(system_ids.back());
    }
  }
  SplitMix64 order_rng = make_stream(options.seed, kOrderStream, 0);
  for (int32_t i = 0; i < options.n_requests; ++i) {
    BenchPlanEntry e;
    e.system_prompt =
        options.order == BenchOrder::kRandom
            ? static_cast<int32_t>(order_rng.below(static_cast<uint64_t>(options.n_system_prompts)))
            : i % options.n_system_prompts;
    SplitMix64 rng =
        make_stream(options.seed, kQuestionStream, static_cast<uint64_t>(options.first_question) + i);
    std::vector<int32_t> question =
        draw_ids(&rng, options.question_tokens, options.vocab_lo, options.vocab_hi);
    const std::vector<int32_t>& sys = system_ids[static_cast<size_t>(e.system_prompt)];
    if (options.text_prompts) {
      std::string text = words_of(sys);
      if (!text.empty() && !question.empty()) text.push_back(' ');
      text += words_of(question);
      e.prompt = std::move(text);
    } else {
      std::vector<int32_t> ids = sys;  // [S + Q] int32 token ids
      ids.insert(ids.end(), question.begin(), question.end());
      e.prompt = std::move(ids);
    }
    w.requests.push_back(std::move(e));
  }
  return w;
}

double percentile_sorted(const std::vector<double>& sorted, double p) {
  PREFIXD_CHECK(!sorted.empty(), "percentile of an empty sample");
  p = std::clamp(p, 0.0, 100.0);
  double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution summarize(std::vector<double> values) {
  Distribution d;
  d.n = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.min = values.front();
  d.max = values.back();
  d.p50 = percentile_sorted(values, 50);
  d.p95 = percentile_sorted(values, 95);
  d.p99 = percentile_sorted(values, 99);
  return d;
}

BenchSummary summarize_records(const std::vector<BenchRecord>& records, double wall_s) {
  BenchSummary s;
  s.n_requests = static_cast<int64_t>(records.size());
  s.wall_s = wall_s;
  std::vector<double> ttft, ttft_hit, ttft_miss, server_ttft, overhead, itl, latency;
  for (const BenchRecord& r : records) {
    s.n_retries += r.retries;
    if (!r.ok) {
      ++s.n_failed;
      if (s.first_error.empty()) s.first_error = r.error;
      continue;
    }
    ++s.n_ok;
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    s.cached_tokens += r.cached_tokens;
    s.device_tokens += r.device_tokens;
    s.host_tokens += r.host_tokens;
    s.disk_tokens += r.disk_tokens;
    s.remote_tokens += r.remote_tokens;
    if (r.cache_hit()) {
      ++s.n_hits;
    } else {
      ++s.n_misses;
    }
    if (r.ttft_ms >= 0) {
      ttft.push_back(r.ttft_ms);
      (r.cache_hit() ? ttft_hit : ttft_miss).push_back(r.ttft_ms);
      if (r.server_ttft_ms >= 0) overhead.push_back(r.ttft_ms - r.server_ttft_ms);
    }
    if (r.server_ttft_ms >= 0) server_ttft.push_back(r.server_ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.latency_ms >= 0) latency.push_back(r.latency_ms);
  }
  if (wall_s > 0) {
    s.requests_per_s = static_cast<double>(s.n_ok) / wall_s;
    s.output_tokens_per_s = static_cast<double>(s.completion_tokens) / wall_s;
  }
  if (s.prompt_tokens > 0) {
    double p = static_cast<double>(s.prompt_tokens);
    s.hit_ratio = static_cast<double>(s.cached_tokens) / p;
    s.device_hit_ratio = static_cast<double>(s.device_tokens) / p;
    s.host_hit_ratio = static_cast<double>(s.host_tokens) / p;
    s.disk_hit_ratio = static_cast<double>(s.disk_tokens) / p;
    s.remote_hit_ratio = static_cast<double>(s.remote_tokens) / p;
  }
  s.ttft_ms = summarize(std::move(ttft));
  s.ttft_hit_ms = summarize(std::move(ttft_hit));
  s.ttft_miss_ms = summarize(std::move(ttft_miss));
  s.server_ttft_ms = summarize(std::move(server_ttft));
  s.ttft_overhead_ms = summarize(std::move(overhead));
  s.itl_ms = summarize(std::move(itl));
  s.latency_ms = summarize(std::move(latency));
  return s;
}

Result<BenchReport> run_bench(const ClientOptions& client_options, const BenchOptions& options,
                              const BenchProgress& progress) {
  Status valid = options.validate();
  if (!valid.ok()) return valid;
  BenchReport report;
  report.options = options;
  report.host = client_options.host;
  report.port = client_options.port;
  BenchWorkload workload = build_workload(options);

  Client probe(client_options);
  Result<HealthInfo> health = probe.health();
  if (!health.ok()) return Status::error("bench: daemon not healthy: " + health.message());

  if (options.warmup) {
    for (int32_t k = 0; k < options.n_system_prompts; ++k) {
      CacheQuery q;
      q.prompt = workload.system_prompts[static_cast<size_t>(k)];
      q.cache_salt = options.cache_salt;
      auto t0 = std::chrono::steady_clock::now();
      Result<PrefetchResult> r = probe.prefetch(q);
      if (!r.ok()) {
        return Status::error("bench: warmup prefetch of system prompt " + std::to_string(k) +
                             " failed: " + r.message());
      }
      report.warmup.push_back(
          BenchWarmup{k, r.value(), ms_between(t0, std::chrono::steady_clock::now())});
    }
  }

  const int32_t n_total = options.n_requests;
  report.records.resize(static_cast<size_t>(n_total));
  std::atomic<int32_t> next{0};
  std::mutex progress_mu;
  int32_t n_done = 0;
  auto run_start = std::chrono::steady_clock::now();
  auto worker = [&]() {
    Client client(client_options);
    for (;;) {
      int32_t i = next.fetch_add(1);
      if (i >= n_total) return;
      report.records[static_cast<size_t>(i)] =
          run_one(client, workload.requests[static_cast<size_t>(i)], i, options, run_start);
      std::lock_guard<std::mutex> lock(progress_mu);
      ++n_done;
      if (progress) progress(n_done, n_total);
    }
  };
  std::vector<std::thread> threads;
  int32_t n_threads = std::min(options.concurrency, n_total);
  for (int32_t t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  double wall_s = ms_between(run_start, std::chrono::steady_clock::now()) / 1000.0;
  report.summary = summarize_records(report.records, wall_s);
  return report;
}

namespace {

json options_json(const BenchOptions& o) {
  return {{"system_prompts", o.n_system_prompts},
          {"system_tokens", o.system_tokens},
          {"question_tokens", o.question_tokens},
          {"concurrency", o.concurrency},
          {"requests", o.n_requests},
          {"output_tokens", o.output_tokens},
          {"seed", o.seed},
          {"first_question", o.first_question},
          {"vocab_lo", o.vocab_lo},
          {"vocab_hi", o.vocab_hi},
          {"order", bench_order_name(o.order)},
          {"warmup", o.warmup},
          {"text_prompts", o.text_prompts},
          {"temperature", o.temperature},
          {"cache_salt", o.cache_salt},
          {"max_retries", o.max_retries}};
}

json warmup_json(const std::vector<BenchWarmup>& warmups) {
  json warmup = json::array();
  for (const BenchWarmup& w : warmups) {
    warmup.push_back({{"system_prompt", w.system_prompt},
                      {"ms", w.ms},
                      {"prompt_tokens", w.result.prompt_tokens},
                      {"cached_tokens", w.result.cached_tokens},
                      {"prefill_tokens", w.result.prefill_tokens},
                      {"blocks", w.result.blocks}});
  }
  return warmup;
}

json summary_json(const BenchSummary& s) {
  return {{"requests", s.n_requests},
          {"ok", s.n_ok},
          {"failed", s.n_failed},
          {"retries", s.n_retries},
          {"wall_s", s.wall_s},
          {"requests_per_s", s.requests_per_s},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"cached_tokens", s.cached_tokens},
          {"device_tokens", s.device_tokens},
          {"host_tokens", s.host_tokens},
          {"disk_tokens", s.disk_tokens},
          {"remote_tokens", s.remote_tokens},
          {"hit_ratio",
           {{"total", s.hit_ratio},
            {"device", s.device_hit_ratio},
            {"host", s.host_hit_ratio},
            {"disk", s.disk_hit_ratio},
            {"remote", s.remote_hit_ratio}}},
          {"hits", s.n_hits},
          {"misses", s.n_misses},
          {"ttft_ms", distribution_json(s.ttft_ms)},
          {"ttft_hit_ms", distribution_json(s.ttft_hit_ms)},
          {"ttft_miss_ms", distribution_json(s.ttft_miss_ms)},
          {"server_ttft_ms", distribution_json(s.server_ttft_ms)},
          {"ttft_overhead_ms", distribution_json(s.ttft_overhead_ms)},
          {"itl_ms", distribution_json(s.itl_ms)},
          {"latency_ms", distribution_json(s.latency_ms)},
          {"first_error", s.first_error.empty() ? json(nullptr) : json(s.first_error)}};
}

json record_json(const BenchRecord& r) {
  return {{"index", r.index},
          {"system_prompt", r.system_prompt},
          {"ok", r.ok},
          {"error", r.ok ? json(nullptr) : json(r.error)},
          {"http_status", r.http_status},
          {"retries", r.retries},
          {"retry_wait_ms", r.retry_wait_ms},
          {"start_ms", r.start_ms},
          {"ttft_ms", or_null(r.ttft_ms)},
          {"latency_ms", or_null(r.latency_ms)},
          {"itl_ms", r.itl_ms},
          {"content_chunks", r.n_content_chunks},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"cached_tokens", r.cached_tokens},
          {"device_tokens", r.device_tokens},
          {"host_tokens", r.host_tokens},
          {"disk_tokens", r.disk_tokens},
          {"remote_tokens", r.remote_tokens},
          {"prefill_tokens", r.prefill_tokens},
          {"restore_path", r.onboard_path},
          {"finish_reason", r.finish_reason},
          {"cache_hit", r.cache_hit()},
          {"server_ttft_ms", or_null(r.server_ttft_ms)},
          {"server_queue_ms", or_null(r.server_queue_ms)},
          {"server_restore_ms", or_null(r.server_onboard_ms)},
          {"server_prefill_ms", or_null(r.server_prefill_ms)},
          {"server_decode_ms", or_null(r.server_decode_ms)}};
}

}  // namespace

json bench_report_json(const BenchReport& report) {
  json out = json::object();
  out["format"] = "prefixd-bench/1";
  out["server"] = {{"host", report.host}, {"port", report.port}};
  out["options"] = options_json(report.options);
  out["warmup"] = warmup_json(report.warmup);
  out["summary"] = summary_json(report.summary);
  json requests = json::array();
  for (const BenchRecord& r : report.records) requests.push_back(record_json(r));
  out["requests"] = std::move(requests);
  return out;
}

std::string format_bench_summary(const BenchReport& report) {
  const BenchOptions& o = report.options;
  const BenchSummary& s = report.summary;
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "prefixd bench  %s:%d  K=%d S=%d Q=%d C=%d N=%d O=%d seed=%llu order=%s%s%s\n",
                report.host.c_str(), report.port, o.n_system_prompts, o.system_tokens,
                o.question_tokens, o.concurrency, o.n_requests, o.output_tokens,
                static_cast<unsigned long long>(o.seed), bench_order_name(o.order),
                o.warmup ? " warmup" : "", o.text_prompts ? " text" : "");
  out += buf;
  if (!report.warmup.empty()) {
    double total_ms = 0;
    int64_t prefill = 0;
    for (const BenchWarmup& w : report.warmup) {
      total_ms += w.ms;
      prefill += w.result.prefill_tokens;
    }
    std::snprintf(buf, sizeof(buf), "warmup      %zu prefetches, %lld tokens prefilled, %.1f ms\n",
                  report.warmup.size(), static_cast<long long>(prefill), total_ms);
    out += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "requests    %lld ok, %lld failed, %lld retries (429), wall %.3f s\n",
                static_cast<long long>(s.n_ok), static_cast<long long>(s.n_failed),
                static_cast<long long>(s.n_retries), s.wall_s);
  out += buf;
  std::snprintf(
      buf, sizeof(buf), "throughput  %.2f req/s, %.1f output tok/s (%lld output tokens)\n",
      s.requests_per_s, s.output_tokens_per_s, static_cast<long long>(s.completion_tokens));
  out += buf;
  std::snprintf(buf, sizeof(buf),
                "cache       hit ratio %s (device %s, host %s, disk %s, remote %s) of %lld prompt "
                "tokens; %lld hits, %lld misses\n",
                pct(s.hit_ratio).c_str(), pct(s.device_hit_ratio).c_str(),
                pct(s.host_hit_ratio).c_str(), pct(s.disk_hit_ratio).c_str(),
                pct(s.remote_hit_ratio).c_str(),
                static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.n_hits),
                static_cast<long long>(s.n_misses));
  out += buf;
  std::snprintf(buf, sizeof(buf), "  %-20s %6s %10s %10s %10s %10s\n", "(ms)", "n", "mean", "p50",
                "p95", "p99");
  out += buf;
  table_row(&out, "TTFT", s.ttft_ms);
  table_row(&out, "TTFT cache hit", s.ttft_hit_ms);
  table_row(&out, "TTFT cache miss", s.ttft_miss_ms);
  table_row(&out, "server TTFT", s.server_ttft_ms);
  table_row(&out, "TTFT - server TTFT", s.ttft_overhead_ms);
  table_row(&out, "inter-token", s.itl_ms);
  table_row(&out, "latency", s.latency_ms);
  if (!s.first_error.empty()) out += "first error: " + s.first_error + "\n";
  return out;
}

}  // namespace prefixd::client
