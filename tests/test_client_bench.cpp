// Tests of the load generator behind `prefixctl bench` (client/bench.*): percentiles and
// summaries, the deterministic workload, option validation, and run_bench against a fake daemon
// (tests/fake_daemon.h); no real daemon or model is needed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "client/bench.h"
#include "client/client.h"
#include "tests/fake_daemon.h"

using nlohmann::json;
using namespace prefixd::client;
using prefixd::Result;
using prefixd::testing::FakeDaemon;
using prefixd::testing::serve_error;
using prefixd::testing::serve_sse;
using prefixd::testing::unused_port;

TEST_CASE("percentile_sorted interpolates linearly between closest ranks") {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK(percentile_sorted(v, 0) == 1.0);
  CHECK(percentile_sorted(v, 100) == 10.0);
  CHECK(percentile_sorted(v, 50) == doctest::Approx(5.5).epsilon(1e-12));
  CHECK(percentile_sorted(v, 95) == doctest::Approx(9.55).epsilon(1e-12));
  CHECK(percentile_sorted(v, 99) == doctest::Approx(9.91).epsilon(1e-12));
  CHECK(percentile_sorted({7}, 99) == 7.0);
  CHECK(percentile_sorted({10, 20}, 25) == 12.5);

  Distribution d = summarize({30, 10, 20, 40});  // unsorted on purpose
  CHECK(d.n == 4);
  CHECK(d.mean == 25.0);
  CHECK(d.min == 10.0);
  CHECK(d.max == 40.0);
  CHECK(d.p50 == 25.0);
  CHECK(d.p95 == doctest::Approx(38.5).epsilon(1e-12));
  CHECK(d.p99 == doctest::Approx(39.7).epsilon(1e-12));
  Distribution empty = summarize({});
  CHECK(empty.n == 0);
  CHECK(empty.p50 == -1);
}

TEST_CASE("summarize_records splits TTFT by hit/miss and computes ratios by tier") {
  std::vector<BenchRecord> records(4);
  // 0: miss
  records[0].ok = true;
  records[0].ttft_ms = 100;
  records[0].server_ttft_ms = 98;
  records[0].latency_ms = 200;
  records[0].itl_ms = {10, 20};
  records[0].prompt_tokens = 100;
  records[0].completion_tokens = 3;
  // 1: hit, 64 device + 16 host
  records[1].ok = true;
  records[1].ttft_ms = 20;
  records[1].server_ttft_ms = 19;
  records[1].latency_ms = 50;
  records[1].itl_ms = {30};
  records[1].prompt_tokens = 100;
  records[1].completion_tokens = 2;
  records[1].cached_tokens = 80;
  records[1].device_tokens = 64;
  records[1].host_tokens = 16;
  // 2: hit from disk, retried once
  records[2].ok = true;
  records[2].ttft_ms = 40;
  records[2].server_ttft_ms = 37;
  records[2].latency_ms = 60;
  records[2].prompt_tokens = 100;
  records[2].completion_tokens = 1;
  records[2].cached_tokens = 48;
  records[2].disk_tokens = 48;
  records[2].retries = 1;
  // 3: failed
  records[3].ok = false;
  records[3].error = "HTTP 500: boom";
  records[3].retries = 2;

  BenchSummary s = summarize_records(records, 2.0);
  CHECK(s.n_requests == 4);
  CHECK(s.n_ok == 3);
  CHECK(s.n_failed == 1);
  CHECK(s.n_retries == 3);
  CHECK(s.first_error == "HTTP 500: boom");
  CHECK(s.requests_per_s == 1.5);
  CHECK(s.output_tokens_per_s == 3.0);
  CHECK(s.prompt_tokens == 300);
  CHECK(s.cached_tokens == 128);
  CHECK(s.hit_ratio == doctest::Approx(128.0 / 300.0).epsilon(1e-12));
  CHECK(s.device_hit_ratio == doctest::Approx(64.0 / 300.0).epsilon(1e-12));
  CHECK(s.host_hit_ratio == doctest::Approx(16.0 / 300.0).epsilon(1e-12));
  CHECK(s.disk_hit_ratio == doctest::Approx(48.0 / 300.0).epsilon(1e-12));
  CHECK(s.n_hits == 2);
  CHECK(s.n_misses == 1);
  CHECK(s.ttft_ms.n == 3);
  CHECK(s.ttft_ms.p50 == 40.0);
  CHECK(s.ttft_hit_ms.n == 2);
  CHECK(s.ttft_hit_ms.p50 == 30.0);
  CHECK(s.ttft_miss_ms.n == 1);
  CHECK(s.ttft_miss_ms.p50 == 100.0);
  CHECK(s.server_ttft_ms.mean == doctest::Approx((98.0 + 19 + 37) / 3).epsilon(1e-12));
  CHECK(s.ttft_overhead_ms.n == 3);
  CHECK(s.ttft_overhead_ms.p50 == 2.0);
  CHECK(s.ttft_overhead_ms.max == 3.0);
  CHECK(s.itl_ms.n == 3);
  CHECK(s.itl_ms.p50 == 20.0);
  CHECK(s.latency_ms.max == 200.0);
}

TEST_CASE("build_workload is deterministic, sized exactly and round-robins system prompts") {
  BenchOptions o;
  o.n_system_prompts = 3;
  o.system_tokens = 50;
  o.question_tokens = 7;
  o.n_requests = 10;
  o.seed = 11;
  o.vocab_lo = 100;
  o.vocab_hi = 120;
  BenchWorkload a = build_workload(o);
  BenchWorkload b = build_workload(o);
  REQUIRE(a.system_prompts.size() == 3);
  REQUIRE(a.requests.size() == 10);
  std::set<std::vector<int32_t>> questions;
  for (int32_t i = 0; i < 10; ++i) {
    const BenchPlanEntry& e = a.requests[static_cast<size_t>(i)];
    CHECK(e.system_prompt == i % 3);
    const auto& ids = std::get<std::vector<int32_t>>(e.prompt);
    REQUIRE(ids.size() == 57);
    for (int32_t id : ids) REQUIRE((id >= 100 && id < 120));
    const auto& sys =
        std::get<std::vector<int32_t>>(a.system_prompts[static_cast<size_t>(e.system_prompt)]);
    CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 50) == sys);
    questions.insert(std::vector<int32_t>(ids.begin() + 50, ids.end()));
    CHECK(std::get<std::vector<int32_t>>(b.requests[static_cast<size_t>(i)].prompt) == ids);
  }
  CHECK(questions.size() == 10);
  CHECK(a.system_prompts[0] != a.system_prompts[1]);

  // More requests or another order never change the system prompts; another seed does.
  BenchOptions more = o;
  more.n_requests = 40;
  more.order = BenchOrder::kRandom;
  BenchWorkload c = build_workload(more);
  CHECK(c.system_prompts == a.system_prompts);
  std::set<int32_t> used;
  for (const BenchPlanEntry& e : c.requests) {
    REQUIRE((e.system_prompt >= 0 && e.system_prompt < 3));
    used.insert(e.system_prompt);
  }
  CHECK(used.size() == 3);
  BenchOptions other = o;
  other.seed = 12;
  CHECK(build_workload(other).system_prompts != a.system_prompts);
}

TEST_CASE("text workloads join pseudo-words; bench_word is injective on the default range") {
  std::set<std::string> words;
  for (int32_t id = 0; id < 1000; ++id) words.insert(bench_word(id));
  CHECK(words.size() == 1000);
  CHECK(bench_word(0) == "ba");
  CHECK(bench_word(80) == "baca");
  BenchOptions o;
  o.n_system_prompts = 1;
  o.system_tokens = 4;
  o.question_tokens = 3;
  o.n_requests = 2;
  o.text_prompts = true;
  BenchWorkload w = build_workload(o);
  const std::string& sys = std::get<std::string>(w.system_prompts[0]);
  const std::string& full = std::get<std::string>(w.requests[1].prompt);
  CHECK(std::count(sys.begin(), sys.end(), ' ') == 3);
  CHECK(std::count(full.begin(), full.end(), ' ') == 6);
  CHECK(full.rfind(sys + " ", 0) == 0);
}

TEST_CASE("BenchOptions::validate refuses impossible workloads") {
  BenchOptions o;
  CHECK(o.validate().ok());
  BenchOptions bad = o;
  bad.vocab_hi = bad.vocab_lo;
  CHECK_FALSE(bad.validate().ok());
  bad = o;
  bad.concurrency = 0;
  CHECK_FALSE(bad.validate().ok());
  bad = o;
  bad.system_tokens = 0;
  bad.question_tokens = 0;
  CHECK_FALSE(bad.validate().ok());
}

namespace {

// A fake daemon for the bench: streams O one-token chunks; a prompt whose first S ids were seen
// before (by a completion or a prefetch) gets S cached device tokens. The first completion
// request is answered 429 once.
struct BenchFake {
  FakeDaemon d;
  int32_t system_tokens;
  std::mutex mu;
  std::set<std::vector<int32_t>> seen;
  std::atomic<int> n_completion_posts{0};
  std::atomic<int> n_prefetch{0};

  explicit BenchFake(int32_t s) : system_tokens(s) {
    d.server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok","backend":"cpu"})", "application/json");
    });
    d.server.Post(
        "/v1/cache/prefetch", [this](const httplib::Request& req, httplib::Response& res) {
          std::vector<int32_t> ids = json::parse(req.body)["prompt"].get<std::vector<int32_t>>();
          ++n_prefetch;
          {
            std::lock_guard<std::mutex> lock(mu);
            seen.insert(ids);
          }
          res.set_content(json{{"prompt_tokens", ids.size()},
                               {"cached_tokens", 0},
                               {"prefill_tokens", ids.size()},
                               {"blocks", ids.size() / 16}}
                              .dump(),
                          "application/json");
        });
    d.server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      if (n_completion_posts.fetch_add(1) == 0) {
        serve_error(res, 429, "queue full", "rate_limit_error", nullptr, nullptr);
        res.set_header("Retry-After", "0");
        return;
      }
      json body = json::parse(req.body);
      std::vector<int32_t> ids = body["prompt"].get<std::vector<int32_t>>();
      int o = body["max_tokens"].get<int>();
      std::vector<int32_t> sys(ids.begin(), ids.begin() + system_tokens);
      int64_t cached = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (seen.count(sys)) cached = system_tokens;
        seen.insert(sys);
      }
      std::string sse;
      for (int k = 0; k < o; ++k) {
        json chunk = {{"object", "text_completion"},
                      {"choices",
                       {{{"index", 0},
                         {"text", "t"},
                         {"token_ids", {k}},
                         {"finish_reason", k + 1 == o ? json("length") : json(nullptr)}}}}};
        sse += "data: " + chunk.dump() + "\n\n";
      }
      int64_t n_prompt = static_cast<int64_t>(ids.size());
      json usage_chunk = {{"object", "text_completion"},
                          {"choices", json::array()},
                          {"usage",
                           {{"prompt_tokens", n_prompt},
                            {"completion_tokens", o},
                            {"total_tokens", n_prompt + o},
                            {"prompt_tokens_details", {{"cached_tokens", cached}}}}},
                          {"prefix_cache",
                           {{"cached_tokens", cached},
                            {"device_tokens", cached},
                            {"host_tokens", 0},
                            {"disk_tokens", 0},
                            {"prefill_tokens", n_prompt - cached},
                            {"restore_path", "none"},
                            {"queue_ms", 0.0},
                            {"restore_ms", 0.0},
                            {"prefill_ms", 0.5},
                            {"ttft_ms", 0.75},
                            {"decode_ms", 1.0}}}};
      sse += "data: " + usage_chunk.dump() + "\n\ndata: [DONE]\n\n";
      serve_sse(res, sse);
    });
    d.start();
  }
};

}  // namespace

TEST_CASE("run_bench against a fake daemon: exact hit ratio, token counts and a 429 retry") {
  BenchFake fake(40);
  BenchOptions o;
  o.n_system_prompts = 2;
  o.system_tokens = 40;
  o.question_tokens = 8;
  o.concurrency = 1;
  o.n_requests = 6;
  o.output_tokens = 5;
  int32_t last_done = 0;
  Result<BenchReport> r = run_bench(fake.d.options(), o, [&](int32_t done, int32_t total) {
    CHECK(total == 6);
    CHECK(done == last_done + 1);
    last_done = done;
  });
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(last_done == 6);
  const BenchSummary& s = r->summary;
  CHECK(s.n_ok == 6);
  CHECK(s.n_failed == 0);
  CHECK(s.n_retries == 1);
  CHECK(r->records[0].retries == 1);
  CHECK(r->records[0].http_status == 200);
  CHECK(s.prompt_tokens == 6 * 48);
  CHECK(s.completion_tokens == 30);
  CHECK(s.n_misses == 2);
  CHECK(s.n_hits == 4);
  CHECK(s.cached_tokens == 4 * 40);
  CHECK(s.hit_ratio == doctest::Approx(160.0 / 288.0).epsilon(1e-12));
  CHECK(s.device_hit_ratio == s.hit_ratio);
  CHECK(s.host_hit_ratio == 0.0);
  CHECK(s.ttft_ms.n == 6);
  CHECK(s.ttft_hit_ms.n == 4);
  CHECK(s.ttft_miss_ms.n == 2);
  CHECK(s.itl_ms.n == 6 * 4);
  CHECK(s.server_ttft_ms.p50 == 0.75);
  for (int32_t i = 0; i < 6; ++i) {
    const BenchRecord& rec = r->records[static_cast<size_t>(i)];
    CHECK(rec.index == i);
    CHECK(rec.system_prompt == i % 2);
    CHECK(rec.cache_hit() == (i >= 2));
    CHECK(rec.n_content_chunks == 5);
    CHECK(rec.finish_reason == "length");
    CHECK(rec.prefill_tokens == (i >= 2 ? 8 : 48));
    CHECK(rec.ttft_ms >= 0);
    CHECK(rec.latency_ms >= rec.ttft_ms);
  }

  json j = bench_report_json(r.value());
  json round = json::parse(j.dump());
  CHECK(round["format"] == "prefixd-bench/1");
  CHECK(round["options"]["system_prompts"] == 2);
  CHECK(round["options"]["order"] == "round-robin");
  CHECK(round["summary"]["hits"] == 4);
  CHECK(round["summary"]["retries"] == 1);
  CHECK(round["summary"]["first_error"].is_null());
  CHECK(round["summary"]["hit_ratio"]["device"].get<double>() == s.device_hit_ratio);
  CHECK(round["summary"]["ttft_ms"]["n"] == 6);
  CHECK(round["requests"].size() == 6);
  CHECK(round["requests"][3]["cache_hit"] == true);
  CHECK(round["requests"][3]["itl_ms"].size() == 4);
  CHECK(round["requests"][3]["error"].is_null());
  CHECK(round["warmup"].empty());
  std::string table = format_bench_summary(r.value());
  CHECK(table.find("6 ok, 0 failed, 1 retries") != std::string::npos);
  CHECK(table.find("hit ratio 55.6% (device 55.6%, host 0.0%, disk 0.0%, remote 0.0%)") != std::string::npos);
}

TEST_CASE("run_bench with warmup prefetches every system prompt; concurrency keeps all records") {
  BenchFake fake(32);
  BenchOptions o;
  o.n_system_prompts = 3;
  o.system_tokens = 32;
  o.question_tokens = 4;
  o.concurrency = 4;
  o.n_requests = 12;
  o.output_tokens = 3;
  o.warmup = true;
  o.order = BenchOrder::kRandom;
  Result<BenchReport> r = run_bench(fake.d.options(), o);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(fake.n_prefetch == 3);
  REQUIRE(r->warmup.size() == 3);
  CHECK(r->warmup[2].result.prefill_tokens == 32);
  CHECK(r->summary.n_ok == 12);
  CHECK(r->summary.n_hits == 12);  // every system prompt was warmed
  CHECK(r->summary.hit_ratio == doctest::Approx(32.0 / 36.0).epsilon(1e-12));
  CHECK(r->summary.completion_tokens == 36);
  for (int32_t i = 0; i < 12; ++i) CHECK(r->records[static_cast<size_t>(i)].index == i);
  json j = bench_report_json(r.value());
  CHECK(j["warmup"].size() == 3);
  CHECK(j["warmup"][0]["prefill_tokens"] == 32);
  CHECK(j["options"]["order"] == "random");
}

TEST_CASE("run_bench fails fast when the daemon is unreachable and records failed requests") {
  const int dead_port = unused_port();
  ClientOptions opt;
  opt.port = dead_port;
  opt.connect_timeout_s = 1;
  BenchOptions o;
  o.n_requests = 2;
  Result<BenchReport> r = run_bench(opt, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("bench: daemon not healthy: ") == 0);

  FakeDaemon d;
  d.server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok","backend":"cpu"})", "application/json");
  });
  d.server.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    serve_error(res, 400, "token id 999 is outside the vocabulary (0..500)",
                "invalid_request_error", "prompt", nullptr);
  });
  d.start();
  o.n_system_prompts = 1;
  o.system_tokens = 4;
  o.question_tokens = 2;
  Result<BenchReport> failed = run_bench(d.options(), o);
  REQUIRE(failed.ok());
  CHECK(failed->summary.n_failed == 2);
  CHECK(failed->summary.n_ok == 0);
  CHECK(failed->records[0].http_status == 400);
  CHECK(failed->summary.first_error == "HTTP 400: token id 999 is outside the vocabulary (0..500)");
  json j = bench_report_json(failed.value());
  CHECK(j["summary"]["ttft_ms"]["p50"].is_null());
  CHECK(j["requests"][0]["ttft_ms"].is_null());
  CHECK(j["requests"][1]["error"] == "HTTP 400: token id 999 is outside the vocabulary (0..500)");
}
