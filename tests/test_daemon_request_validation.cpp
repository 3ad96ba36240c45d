// Unit tests of the daemon's pure parts: request validation (JSON body ->
// engine Request or ApiError), server option validation, the CPU instruction
// set option, the admission gate, the Prometheus exposition, the route table,
// the completion fold and envelope, ApiError's factories and the one
// StatsSnapshot behind /metrics, /v1/cache/stats and the dashboard.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "daemon/api/cache_handlers.h"
#include "daemon/api/completion_response.h"
#include "daemon/api/daemon_context.h"
#include "daemon/api/routes.h"
#include "daemon/commands/generate_command.h"
#include "daemon/cpu_isa_option.h"
#include "daemon/model_source.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/monitoring/metrics.h"
#include "daemon/monitoring/stats_snapshot.h"
#include "daemon/server_options.h"
#include "daemon/validation/request_validation.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/shared_dir.h"

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

namespace {

// The ApiError of a body that parse_json_body refuses.
ApiError body_error(const std::string& body) {
  auto r = parse_json_body(body);
  REQUIRE(std::holds_alternative<ApiError>(r));
  return std::get<ApiError>(r);
}

// `{"a": ` + levels - 1 arrays, closed: `levels` containers deep in all.
std::string nested_body(int levels) {
  return "{\"a\": " + std::string(static_cast<size_t>(levels - 1), '[') +
         std::string(static_cast<size_t>(levels - 1), ']') + "}";
}

// `{"p": [0, 0, ...]}` with n zeros: n + 2 values (the object and the array count).
std::string zeros_body(int64_t n) {
  std::string b = "{\"p\": [";
  b.reserve(static_cast<size_t>(2 * n + 16));
  for (int64_t i = 0; i < n; ++i) b += i == 0 ? "0" : ",0";
  return b + "]}";
}

}  // namespace

TEST_CASE("parse_json_body refuses an 8 MiB deeply nested body once it is 64 levels deep") {
  // {"a":[[[[... for 8 MiB, never closed: refused at the 65th level, not parsed further.
  const std::string body = "{\"a\":" + std::string(8u << 20, '[');
  ApiError e = body_error(body);
  CHECK(e.status == 400);
  CHECK(e.code == "json_too_deep");
  CHECK(e.param.empty());
  CHECK(e.message == "the body has JSON nesting deeper than 64 levels");
  // Closed, the same depth is still refused before its syntax matters.
  CHECK(body_error("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}").code ==
        "json_too_deep");
}

TEST_CASE("parse_json_body accepts 64 levels of nesting and refuses 65") {
  static_assert(kMaxJsonDepth == 64);
  CHECK(std::holds_alternative<json>(parse_json_body(nested_body(64))));
  ApiError e = body_error(nested_body(65));
  CHECK(e.status == 400);
  CHECK(e.message == "the body has JSON nesting deeper than 64 levels");
  // Objects count as levels as arrays do.
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  objects += "1" + std::string(65, '}');
  CHECK(body_error(objects).message == "the body has JSON nesting deeper than 64 levels");
}

TEST_CASE("parse_json_body accepts 1,000,000 values and refuses one more") {
  static_assert(kMaxJsonValues == 1000000);
  auto ok = parse_json_body(zeros_body(kMaxJsonValues - 2));
  REQUIRE(std::holds_alternative<json>(ok));
  CHECK(std::get<json>(ok)["p"].size() == static_cast<size_t>(kMaxJsonValues - 2));
  ApiError e = body_error(zeros_body(kMaxJsonValues - 1));
  CHECK(e.status == 400);
  CHECK(e.code == "json_too_many_values");
  CHECK(e.param.empty());
  CHECK(e.message == "the body is JSON with more than 1000000 values");
  // Empty containers are values too.
  std::string empties = "{\"p\": [[]";
  for (int64_t i = 1; i < kMaxJsonValues; ++i) empties += ",{}";
  CHECK(body_error(empties + "]}").code == "json_too_many_values");
}

TEST_CASE("parse_json_body reports a syntax error with its position") {
  ApiError e = body_error("{\"a\": ");
  CHECK(e.status == 400);
  CHECK(e.code == "invalid_json");
  CHECK(e.message.rfind("the body is not valid JSON: [json.exception.parse_error.101] parse error "
                        "at line 1, column 7",
                        0) == 0);
}

TEST_CASE("cache_salt is at most 256 bytes") {
  static_assert(kMaxCacheSaltBytes == 256);
  const std::string salt_256(256, 's');
  const std::string salt_1m(1u << 20, 's');
  // Through the body parser, as the handlers call it.
  auto generation = [](const std::string& salt) {
    auto body = parse_json_body("{\"prompt\": [1, 2], \"cache_salt\": \"" + salt + "\"}");
    REQUIRE(std::holds_alternative<json>(body));
    return validate_generation(std::get<json>(body), ids_only_model(), false);
  };
  auto ok = generation(salt_256);
  REQUIRE(std::holds_alternative<GenerationRequest>(ok));
  CHECK(std::get<GenerationRequest>(ok).request.cache_salt == salt_256);
  ApiError e = error_of(generation(salt_1m));
  CHECK(e.status == 400);
  CHECK(e.code == "invalid_value");
  CHECK(e.param == "cache_salt");
  CHECK(e.message == "'cache_salt' is 1048576 bytes; at most 256 bytes are accepted");
  CHECK(error_of(generation(salt_256 + "s")).message ==
        "'cache_salt' is 257 bytes; at most 256 bytes are accepted");

  // The cache endpoints' bodies too.
  auto p =
      validate_prompt_body(json{{"prompt", {1, 2}}, {"cache_salt", salt_256}}, ids_only_model());
  REQUIRE(std::holds_alternative<PromptRequest>(p));
  CHECK(std::get<PromptRequest>(p).cache_salt == salt_256);
  auto big =
      validate_prompt_body(json{{"prompt", {1, 2}}, {"cache_salt", salt_1m}}, ids_only_model());
  REQUIRE(std::holds_alternative<ApiError>(big));
  CHECK(std::get<ApiError>(big).status == 400);
  CHECK(std::get<ApiError>(big).param == "cache_salt");
  CHECK(std::get<ApiError>(big).message ==
        "'cache_salt' is 1048576 bytes; at most 256 bytes are accepted");
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
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", std::string(100000, 'x')}}, m, false));
  CHECK(e.param == "stop");
  CHECK(e.message == "a stop string is 100000 bytes; at most 1024 bytes are accepted");
  CHECK(std::holds_alternative<GenerationRequest>(
      validate_generation(json{{"prompt", {1}}, {"stop", std::string(1024, 'x')}}, m, false)));
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", std::vector<std::string>(17, "a")}}, m, false));
  CHECK(e.message == "at most 16 stop strings are supported; got 17");
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
  auto file = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
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
  CHECK(o.http_threads == std::max(4096, o.max_concurrent_requests + o.max_queued_requests + 8));
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

TEST_CASE("without --model, serve and generate use the bundled stories260K in models/") {
  CHECK(ServerOptions{}.model == "stories260K");
  CHECK(GenerateOptions{}.model == "stories260K");
  const std::string bundled = std::string(PREFIXD_SOURCE_DIR) + "/models/stories260K.gguf";
  CHECK(bundled_model_path() == bundled);
  // The name resolves to the bundled file without touching the cache directory.
  Result<std::string> path = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_MESSAGE(path.ok(), path.message());
  CHECK(*path == bundled);
  // It is the shared test model, byte for byte.
  auto read_all = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string bytes = read_all(bundled);
  CHECK(bytes.size() == 1185376);
  CHECK(bytes == read_all(prefixd::testing::shared_dir() + "/models/stories260K.gguf"));
  // Any other name is still a path, and a missing path is an error naming it.
  Result<std::string> missing = resolve_model_path("no-such-model.gguf", "/nonexistent");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message() == "model file 'no-such-model.gguf' does not exist");
}

TEST_CASE("$PREFIXD_MODELS_DIR, when set and not empty, is where the bundled model is looked up") {
  const std::string compiled = std::string(PREFIXD_SOURCE_DIR) + "/models/stories260K.gguf";
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", "/nonexistent/bundle/models", 1) == 0);
  CHECK(bundled_model_path() == "/nonexistent/bundle/models/stories260K.gguf");
  Result<std::string> missing = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("'/nonexistent/bundle/models/stories260K.gguf'") != std::string::npos);
  CHECK(missing.message().find("$PREFIXD_MODELS_DIR") != std::string::npos);
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", (prefixd::testing::shared_dir() + "/models").c_str(), 1) == 0);
  Result<std::string> shared = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_MESSAGE(shared.ok(), shared.message());
  CHECK(*shared == prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", "", 1) == 0);  // empty counts as unset
  CHECK(bundled_model_path() == compiled);
  REQUIRE(::unsetenv("PREFIXD_MODELS_DIR") == 0);
  CHECK(bundled_model_path() == compiled);
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

TEST_CASE("the route table: one row per method and path, all in api.md, /health the only public") {
  auto method_name = [](Method m) {
    return m == Method::kGet ? "GET" : m == Method::kPost ? "POST" : "DELETE";
  };
  std::ifstream in(std::string(PREFIXD_SOURCE_DIR) + "/daemon/api.md");
  std::stringstream api_md;
  api_md << in.rdbuf();
  REQUIRE(!api_md.str().empty());
  std::set<std::string> seen;
  std::vector<std::string> public_paths, counted_paths, httplib_body_paths;
  for (const Route& r : routes()) {
    const std::string endpoint = std::string(method_name(r.method)) + " " + r.path;
    CHECK_MESSAGE(seen.insert(endpoint).second, endpoint);
    CHECK_MESSAGE(api_md.str().find(endpoint) != std::string::npos, endpoint);
    const bool has_handler = r.handler != nullptr;
    CHECK_MESSAGE(has_handler, endpoint);
    if (r.access == Access::kPublic) public_paths.push_back(r.path);
    if ((r.flags & kCountsRequests) != 0) counted_paths.push_back(r.path);
    if ((r.flags & kHttplibBody) != 0) httplib_body_paths.push_back(r.path);
  }
  CHECK(seen.size() == 20);
  CHECK(public_paths == std::vector<std::string>{"/health"});
  CHECK(counted_paths ==
        std::vector<std::string>{"/v1/completions", "/v1/chat/completions", "/v1/messages"});
  CHECK(httplib_body_paths ==
        std::vector<std::string>{"/v1/cache/prefixes/pin", "/v1/cache/prefixes/unpin"});
}

TEST_CASE("ApiError factories: status, type, param and code of each") {
  auto check = [](const ApiError& e, int status, const char* type, const char* param,
                  const char* code) {
    CHECK(e.status == status);
    CHECK(e.type == type);
    CHECK(e.param == param);
    CHECK(e.code == code);
  };
  check(ApiError::bad_request("n", "m", "unsupported_value"), 400, "invalid_request_error", "n",
        "unsupported_value");
  check(ApiError::unauthorized("m"), 401, "authentication_error", "", "invalid_api_key");
  check(ApiError::not_found("", "m"), 404, "invalid_request_error", "", "not_found");
  check(ApiError::not_found("model", "m", "model_not_found"), 404, "invalid_request_error", "model",
        "model_not_found");
  check(ApiError::conflict("id", "m", "pin_failed"), 409, "invalid_request_error", "id",
        "pin_failed");
  check(ApiError::payload_too_large(65536), 413, "invalid_request_error", "", "request_too_large");
  CHECK(ApiError::payload_too_large(65536).message ==
        "the request body is larger than the limit of 65536 bytes");
  check(ApiError::unsupported_media_type("m"), 415, "invalid_request_error", "",
        "unsupported_media_type");
  check(ApiError::too_many_requests("m"), 429, "rate_limit_error", "", "queue_full");
  check(ApiError::internal_error("m"), 500, "server_error", "", "");
  check(ApiError::service_unavailable("m"), 503, "unavailable", "", "shutting_down");
  check(ApiError::from_status(400), 400, "invalid_request_error", "", "");
  check(ApiError::from_status(502), 502, "server_error", "", "");
  CHECK(ApiError::from_status(502).message == "HTTP error 502");
  const json j = ApiError::bad_request("", "bad", "invalid_json").to_json();
  CHECK(j == json{{"error",
                   {{"message", "bad"},
                    {"type", "invalid_request_error"},
                    {"param", nullptr},
                    {"code", "invalid_json"}}}});
}

namespace {

EngineEvent token_event(int32_t token, const std::string& text) {
  EngineEvent e;
  e.type = EngineEvent::Type::kToken;
  e.token = token;
  e.text = text;
  return e;
}

EngineEvent finished_event(FinishReason finish, const std::string& held_back_text = "") {
  EngineEvent e;
  e.type = EngineEvent::Type::kFinished;
  e.finish = finish;
  e.text = held_back_text;
  e.usage.prompt_tokens = 4;
  e.usage.completion_tokens = 3;
  e.usage.cached_tokens = 2;
  return e;
}

}  // namespace

TEST_CASE("one fold for both deliveries: a stream's chunks add up to the whole answer") {
  const std::vector<EngineEvent> wakeup1 = {token_event(5, "Once"), token_event(6, "")};
  const std::vector<EngineEvent> wakeup2 = {token_event(7, " upon"),
                                            finished_event(FinishReason::kLength, " a"),
                                            token_event(8, " never folded")};
  for (const bool chat : {false, true}) {
    CAPTURE(chat);
    const CompletionHead head{"id-1", 1700000000, "m", chat};
    CompletionFold whole;
    CHECK(whole.add(wakeup1) == 2);
    CHECK(whole.add(wakeup2) == 2);  // stops at the event that ends the request
    CHECK(whole.add(wakeup2) == 0);
    CHECK(whole.finished);
    CHECK(whole.text == "Once upon a");
    CHECK(whole.token_ids == std::vector<int32_t>{5, 6, 7});
    CHECK(whole.outcome() == RequestOutcome::kCompleted);
    CHECK_FALSE(completion_error(whole, Delivery::kWhole).has_value());
    CHECK_FALSE(completion_error(whole, Delivery::kStream).has_value());

    const json w = completion_json(head, whole);
    CHECK(w["id"] == "id-1");
    CHECK(w["created"] == 1700000000);
    CHECK(w["model"] == "m");
    CHECK(w["object"] == (chat ? "chat.completion" : "text_completion"));
    const json& choice = w["choices"][0];
    CHECK(choice["finish_reason"] == "length");
    CHECK(choice["logprobs"].is_null());
    CHECK(choice["token_ids"] == json{5, 6, 7});
    if (chat) {
      CHECK(choice["message"] == json{{"role", "assistant"}, {"content", "Once upon a"}});
    } else {
      CHECK(choice["text"] == "Once upon a");
    }
    CHECK(w["usage"]["total_tokens"] == 7);
    CHECK(w["usage"]["prompt_tokens_details"]["cached_tokens"] == 2);
    CHECK(w["prefix_cache"]["cached_tokens"] == 2);

    // The chunks a stream sends for the same events carry the same text.
    std::string streamed;
    for (const EngineEvent& e : {wakeup1[0], wakeup1[1], wakeup2[0]}) {
      const json c = chunk_json(head, e.text, {&e.token, 1});
      CHECK(c["object"] == (chat ? "chat.completion.chunk" : "text_completion"));
      CHECK(c["choices"][0]["finish_reason"].is_null());
      streamed += chat ? c["choices"][0]["delta"].value("content", "")
                       : c["choices"][0]["text"].get<std::string>();
    }
    streamed += wakeup2[1].text;
    CHECK(streamed == whole.text);
    const json last = chunk_json(head, "", {}, whole.finish);
    CHECK(last["choices"][0]["finish_reason"] == "length");
    CHECK(last["id"] == w["id"]);
    const json usage = usage_chunk_json(head, whole.usage);
    CHECK(usage["choices"] == json::array());
    CHECK(usage["usage"] == w["usage"]);
    CHECK(usage["prefix_cache"] == w["prefix_cache"]);
  }
  const json role = role_chunk_json(CompletionHead{"id-2", 0, "m", true});
  CHECK(role["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
}

TEST_CASE("a failed request answers 500 and a cancelled one 503 (no code inside a stream)") {
  EngineEvent error;
  error.type = EngineEvent::Type::kError;
  error.error = "out of blocks";
  CompletionFold failed;
  failed.add(std::vector<EngineEvent>{token_event(1, "x"), error});
  CHECK(failed.failed);
  CHECK(failed.outcome() == RequestOutcome::kError);
  for (const Delivery d : {Delivery::kWhole, Delivery::kStream}) {
    std::optional<ApiError> e = completion_error(failed, d);
    REQUIRE(e.has_value());
    CHECK(e->status == 500);
    CHECK(e->type == "server_error");
    CHECK(e->message == "the engine failed this request: out of blocks");
  }
  CompletionFold engine_error;
  engine_error.add(std::vector<EngineEvent>{finished_event(FinishReason::kError)});
  CHECK(completion_error(engine_error, Delivery::kWhole)->message ==
        "the engine failed this request");

  CompletionFold cancelled;
  cancelled.add(std::vector<EngineEvent>{finished_event(FinishReason::kCancelled)});
  CHECK(cancelled.outcome() == RequestOutcome::kCancelled);
  std::optional<ApiError> whole = completion_error(cancelled, Delivery::kWhole);
  std::optional<ApiError> stream = completion_error(cancelled, Delivery::kStream);
  REQUIRE(whole.has_value());
  REQUIRE(stream.has_value());
  CHECK(whole->status == 503);
  CHECK(whole->code == "shutting_down");
  CHECK(stream->status == 503);
  CHECK(stream->code.empty());
  CHECK(stream->message == "the request was cancelled (server shutting down)");
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
                           "prefixd_remote_servers 2\n"}) {
    CHECK_MESSAGE(text.find(line) != std::string::npos, line);
  }
  // No disk tier: its corrupt-record sample stays out while the remote one is in.
  CHECK(text.find("prefixd_corrupt_records_total{tier=\"disk\"}") == std::string::npos);
  const json stats = cache_stats_json(s, 16);
  CHECK(stats["cached_tokens"]["remote"] == 48);
  CHECK(stats["tiers"]["remote"]["hits"] == 3);
  CHECK(stats["tiers"]["remote"]["servers"] == 2);
  CHECK(stats["tiers"]["remote"]["unauthenticated_records"] == 1);
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
