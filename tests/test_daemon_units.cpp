// Unit tests of the daemon's pure parts: request validation (JSON body ->
// engine Request or ApiError), server option validation, the CPU instruction
// set option, the admission gate and the Prometheus exposition.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include "daemon/cpu_isa_option.h"
#include "daemon/daemon_context.h"
#include "daemon/metrics.h"
#include "daemon/request_validation.h"
#include "daemon/server_options.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"

using nlohmann::json;
using namespace prefixd;

namespace {

ModelInfo ids_only_model() {
  ModelInfo m;
  m.id = "m";
  m.n_ctx = 512;
  m.n_vocab = 512;
  return m;
}

// The ApiError of a failed validation (fails the test when it succeeded).
ApiError error_of(const ApiResult<GenerationRequest>& r) {
  REQUIRE(std::holds_alternative<ApiError>(r));
  return std::get<ApiError>(r);
}

}  // namespace

TEST_CASE("parse_json_body refuses malformed JSON and non-objects") {
  CHECK(std::holds_alternative<json>(parse_json_body("{\"a\": 1}")));
  auto bad = parse_json_body("{\"a\": ");
  REQUIRE(std::holds_alternative<ApiError>(bad));
  CHECK(std::get<ApiError>(bad).status == 400);
  CHECK(std::get<ApiError>(bad).code == "invalid_json");
  CHECK(std::holds_alternative<ApiError>(parse_json_body("[1]")));
  CHECK(std::holds_alternative<ApiError>(parse_json_body("")));
  // A number beyond double range is malformed input, not an exception (found by fuzzing).
  auto overflow = parse_json_body("{\"top_p\": 1e400}");
  REQUIRE(std::holds_alternative<ApiError>(overflow));
  CHECK(std::get<ApiError>(overflow).code == "invalid_json");
}

TEST_CASE("validate_generation maps OpenAI fields onto the engine Request") {
  json body = {{"prompt", {1, 2, 3}}, {"max_tokens", 7},
               {"temperature", 0.5},  {"top_p", 0.9},
               {"top_k", 40},         {"min_p", 0.05},
               {"seed", 1234},        {"stop", "\n"},
               {"stream", true},      {"stream_options", {{"include_usage", true}}},
               {"cache_salt", "t1"},  {"repetition_penalty", 1.1},
               {"user", "u"},         {"n", 1}};
  auto r = validate_generation(body, ids_only_model(), false);
  REQUIRE(std::holds_alternative<GenerationRequest>(r));
  const GenerationRequest& g = std::get<GenerationRequest>(r);
  CHECK(g.request.prompt == std::vector<int32_t>{1, 2, 3});
  CHECK(g.request.max_tokens == 7);
  CHECK(g.request.sampling.temperature == doctest::Approx(0.5));
  CHECK(g.request.sampling.top_p == doctest::Approx(0.9));
  CHECK(g.request.sampling.top_k == 40);
  CHECK(g.request.sampling.min_p == doctest::Approx(0.05));
  CHECK(g.request.sampling.repetition_penalty == doctest::Approx(1.1));
  CHECK(g.request.sampling.has_seed);
  CHECK(g.request.sampling.seed == 1234);
  CHECK(g.request.stop == std::vector<std::string>{"\n"});
  CHECK(g.request.cache_salt == "t1");
  CHECK(g.stream);
  CHECK(g.include_usage);
  CHECK(!g.chat);
  CHECK(g.model == "m");
}

TEST_CASE("validate_generation defaults: 16 tokens, capped by the context") {
  auto r = validate_generation(json{{"prompt", {1, 2}}}, ids_only_model(), false);
  REQUIRE(std::holds_alternative<GenerationRequest>(r));
  CHECK(std::get<GenerationRequest>(r).request.max_tokens == 16);
  CHECK(std::get<GenerationRequest>(r).request.sampling.temperature == doctest::Approx(1.0));
  CHECK(!std::get<GenerationRequest>(r).request.sampling.has_seed);
  std::vector<int32_t> ids(505, 7);
  auto near_end = validate_generation(json{{"prompt", ids}}, ids_only_model(), false);
  REQUIRE(std::holds_alternative<GenerationRequest>(near_end));
  CHECK(std::get<GenerationRequest>(near_end).request.max_tokens == 7);
}

TEST_CASE("validate_generation errors name the field, with the right status and code") {
  const ModelInfo m = ids_only_model();
  ApiError e = error_of(validate_generation(json{{"prompt", {1}}, {"max_tokens", "x"}}, m, false));
  CHECK(e.status == 400);
  CHECK(e.param == "max_tokens");
  CHECK(e.code == "invalid_type");

  e = error_of(validate_generation(json{{"prompt", {1}}, {"model", "other"}}, m, false));
  CHECK(e.status == 404);
  CHECK(e.code == "model_not_found");

  e = error_of(validate_generation(json{{"prompt", json::array()}}, m, false));
  CHECK(e.code == "empty_prompt");

  e = error_of(validate_generation(json{{"prompt", {1, 512}}}, m, false));
  CHECK(e.code == "invalid_token_id");
  CHECK(e.message.find("512") != std::string::npos);
  CHECK(e.message.find("0..511") != std::string::npos);

  e = error_of(validate_generation(json{{"prompt", {1, 5000000000LL}}}, m, false));
  CHECK(e.code == "invalid_token_id");

  e = error_of(validate_generation(json{{"prompt", {1, 2.5}}}, m, false));
  CHECK(e.code == "invalid_type");

  std::vector<int32_t> ids(500, 3);
  e = error_of(validate_generation(json{{"prompt", ids}, {"max_tokens", 13}}, m, false));
  CHECK(e.code == "context_length_exceeded");
  CHECK(e.param == "max_tokens");
  CHECK(e.message ==
        "the prompt has 500 tokens and max_tokens is 13; together 513 tokens exceed the context "
        "length of 512 tokens");

  e = error_of(validate_generation(json{{"prompt", {1}}, {"n", 3}}, m, false));
  CHECK(e.param == "n");
  e = error_of(validate_generation(json{{"prompt", {1}}, {"temperature", -1}}, m, false));
  CHECK(e.code == "invalid_value");
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", {1, 2}}}, m, false));
  CHECK(e.param == "stop");
  e = error_of(validate_generation(json{{"prompt", {{1}, {2}}}}, m, false));
  CHECK(e.code == "unsupported_value");
  e = error_of(validate_generation(json{{"prompt", "text"}}, m, false));  // no tokenizer
  CHECK(e.code == "no_tokenizer");
  e = error_of(validate_generation(json{{"messages", json::array()}}, m, true));
  CHECK(e.code == "empty_prompt");
  e = error_of(
      validate_generation(json{{"messages", {{{"role", "user"}, {"content", 5}}}}}, m, true));
  CHECK(e.param == "messages[0].content");
}

TEST_CASE("chat accepts max_completion_tokens as max_tokens") {
  // Without a chat template the messages are refused after the fields parse.
  auto r = validate_generation(
      json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", -2}},
      ids_only_model(), true);
  ApiError e = error_of(r);
  CHECK(e.param == "max_completion_tokens");
}

TEST_CASE("text prompts are tokenized with BOS (stories260K tokenizer)") {
  auto file = GgufFile::open(std::string(PREFIXD_SHARED_DIR) + "/models/stories260K.gguf");
  REQUIRE(file.ok());
  auto tok = Tokenizer::from_gguf(*file.value());
  REQUIRE(tok.ok());
  ModelInfo m = ids_only_model();
  m.tokenizer = tok.value().get();
  auto r = validate_generation(json{{"prompt", "Once upon a time"}}, m, false);
  REQUIRE(std::holds_alternative<GenerationRequest>(r));
  CHECK(std::get<GenerationRequest>(r).request.prompt ==
        std::vector<int32_t>{1, 403, 407, 261, 378});
  auto p = validate_prompt_body(json{{"prompt", "Once upon a time"}, {"cache_salt", "s"}}, m);
  REQUIRE(std::holds_alternative<PromptRequest>(p));
  CHECK(std::get<PromptRequest>(p).prompt.size() == 5);
  CHECK(std::get<PromptRequest>(p).cache_salt == "s");
  auto t = validate_tokenize(json{{"content", "Once upon a time"}}, m);
  REQUIRE(std::holds_alternative<std::vector<int32_t>>(t));
  CHECK(std::get<std::vector<int32_t>>(t) == std::vector<int32_t>{403, 407, 261, 378});
  CHECK(std::holds_alternative<ApiError>(validate_prompt_body(
      json{{"prompt", "a"}, {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}},
      m)));
}

TEST_CASE("ServerOptions::validate checks every range and name") {
  ServerOptions o;
  CHECK(o.validate().ok());
  CHECK(o.http_threads == o.max_concurrent_requests + o.max_queued_requests + 8);
  auto bad = [](auto mutate) {
    ServerOptions x;
    mutate(x);
    return !x.validate().ok();
  };
  CHECK(bad([](ServerOptions& x) { x.port = 70000; }));
  CHECK(bad([](ServerOptions& x) { x.backend = "tpu"; }));
  CHECK(bad([](ServerOptions& x) { x.kv_dtype = "q4"; }));
  CHECK(bad([](ServerOptions& x) { x.block_size = 0; }));
  CHECK(bad([](ServerOptions& x) { x.n_threads = 0; }));
  CHECK(bad([](ServerOptions& x) { x.kv_pool_mib = 0; }));
  CHECK(bad([](ServerOptions& x) { x.max_concurrent_requests = 0; }));
  CHECK(bad([](ServerOptions& x) { x.max_queued_requests = -1; }));
  CHECK(bad([](ServerOptions& x) { x.max_body_bytes = 10; }));
  CHECK(bad([](ServerOptions& x) { x.write_policy = "sometimes"; }));
  CHECK(bad([](ServerOptions& x) { x.log_level_name = "loud"; }));
  CHECK(bad([](ServerOptions& x) { x.host_cache_gb = -1; }));
  CHECK(bad([](ServerOptions& x) { x.disk_cache_gb = -1; }));
  CHECK(bad([](ServerOptions& x) { x.host.clear(); }));
  CHECK(bad([](ServerOptions& x) { x.cpu_isa_option.requested = "bogus"; }));
  ServerOptions d;
  d.log_level_name = "debug";
  REQUIRE(d.validate().ok());
  CHECK(d.log_level == LogLevel::kDebug);
}

TEST_CASE("--cpu-isa wins over PREFIXD_CPU_ISA, which wins over auto; validate resolves it") {
  auto parsed = [](const std::string& command_line, const char* env) {
    CLI::App app;
    ServerOptions o;
    register_server_flags(app, o);
    app.parse(command_line);
    o.cpu_isa_option.take_env(env);
    return o;
  };
  ServerOptions none = parsed("", nullptr);
  CHECK(none.cpu_isa_option.source == "auto");
  REQUIRE(none.validate().ok());
  CHECK(none.cpu_isa == cpu::best_cpu_isa());
  CHECK(none.cpu_isa_option.describe(none.cpu_isa) ==
        std::string("CPU instruction set ") + cpu::cpu_isa_name(cpu::best_cpu_isa()) +
            " (auto; CPU features: " + cpu::cpu_feature_string() + ")");

  ServerOptions empty_env = parsed("", "");
  CHECK(empty_env.cpu_isa_option.source == "auto");

  ServerOptions env = parsed("", "portable");
  CHECK(env.cpu_isa_option.source == "PREFIXD_CPU_ISA");
  CHECK(env.cpu_isa_option.requested == "portable");
  REQUIRE(env.validate().ok());
  CHECK(env.cpu_isa == cpu::CpuIsa::kPortable);
  CHECK(env.cpu_isa_option.describe(env.cpu_isa) ==
        "CPU instruction set portable (PREFIXD_CPU_ISA=portable; CPU features: " +
            cpu::cpu_feature_string() + ")");

  ServerOptions flag = parsed("--cpu-isa portable", "bogus");
  CHECK(flag.cpu_isa_option.source == "--cpu-isa");
  CHECK(flag.cpu_isa_option.requested == "portable");
  REQUIRE(flag.validate().ok());
  CHECK(flag.cpu_isa == cpu::CpuIsa::kPortable);
  CHECK(flag.cpu_isa_option.describe(flag.cpu_isa) ==
        "CPU instruction set portable (--cpu-isa portable; CPU features: " +
            cpu::cpu_feature_string() + ")");

  ServerOptions flag_auto = parsed("--cpu-isa auto", "portable");
  REQUIRE(flag_auto.validate().ok());
  CHECK(flag_auto.cpu_isa == cpu::best_cpu_isa());
}

TEST_CASE("an unknown or unsupported CPU instruction set is an error naming its source") {
  CpuIsaOption flag;
  flag.requested = "bogus";
  flag.source = "--cpu-isa";
  Result<cpu::CpuIsa> unknown = flag.choose();
  REQUIRE(!unknown.ok());
  CHECK(unknown.message().rfind("--cpu-isa: ", 0) == 0);
  CHECK(unknown.message().find("'bogus'") != std::string::npos);
  CHECK(unknown.message().find(cpu::cpu_isa_choices()) != std::string::npos);

  CpuIsaOption env;
  env.take_env("bogus");
  REQUIRE(!env.choose().ok());
  CHECK(env.choose().message().rfind("PREFIXD_CPU_ISA: ", 0) == 0);

  for (cpu::CpuIsa isa : cpu::all_cpu_isas()) {
    CpuIsaOption o;
    o.requested = cpu::cpu_isa_name(isa);
    o.source = "--cpu-isa";
    Result<cpu::CpuIsa> r = o.choose();
    CHECK(r.ok() == cpu::cpu_supports(isa));
    if (r.ok()) {
      CHECK(r.value() == isa);
    } else {
      CHECK(r.message().find(cpu::cpu_feature_string()) != std::string::npos);
    }
  }
}

TEST_CASE("AdmissionGate admits up to its limit and tickets release their slot") {
  AdmissionGate gate(2);
  CHECK(gate.try_acquire());
  CHECK(gate.try_acquire());
  CHECK(!gate.try_acquire());
  {
    AdmissionTicket t(&gate);
    CHECK(gate.in_flight() == 2);
  }
  CHECK(gate.in_flight() == 1);
  CHECK(gate.try_acquire());
}

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
  MetricsSnapshot s;
  s.prompt_tokens = 100;
  s.cached_tokens_device = 32;
  s.cached_tokens_host = 16;
  s.generated_tokens = 9;
  s.pool_capacity_bytes = 4096;
  s.running = 2;
  const std::string text = m.render(s);
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
  s.host_evictions = 3;
  CHECK(m.render(s).find("prefixd_evictions_total{tier=\"host\"} 3\n") != std::string::npos);
  CHECK(m.requests(RequestOutcome::kCompleted) == 2);
}

TEST_CASE("Metrics exposition carries prefixd_build_info (backend, CPU instruction set)") {
  Metrics m;
  MetricsSnapshot s;
  s.backend_name = "cpu";
  s.cpu_isa_name = "avx2";
  CHECK(m.render(s).find("# TYPE prefixd_build_info gauge\n"
                         "prefixd_build_info{cpu_isa=\"avx2\",backend=\"cpu\"} 1\n") !=
        std::string::npos);
  CHECK(m.render(s).find("# HELP prefixd_build_info ") != std::string::npos);
}
