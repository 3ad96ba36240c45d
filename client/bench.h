// RAG load generator behind `prefixctl bench`: K system prompts of S tokens, each request one of
// them followed by its own Q-token question, sent by C concurrent streaming clients; measures
// client and server TTFT, inter-token latency, throughput and the cache hit ratio by tier.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/result.h"

namespace prefixd::client {

enum class BenchOrder {
  kRoundRobin,  // request i uses system prompt i % K
  kRandom,      // request i uses a system prompt drawn uniformly from the seeded RNG
};

// The workload. Validated by validate(); run_bench refuses invalid options.
struct BenchOptions {
  int32_t n_system_prompts = 4;   // K
  int32_t system_tokens = 2000;   // S, tokens (words with text_prompts) per system prompt
  int32_t question_tokens = 100;  // Q, tokens (words) per question; every request has its own
  int32_t concurrency = 1;        // C, client threads, each with one keep-alive connection
  int32_t n_requests = 32;        // N, requests in total (warmup excluded)
  int32_t output_tokens = 16;     // O, max_tokens of every request
  uint64_t seed = 1;              // the whole workload is a function of the options
  int32_t first_question = 0;     // request i asks question first_question + i (a later run on
                                  // the same system prompts with questions not asked before)
  int32_t vocab_lo = 3;           // token ids are drawn uniformly from [vocab_lo, vocab_hi)
  int32_t vocab_hi = 1000;
  BenchOrder order = BenchOrder::kRoundRobin;
  bool warmup = false;        // prefetch every system prompt before the timed run
  bool text_prompts = false;  // send text (seeded pseudo-words) instead of token ids;
                              // prompt sizes are then known only from the server's usage
  double temperature = 0.0;   // 0 = greedy
  std::string cache_salt;     // sent with every request when not empty
  int32_t max_retries = 20;   // per request, on 429 (waits Retry-After, else 100 ms)

  Status validate() const;
};

// One planned request: which system prompt and the full prompt (system + question).
struct BenchPlanEntry {
  int32_t system_prompt = 0;  // index into BenchWorkload::system_prompts
  Prompt prompt;              // ids: system ids then question ids; text: joined by a space
};

struct BenchWorkload {
  std::vector<Prompt> system_prompts;    // K entries, S ids (or S words) each
  std::vector<BenchPlanEntry> requests;  // N entries in submission order
};

// Deterministic in the options: system prompt k comes from an RNG stream seeded by (seed, k),
// question i from one seeded by (seed, first_question + i), the random order from one seeded by seed; so N or C
// never change the system prompts. Options must be valid.
BenchWorkload build_workload(const BenchOptions& options);

// The pseudo-word that text prompts use for a drawn id (lower-case ASCII letters).
std::string bench_word(int32_t id);

// One request's measurements. Times in milliseconds on the client's steady clock; a value of -1
// means "not measured" (written as null in JSON).
struct BenchRecord {
  int32_t index = 0;  // position in the plan
  int32_t system_prompt = 0;
  bool ok = false;
  std::string error;           // the client's error message when !ok
  int32_t http_status = 0;     // of the final attempt (0 = no HTTP answer)
  int32_t retries = 0;         // 429 answers retried
  double retry_wait_ms = 0;    // time slept before retries
  double start_ms = 0;         // final attempt's start, since the run began
  double ttft_ms = -1;         // client: attempt start -> first chunk with content
  double latency_ms = -1;      // client: attempt start -> [DONE]
  std::vector<double> itl_ms;  // gaps between consecutive content chunks
  int64_t n_content_chunks = 0;
  int64_t prompt_tokens = 0;      // from the final usage chunk
  int64_t completion_tokens = 0;  // usage, or content chunks when the server sent no usage
  int64_t cached_tokens = 0;      // prefix_cache.cached_tokens (else usage...cached_tokens)
  int64_t device_tokens = 0;
  int64_t host_tokens = 0;
  int64_t disk_tokens = 0;
  int64_t remote_tokens = 0;
  int64_t prefill_tokens = 0;
  std::string onboard_path;  // prefix_cache.restore_path (written as restore_path)
  std::string finish_reason;
  double server_ttft_ms = -1;  // prefix_cache.ttft_ms
  double server_queue_ms = -1;
  double server_onboard_ms = -1;  // prefix_cache.restore_ms (written as server_restore_ms)
  double server_prefill_ms = -1;
  double server_decode_ms = -1;
  bool cache_hit() const { return cached_tokens > 0; }
};

// A sample's size and order statistics. Percentiles interpolate linearly between closest ranks
// (rank = p/100 * (n-1) on the sorted sample, numpy's default). All -1 when n == 0.
struct Distribution {
  int64_t n = 0;
  double mean = -1, min = -1, max = -1, p50 = -1, p95 = -1, p99 = -1;
};

// p in [0, 100] of an ascending-sorted, non-empty sample.
double percentile_sorted(const std::vector<double>& sorted, double p);
Distribution summarize(std::vector<double> values);

struct BenchSummary {
  int64_t n_requests = 0, n_ok = 0, n_failed = 0, n_retries = 0;
  double wall_s = 0;
  double requests_per_s = 0;       // n_ok / wall_s
  double output_tokens_per_s = 0;  // completion_tokens / wall_s
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0, device_tokens = 0, host_tokens = 0, disk_tokens = 0, remote_tokens = 0;
  double hit_ratio = 0;  // cached_tokens / prompt_tokens (0 when no prompt tokens)
  double device_hit_ratio = 0, host_hit_ratio = 0, disk_hit_ratio = 0, remote_hit_ratio = 0;
  int64_t n_hits = 0, n_misses = 0;  // ok requests with cached_tokens > 0 / == 0
  Distribution ttft_ms, ttft_hit_ms, ttft_miss_ms;
  Distribution server_ttft_ms;
  Distribution ttft_overhead_ms;  // per request: client ttft_ms - server_ttft_ms
  Distribution itl_ms;            // all gaps of all ok requests
  Distribution latency_ms;
  std::string first_error;  // first failed request's message, "" when none
};

// Aggregates ok records (failed ones only count in n_failed / first_error).
BenchSummary summarize_records(const std::vector<BenchRecord>& records, double wall_s);

struct BenchWarmup {
  int32_t system_prompt = 0;
  PrefetchResult result;
  double ms = 0;
};

struct BenchReport {
  BenchOptions options;
  std::string host;
  int32_t port = 0;
  std::vector<BenchWarmup> warmup;   // empty unless options.warmup
  std::vector<BenchRecord> records;  // N entries, by plan index
  BenchSummary summary;
};

// Called after each finished request from the worker threads (serialized by a mutex).
using BenchProgress = std::function<void(int32_t n_done, int32_t n_total)>;

// Checks /health, runs the warmup (a failed prefetch fails the run), then the timed run. Failed
// requests are recorded, not fatal. Blocks until every request has finished.
Result<BenchReport> run_bench(const ClientOptions& client_options, const BenchOptions& options,
                              const BenchProgress& progress = nullptr);

// The JSON written by `prefixctl bench --json PATH` (format "prefixd-bench/1"):
// {
//   "format": "prefixd-bench/1",
//   "server": {"host": str, "port": int},
//   "options": {"system_prompts": K, "system_tokens": S, "question_tokens": Q,
//               "concurrency": C, "requests": N, "output_tokens": O, "seed": int,
//               "vocab_lo": int, "vocab_hi": int, "order": "round-robin"|"random",
//               "warmup": bool, "text_prompts": bool, "temperature": float,
//               "cache_salt": str, "max_retries": int},
//   "warmup": [{"system_prompt": k, "ms": float, "prompt_tokens": int, "cached_tokens": int,
//               "prefill_tokens": int, "blocks": int}],
//   "summary": {"requests": int, "ok": int, "failed": int, "retries": int,
//               "wall_s": float, "requests_per_s": float, "output_tokens_per_s": float,
//               "prompt_tokens": int, "completion_tokens": int, "cached_tokens": int,
//               "device_tokens": int, "host_tokens": int, "disk_tokens": int, "remote_tokens": int,
//               "hit_ratio": {"total": float, "device": float, "host": float, "disk": float,
//                             "remote": float},
//               "hits": int, "misses": int,
//               "ttft_ms": D, "ttft_hit_ms": D, "ttft_miss_ms": D, "server_ttft_ms": D,
//               "ttft_overhead_ms": D, "itl_ms": D, "latency_ms": D,
//               "first_error": str|null},
//   "requests": [{"index": int, "system_prompt": int, "ok": bool, "error": str|null,
//                 "http_status": int, "retries": int, "retry_wait_ms": float,
//                 "start_ms": float, "ttft_ms": float|null, "latency_ms": float|null,
//                 "itl_ms": [float], "content_chunks": int,
//                 "prompt_tokens": int, "completion_tokens": int, "cached_tokens": int,
//                 "device_tokens": int, "host_tokens": int, "disk_tokens": int, "remote_tokens": int,
//                 "prefill_tokens": int, "restore_path": str, "finish_reason": str,
//                 "cache_hit": bool, "server_ttft_ms": float|null,
//                 "server_queue_ms": float|null, "server_restore_ms": float|null,
//                 "server_prefill_ms": float|null, "server_decode_ms": float|null}]
// }
// where D = {"n": int, "mean": float|null, "min": float|null, "max": float|null,
//            "p50": float|null, "p95": float|null, "p99": float|null} (null when n == 0).
// Times are milliseconds (wall_s seconds); ratios are fractions in [0, 1].
nlohmann::json bench_report_json(const BenchReport& report);

// The readable summary table printed by `prefixctl bench`.
std::string format_bench_summary(const BenchReport& report);

const char* bench_order_name(BenchOrder order);

}  // namespace prefixd::client
